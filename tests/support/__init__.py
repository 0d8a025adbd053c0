"""What the tests share besides fixtures (tests/conftest.py): paths, the real CLI's argv,
the eBPF and optional-module gates, a child process whose output lines can be awaited, and
small helpers. Imported as `support` (tests/ is on sys.path)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]       # tests/
TARGETS = HERE / "targets"
REPO = HERE.parent
CLI = [sys.executable, "-m", "rlscope_top.cli"]


def ebpf_gate() -> None:
    """Skip the test where eBPF cannot run here; fail it instead under RLSCOPE_REQUIRE_EBPF=1
    (CI), so eBPF tests never quietly skip there."""
    if why := ebpf_problem():
        if os.environ.get("RLSCOPE_REQUIRE_EBPF") == "1":
            pytest.fail(f"eBPF unavailable but RLSCOPE_REQUIRE_EBPF=1: {why}")
        pytest.skip(f"eBPF unavailable: {why}")


def ebpf_problem() -> str | None:
    """Why eBPF tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    try:
        import bcc  # noqa: F401
    except Exception as e:
        return f"bcc not importable: {e}"
    if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        return "kernel headers not linked (run scripts/setup.sh)"
    return None


def require_modules(modules: tuple[str, ...], env_var: str, extra: str) -> None:
    """Skip the test when a module its target imports is missing, unless ``env_var``=1 (set by
    .ci/run), which turns that into a failure. find_spec: no slow import in the test process."""
    import importlib.util  # noqa: PLC0415

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        why = f"not installed: {', '.join(missing)} (pip install -e '.[{extra}]', or scripts/setup.sh)"
        if os.environ.get(env_var) == "1":
            pytest.fail(f"{env_var}=1 but {why}")
        pytest.skip(why)


def _hangup_default():
    """Under ``nohup`` the suite's children would inherit SIGHUP ignored, and a monitor keeps it
    so (as it should under nohup): the SIGHUP ending test then waited 60 s and failed in a
    suite run with ``nohup bash .ci/run``. Children start with the default handler there, as
    from a terminal; elsewhere nothing runs between fork and exec."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        return None
    return lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Proc:
    """A child process whose stdout/stderr lines we can wait for (read by threads)."""

    def __init__(self, argv: list[str], **kw):
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=kw.pop("cwd", None), env=kw.pop("env", None), preexec_fn=_hangup_default())
        self.out: list[str] = []
        self.err: list[str] = []
        self._cv = threading.Condition()
        self._readers = [threading.Thread(target=self._pump, args=(src, buf), daemon=True)
                         for src, buf in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for t in self._readers:
            t.start()

    def _pump(self, src, buf):
        for line in src:
            with self._cv:
                buf.append(line)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    @property
    def pid(self) -> int:
        return self.p.pid

    def wait_line(self, needle: str, stream: str = "stdout", timeout: float = 60.0) -> str:
        buf = self.out if stream == "stdout" else self.err
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in buf:
                    if needle in line:
                        return line
                left = end - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not any(t.is_alive() for t in self._readers)):
                    break
                self._cv.wait(min(left, 0.2))
        raise AssertionError(f"{needle!r} not seen on {stream} of {self.argv[:4]} "
                             f"(rc={self.p.poll()}): {''.join(buf)[-2000:]}")

    def finish(self, sig: int | None = None, timeout: float = 60.0) -> int:
        if sig is not None and self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        for t in self._readers:
            t.join(5)
        return self.p.returncode

    def kill(self) -> None:
        """Kill it and whatever it forked or spawned (a target's workers too)."""
        import psutil  # noqa: PLC0415

        try:
            kids = psutil.Process(self.p.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass

    @property
    def stderr_text(self) -> str:
        return "".join(self.err)

    @property
    def stdout_text(self) -> str:
        return "".join(self.out)


def open_fds(pid: int) -> dict[str, str]:
    """A process's open files: fd number -> what it points at (a path, or ``anon_inode:...``);
    an fd closed while being read is left out."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def wait_file(path: Path, timeout: float = 30.0) -> None:
    """Wait for a handshake file a target writes (its readiness, never a sleep)."""
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def wait_until(cond, timeout: float = 30.0, what: str = "") -> None:
    """Poll a condition (a state the test cannot be told of by a handshake file)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what or cond}"
        time.sleep(0.05)


def load_summary(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


TO_999 = 3.29 / 1.96   # a 95% bound widened to 99.9%: a test of a 95% bound fails 1 run in 20 by design


def stated_bound_pp(summary: dict) -> float:
    """The summary's 95% bounds of its estimated categories, summed (pp); 0 when none."""
    return sum(e["bound_pp"] for e in summary["estimates"].values() if e.get("bound_pp") is not None)


def stop(m: Proc, sig: int = signal.SIGINT) -> int:
    return m.finish(sig)
