"""``rlscope-top run [opts] -- CMD ARGS...``: launch a command with GPU activity on.

The command starts with two things in its environment:

- ``CUDA_INJECTION64_PATH``: the CUDA driver loads rlscope-top's GPU agent
  (probes/gpu_agent.c) at cuInit and it starts CUPTI tracing at once
  (``RLSCOPE_GPU_AUTOSTART``), before the first kernel; any CUDA program, Python or not.
- rlscope_top/_inject first on PYTHONPATH: a Python command's sitecustomize says hello
  with its PID and waits until the eBPF probes are attached, so nothing is missed. A
  command that is not Python (or runs ``python -S``/``-I``) never says hello: it is
  attached to as it runs, and its ``cuInit`` waits in the GPU agent until the monitor
  claims it (``RLSCOPE_GPU_HOLD_PPID``), so no kernel comes before the session.

The exit status of ``run`` is the command's (128+N when a signal N ended it).
Ctrl-C in the terminal reaches the command directly (same process group); a SIGINT or
SIGTERM sent to rlscope-top alone is forwarded to it. The session ends when the
command exits; three interrupts detach and leave the command running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Callable

from ..errors import CommandNotFound, GpuActivityUnavailable, UsageError
from ..collect.gpu_source import GpuOptions
from ..probes import gpu_inject
from ..collect import hangup
from ..collect.session import Options, run_live, run_until
from ..collect.target import require_root

INJECT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_inject")
HELLO_WAIT_S = 15.0         # a Python command says hello within this
NOT_PYTHON_WAIT_S = 1.0     # a command whose executable is not a Python interpreter: attach sooner
SI_KERNEL = 0x80            # si_code of a signal the terminal sent (to the whole process group)
GIVE_UP_AFTER = 3           # interrupts before we detach and leave the command running


class LaunchListener:
    """A private socket (in a 0700 directory) the command's sitecustomize says hello on."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rlscope-top-run-")
        self.path = os.path.join(self.dir, "hold.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.srv.setblocking(False)
        self.conn: socket.socket | None = None

    def accept(self, timeout_s: float, child_pid: int, keep_waiting: Callable[[], bool]) -> int | None:
        """The PID of the command's Python process once it said hello (None: it never did).

        Only a process of the command's own tree (SO_PEERCRED) is believed.
        """
        start = time.monotonic()
        end = start + timeout_s
        while time.monotonic() < end and keep_waiting():
            if time.monotonic() - start > NOT_PYTHON_WAIT_S and not _runs_python(child_pid):
                return None
            try:
                conn, _ = self.srv.accept()
            except (BlockingIOError, InterruptedError):
                time.sleep(0.01)
                continue
            pid = _peer_pid(conn)
            hello = _read_line(conn, 5.0)
            if pid and _in_tree(pid, child_pid) and hello.get("pid") == pid:
                self.conn = conn
                return pid
            conn.close()
        return None

    def release(self) -> None:
        """Let the held program go on (the probes are attached)."""
        if self.conn is not None:
            try:
                self.conn.sendall(b'{"t": "start"}\n')
            except OSError:
                pass
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        """Release the program, stop listening, remove the socket."""
        self.release()
        self.srv.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _runs_python(pid: int) -> bool:
    """Whether a process (or a child of it: a shell wrapper) runs a Python interpreter."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            if "python" in os.path.basename(os.readlink(f"/proc/{p}/exe")):
                return True
        except OSError:
            continue
    return False


def _peer_pid(conn: socket.socket) -> int | None:
    try:
        pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return None
    return pid


def _read_line(conn: socket.socket, timeout_s: float) -> dict:
    conn.settimeout(timeout_s)
    buf = b""
    try:
        while b"\n" not in buf and len(buf) < 4096:
            chunk = conn.recv(4096)
            if not chunk:
                break
            buf += chunk
        msg = json.loads(buf.split(b"\n", 1)[0])
    except (OSError, ValueError):
        return {}
    return msg if isinstance(msg, dict) else {}


def _in_tree(pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants."""
    for _ in range(64):
        if pid == root:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def child_env(base: dict[str, str], listener: LaunchListener, agent: str | None) -> dict[str, str]:
    """The command's environment: the hold socket, our sitecustomize, and the GPU agent."""
    env = dict(base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = INJECT_DIR + (os.pathsep + old if old else "")
    env["RLSCOPE_LAUNCH_SOCKET"] = listener.path
    if agent:
        env["CUDA_INJECTION64_PATH"] = agent
        env["RLSCOPE_GPU_AUTOSTART"] = "1"
        env["RLSCOPE_GPU_HOLD_PPID"] = str(os.getpid())    # our own child waits in cuInit until claimed
        cupti = os.environ.get("RLSCOPE_CUPTI_LIB") or gpu_inject.local_cupti()
        if cupti:
            env["RLSCOPE_CUPTI_LIB"] = cupti
    return env


def exit_status(rc: int) -> int:
    """A shell's exit status for a child's return code (signals as 128+N)."""
    return 128 - rc if rc < 0 else rc


def spawn(argv: list[str], env: dict[str, str], log_path: str | None = None) -> subprocess.Popen:
    """Start the command (its output to ``log_path`` when the screen owns the terminal)."""
    out = _open_log(log_path) if log_path else None
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    except FileNotFoundError:
        raise CommandNotFound(f"command not found: {argv[0]}", hint="check the name and PATH, e.g. `which "
                                                                    f"{argv[0]}`") from None
    except PermissionError:
        raise CommandNotFound(f"cannot execute {argv[0]}: permission denied", hint="chmod +x it, or run it "
                                                                                   "through its interpreter") from None
    except OSError as e:          # e.g. ENOEXEC: a text file with an x bit and no #! line
        raise CommandNotFound(f"cannot execute {argv[0]}: {e.strerror or e}",
                              hint="run a program or a script that starts with #!") from None
    finally:
        if out is not None:
            out.close()


def _open_log(path: str):
    """The command's output file: appended to, 0600, never through a symlink."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise UsageError(f"cannot write the command's log {path}: {e.strerror or e}",
                         hint="run from a directory you can write, where that name is not a symlink") from None
    return os.fdopen(fd, "ab")


class Forwarder:
    """Signals for the monitor become signals for the command (headless mode).

    SIGINT, SIGTERM and SIGHUP are blocked in the monitor and read with ``sigtimedwait``
    in the session's loop, which gives us who sent them: one the terminal sent went to
    the command as well and is not sent again. After a hang-up the session goes on to the
    command's exit with nothing printed (no terminal), and the summary is written.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, child: subprocess.Popen):
        self.child = child
        self.count = 0
        self.forwarded: list[int] = []

    def __enter__(self) -> Forwarder:
        signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        return self

    def __exit__(self, *exc) -> None:
        while signal.sigtimedwait(self.SIGNALS, 0) is not None:   # drop what is still pending
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def poll(self) -> None:
        """Take pending signals and pass them on."""
        while (info := signal.sigtimedwait(self.SIGNALS, 0)) is not None:
            if info.si_signo == signal.SIGHUP:
                hangup.silence_dead_terminal()
            self.count += 1
            if _to_us_alone(info) and self.child.poll() is None:
                self.child.send_signal(info.si_signo)
                self.forwarded.append(info.si_signo)


def _to_us_alone(info) -> bool:
    """Whether a signal reached the monitor and not the command: the terminal's Ctrl-C went
    to both (SI_KERNEL); its hang-up goes to the session leader alone, which then passes it
    on as a shell would (rlscope-top run straight in a tmux pane or an ssh command)."""
    if info.si_code != SI_KERNEL:
        return True
    return info.si_signo == signal.SIGHUP and os.getsid(0) == os.getpid()


def run(opts: Options, argv: list[str], live: bool) -> int:
    """Launch ``argv``, profile it until it exits, and return its exit status."""
    require_root()
    listener = LaunchListener()
    log = f"rlscope-top-run-{time.strftime('%Y%m%d-%H%M%S')}.log" if live else None
    try:
        agent = gpu_inject.agent_path()
    except GpuActivityUnavailable as e:
        _say(f"no kernel timing: {e.message} ({e.hint})")
        agent = None
    try:
        child = spawn(argv, child_env(dict(os.environ), listener, agent), log)
        # Headless: block SIGINT/SIGTERM before any thread starts (threads inherit the mask),
        # so that they can only be taken by the Forwarder, never kill us.
        with contextlib.nullcontext() if live else Forwarder(child) as fwd:
            pid = listener.accept(HELLO_WAIT_S, child.pid, keep_waiting=lambda: child.poll() is None)
            if child.poll() is not None and pid is None:
                _say(f"the command exited (status {exit_status(child.returncode)}) before it could be attached to")
                return exit_status(child.returncode)
            gpu = GpuOptions(launch=agent is not None)
            opts = dataclasses.replace(opts, pid=pid or child.pid, gpu=gpu,
                                       on_attached=listener.release)
            summary = _live(opts, child, log) if live else _headless(opts, child, fwd)
            if child.poll() is None and str(summary.get("end_reason", "")).startswith("interrupted"):
                _say(f"detached; the command (PID {child.pid}) goes on")
                return 130
            if child.poll() is None:     # --duration ended the session: the command's status is still ours
                _say(f"the session is over; waiting for the command (PID {child.pid}) to exit, "
                     "to return its status (Ctrl-C stops it)")
            return _wait_child(child, fwd)
    finally:
        listener.close()


def _headless(opts: Options, child: subprocess.Popen, fwd: Forwarder) -> dict:
    def stop_reason() -> str | None:
        fwd.poll()
        if fwd.count >= GIVE_UP_AFTER:
            return f"interrupted {fwd.count} times: detached, the command goes on"
        if child.poll() is not None:
            return f"command exited (status {exit_status(child.returncode)})"
        return None

    return run_until(opts, stop_reason)


def _live(opts: Options, child: subprocess.Popen, log: str) -> dict:
    def stop_reason() -> str | None:
        return f"command exited (status {exit_status(child.returncode)})" if child.poll() is not None else None

    summary = run_live(opts, stop_reason)
    _say(f"the command's output is in {log}")
    if child.poll() is None:           # the screen was quit first: pass the Ctrl-C on
        child.send_signal(signal.SIGINT)
        _say("sent SIGINT to the command; waiting for it to exit")
    return summary


def _wait_child(child: subprocess.Popen, fwd: Forwarder | None = None) -> int:
    """The command's exit status; a signal sent to us alone meanwhile is passed on (headless)."""
    while True:
        try:
            if fwd is None:
                return exit_status(child.wait())
            try:
                return exit_status(child.wait(timeout=0.1))
            except subprocess.TimeoutExpired:
                fwd.poll()
        except KeyboardInterrupt:       # a Ctrl-C while we wait goes to the command too
            continue


def _say(msg: str) -> None:
    print(f"rlscope-top: {msg}", file=sys.stderr, flush=True)


