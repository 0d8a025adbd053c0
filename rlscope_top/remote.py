"""``--gpu-activity``: start the GPU activity agent inside a running process that was
started without any preparation, with CPython 3.14's ``sys.remote_exec``.

``sys.remote_exec(pid, script)`` asks the target interpreter to run a script file at
its next safe point; both the monitor and the target must be CPython >= 3.14. Where
that is not so, :func:`check` raises a typed error that says how to get kernel timing
instead.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time

from ._agent import INJECT_DIR
from .errors import GpuActivityUnavailable
from .gpu_link import discover

MIN_VERSION = (3, 14)
SOCKET_WAIT_S = 10.0

SCRIPT = """import sys
sys.path.insert(0, {inject!r})
try:
    import rlscope_gpu_agent
    rlscope_gpu_agent.listen()
finally:
    sys.path.remove({inject!r})
"""

HINT = ("start the job with `rlscope-top run -- CMD`, or with RLSCOPE_GPU_ACTIVITY=1 and "
        "PYTHONPATH={inject}, or call rlscope_top.enable_gpu_activity() in it")


def target_python(pid: int) -> tuple[int, int] | None:
    """The CPython version a process runs, from the libpython or executable it maps."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"libpython(\d+)\.(\d+)", text) or re.search(r"/python(\d+)\.(\d+)\b", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    m = re.search(r"python(\d+)\.(\d+)", exe)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check(pid: int, monitor: tuple[int, int] | None = None, target: tuple[int, int] | None = None) -> None:
    """Raise GpuActivityUnavailable unless sys.remote_exec can reach ``pid`` from here.

    Args:
        pid: the target.
        monitor: this interpreter's version (default: the running one).
        target: the target's version (default: read from /proc).
    """
    monitor = monitor or sys.version_info[:2]
    hint = HINT.format(inject=INJECT_DIR)
    if tuple(monitor) < MIN_VERSION or (monitor == sys.version_info[:2] and not hasattr(sys, "remote_exec")):
        raise GpuActivityUnavailable(
            f"--gpu-activity needs CPython >= 3.14 (sys.remote_exec); rlscope-top runs on "
            f"{monitor[0]}.{monitor[1]}", hint=hint, pid=pid)
    target = target or target_python(pid)
    if target is None or tuple(target) < MIN_VERSION:
        seen = "not a CPython process" if target is None else f"CPython {target[0]}.{target[1]}"
        raise GpuActivityUnavailable(
            f"--gpu-activity needs the target on CPython >= 3.14 (sys.remote_exec); PID {pid} is {seen}",
            hint=hint, pid=pid)


def inject(pid: int) -> str | None:
    """Run the agent's listen() in ``pid`` and wait for its socket. Returns the socket path."""
    if discover(pid):
        return discover(pid)
    fd, script = tempfile.mkstemp(prefix="rlscope-top-remote-", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(SCRIPT.format(inject=INJECT_DIR))
    os.chmod(script, 0o644)          # the target may run as another user
    try:
        sys.remote_exec(pid, script)  # type: ignore[attr-defined] - CPython >= 3.14
        end = time.monotonic() + SOCKET_WAIT_S
        while time.monotonic() < end:
            path = discover(pid)
            if path:
                return path
            time.sleep(0.05)
        return None
    finally:
        os.unlink(script)
