"""Fixtures: real target processes, the real CLI as a monitor, and the eBPF gate.

eBPF tests skip when bcc or root is missing, unless RLSCOPE_REQUIRE_EBPF=1 (set by
.ci/run), which turns "eBPF unavailable" into a failure.
"""

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

HERE = Path(__file__).parent
TARGETS = HERE / "targets"
REPO = HERE.parent
CLI = [sys.executable, "-m", "rlscope_top.cli"]


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


@pytest.fixture
def ebpf():
    """Gate for tests that load real BPF programs."""
    why = ebpf_problem()
    if why:
        if os.environ.get("RLSCOPE_REQUIRE_EBPF") == "1":
            pytest.fail(f"eBPF unavailable but RLSCOPE_REQUIRE_EBPF=1: {why}")
        pytest.skip(f"eBPF unavailable: {why}")


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


@pytest.fixture
def frameworks():
    """Gate for tests whose targets import TensorFlow and JAX (the `frameworks` extra)."""
    require_modules(("tensorflow", "jax", "jaxlib"), "RLSCOPE_REQUIRE_FRAMEWORKS", "frameworks")


@pytest.fixture(scope="session")
def calibration_file(tmp_path_factory) -> str:
    """Run the real `rlscope-top calibrate` once per test session into a private file."""
    if ebpf_problem():
        pytest.skip("eBPF unavailable")   # the `ebpf` gate of the test using this fails it in CI
    path = str(tmp_path_factory.mktemp("calib") / "calibration.json")
    p = subprocess.run([*CLI, "calibrate"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "RLSCOPE_CALIBRATION": path})
    assert p.returncode == 0, p.stderr
    return path


@pytest.fixture(scope="session")
def simlib(tmp_path_factory) -> str:
    """The native simulator library, compiled with gcc for this run."""
    out = tmp_path_factory.mktemp("native") / "libtoysim.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(out), str(HERE / "native" / "simlib.c")],
                   check=True)
    return str(out)


@pytest.fixture(scope="session")
def gpu_native(tmp_path_factory) -> dict:
    """The GPU agent as scripts/setup.sh built it, and stand-ins for what this machine lacks:
    a driver library (soname libcuda.so.1) and a libcupti that makes records on request."""
    sys.path.insert(0, str(HERE / "native"))
    import standins  # noqa: PLC0415

    d = tmp_path_factory.mktemp("gpu")
    return {**standins.build(str(d)), "dir": d}


class Proc:
    """A child process whose stdout/stderr lines we can wait for (read by threads)."""

    def __init__(self, argv: list[str], **kw):
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=kw.pop("cwd", None), env=kw.pop("env", None))
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
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    @property
    def stderr_text(self) -> str:
        return "".join(self.err)

    @property
    def stdout_text(self) -> str:
        return "".join(self.out)


@pytest.fixture
def spawn():
    """Start processes that are killed at the end of the test, whatever happens."""
    procs: list[Proc] = []

    def _spawn(argv: list[str], **kw) -> Proc:
        p = Proc(argv, **kw)
        procs.append(p)
        return p

    yield _spawn
    for p in reversed(procs):
        p.kill()


@pytest.fixture
def target(spawn):
    """Start a script from tests/targets and wait for its ready line."""

    def _target(script: str, *args) -> Proc:
        p = spawn([sys.executable, str(TARGETS / script), *map(str, args)], cwd=str(TARGETS))
        p.wait_line("ready", timeout=120)
        return p

    return _target


# How long attach may take before a test gives up. Nothing else depends on attach speed:
# targets start their measured work on a handshake (a go file written after "attached").
ATTACH_TIMEOUT_S = 180


@pytest.fixture
def monitor(spawn, tmp_path):
    """Run the real CLI against a PID and wait until it says `attached`."""

    def _monitor(pid: int, *extra: str, env: dict | None = None) -> tuple[Proc, Path]:
        summary = tmp_path / f"summary-{pid}.json"
        m = spawn([*CLI, "attach", str(pid), "--summary", str(summary), *extra], cwd=str(tmp_path),
                  env={**os.environ, **(env or {})})
        m.wait_line("attached to PID", stream="stderr", timeout=ATTACH_TIMEOUT_S)
        return m, summary

    return _monitor


def wait_file(path: Path, timeout: float = 30.0) -> None:
    """Wait for a handshake file a target writes (its readiness, never a sleep)."""
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def load_summary(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def stop(m: Proc, sig: int = signal.SIGINT) -> int:
    return m.finish(sig)
