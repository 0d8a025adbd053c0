"""``rlscope-top run [opts] -- CMD ARGS...``: launch a command with GPU activity on.

The command starts with rlscope_top/_inject first on PYTHONPATH: its sitecustomize
loads the GPU activity agent (cupti-python) before any user code, says hello to us
and waits. We attach the same eBPF probes as attach mode to the PID that said hello,
then tell it to start; so nothing the program does is missed. A command that is not
Python (or runs ``python -S``/``-I``) never says hello: it is attached to as it runs,
without kernel timing.

The exit status of ``run`` is the command's (128+N when a signal N ended it).
Ctrl-C in the terminal reaches the command directly (same process group); a SIGINT or
SIGTERM sent to rlscope-top alone is forwarded to it. The session ends when the
command exits; three interrupts detach and leave the command running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

from ._agent import INJECT_DIR
from .errors import CommandNotFound
from .gpu_collector import GpuOptions
from .gpu_link import LaunchListener
from .session import Options, run_live, run_until
from .target import require_root

HELLO_WAIT_S = 15.0         # a Python command's agent says hello within this
SI_KERNEL = 0x80            # si_code of a signal the terminal sent (to the whole process group)
GIVE_UP_AFTER = 3           # interrupts before we detach and leave the command running
NO_AGENT = ("the command did not load the GPU activity agent (not a Python program, or python -S/-I): "
            "no kernel timing; CPU-side CUDA API figures still work")


def child_env(base: dict[str, str], listener: LaunchListener) -> dict[str, str]:
    """The command's environment: our sitecustomize first on PYTHONPATH, and our socket."""
    env = dict(base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = INJECT_DIR + (os.pathsep + old if old else "")
    env.update(listener.env())
    return env


def exit_status(rc: int) -> int:
    """A shell's exit status for a child's return code (signals as 128+N)."""
    return 128 - rc if rc < 0 else rc


def spawn(argv: list[str], env: dict[str, str], log_path: str | None = None) -> subprocess.Popen:
    """Start the command (its output to ``log_path`` when the screen owns the terminal)."""
    out = open(log_path, "ab") if log_path else None      # noqa: SIM115 - closed by the child's exit
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    except FileNotFoundError:
        raise CommandNotFound(f"command not found: {argv[0]}", hint="check the name and PATH, e.g. `which "
                                                                    f"{argv[0]}`") from None
    except PermissionError:
        raise CommandNotFound(f"cannot execute {argv[0]}: permission denied", hint="chmod +x it, or run it "
                                                                                   "through its interpreter") from None
    finally:
        if out is not None:
            out.close()


class Forwarder:
    """Signals for the monitor become signals for the command (headless mode).

    SIGINT and SIGTERM are blocked in the monitor and read with ``sigtimedwait`` in
    the session's loop, which gives us who sent them: one the terminal sent went to
    the command as well and is not sent again.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

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
            self.count += 1
            if info.si_code != SI_KERNEL and self.child.poll() is None:
                self.child.send_signal(info.si_signo)
                self.forwarded.append(info.si_signo)


def _answer_other_agents(listener: LaunchListener, stop: threading.Event, notes: list[str]) -> None:
    """Later Python processes of the command (workers) run on without collection."""
    while not stop.wait(0.05):
        link = listener.accept_nowait()
        if link is None:
            continue
        hello, _ = link.wait(lambda m: m.get("t") == "hello", 2.0)
        link.send({"t": "start", "collect": False})
        link.close()
        if hello:
            notes.append(f"PID {hello.get('pid')} (a child Python process) runs without GPU collection")


def run(opts: Options, argv: list[str], live: bool) -> int:
    """Launch ``argv``, profile it until it exits, and return its exit status."""
    require_root()
    listener = LaunchListener()
    log = f"rlscope-top-run-{time.strftime('%Y%m%d-%H%M%S')}.log" if live else None
    stop_helpers = threading.Event()
    notes: list[str] = []
    try:
        child = spawn(argv, child_env(dict(os.environ), listener), log)
        # Headless: block SIGINT/SIGTERM before any thread starts (threads inherit the mask),
        # so that they can only be taken by the Forwarder, never kill us.
        with contextlib.nullcontext() if live else Forwarder(child) as fwd:
            link = listener.accept(HELLO_WAIT_S, keep_waiting=lambda: child.poll() is None)
            if child.poll() is not None and link is None:
                _say(f"the command exited (status {exit_status(child.returncode)}) before it could be attached to")
                return exit_status(child.returncode)
            pid = link.hello["pid"] if link else child.pid
            gpu = GpuOptions(link=link, no_agent_msg=None if link else NO_AGENT)
            opts = dataclasses.replace(opts, pid=pid, gpu=gpu)
            threading.Thread(target=_answer_other_agents, args=(listener, stop_helpers, notes), daemon=True,
                             name="rlscope-run-agents").start()
            summary = _live(opts, child, log) if live else _headless(opts, child, fwd)
            for n in notes:
                _say(n)
            if child.poll() is None and str(summary.get("end_reason", "")).startswith("interrupted"):
                _say(f"detached; the command (PID {child.pid}) goes on")
                return 130
            return _wait_child(child)
    finally:
        stop_helpers.set()
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


def _wait_child(child: subprocess.Popen) -> int:
    while True:
        try:
            return exit_status(child.wait())
        except KeyboardInterrupt:       # a Ctrl-C while we wait goes to the command too
            continue


def _say(msg: str) -> None:
    print(f"rlscope-top: {msg}", file=sys.stderr, flush=True)


