"""Getting the GPU agent (probes/gpu_agent.c) into a process, and the libcupti it loads.

- :func:`agent_path` is the built agent, copied once into a root-owned directory so that
  a process of another user can map it and nobody but root can replace it.
- :func:`choose_cupti` picks the libcupti for a target: the one it maps, else one next
  to its CUDA runtime, else the one installed here when the CUDA major versions match.
- :func:`preflight` says, before anything is touched, why injecting into a PID would be
  refused (ptrace forbidden, the process stopped, traced, exiting, in a container, or
  mapping no CUDA library).
- :func:`inject` loads the agent into a running process with ptrace (pyinjector): the
  process pauses for a few milliseconds while dlopen runs in it.

Errors are :class:`~rlscope_top.errors.GpuActivityUnavailable`: one line, a hint, exit 2.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import stat
import time

from ..errors import GpuActivityUnavailable

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = os.path.join(HERE, "librlscope_gpu.so")
INSTALL_DIR = "/var/lib/rlscope-top/lib"
CUDA_LIB = re.compile(r"/(libcuda\.so[.\d]*|libcudart\.so[.\d]*)$")
CUPTI_LIB = re.compile(r"/libcupti\.so[.\d]*$")
REGION_WAIT_S = 5.0
CAP_SYS_PTRACE = 19


def built_agent() -> str:
    """The agent as scripts/setup.sh built it (raises when it was not built)."""
    if not os.path.isfile(BUILT):
        raise GpuActivityUnavailable("the GPU agent is not built (probes/librlscope_gpu.so is missing)",
                                     hint="run `sudo bash scripts/setup.sh`; it builds the agent with gcc")
    return BUILT


def agent_path(install_dir: str = INSTALL_DIR) -> str:
    """A root-owned, read-only copy of the agent that any user's process can map.

    The copy is named by its content hash, made with O_EXCL and renamed into place, and
    its directory must be a real directory owned by root and writable only by root.
    """
    src = built_agent()
    with open(src, "rb") as f:
        data = f.read()
    dst = os.path.join(install_dir, f"librlscope_gpu-{hashlib.sha256(data).hexdigest()[:16]}.so")
    _safe_dir(install_dir)
    try:
        st = os.lstat(dst)
        if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 and st.st_size == len(data):
            return dst
        os.unlink(dst)              # anything else under that name: replaced
    except FileNotFoundError:
        pass
    tmp = f"{dst}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.rename(tmp, dst)
    return dst


def _safe_dir(path: str) -> None:
    """Create ``path`` (0755, root) or check that it is a root-owned real directory."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    for p in (os.path.dirname(path), path):
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise GpuActivityUnavailable(f"{p} is not a root-owned directory that only root can write",
                                         hint=f"remove it (`sudo rm -rf {p}`); rlscope-top recreates it")


def _maps(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return [line.split(None, 5)[5].rstrip("\n") for line in f if len(line.split(None, 5)) == 6]
    except OSError:
        return []


def cuda_libs(pid: int) -> list[str]:
    """The CUDA driver and runtime libraries a process maps."""
    return sorted({p for p in _maps(pid) if CUDA_LIB.search(p)})


def choose_cupti(pid: int) -> str:
    """The libcupti the agent in ``pid`` should load ("" when none is found; the agent then
    tries the library search path). RLSCOPE_CUPTI_LIB overrides (tests use a stand-in)."""
    if os.environ.get("RLSCOPE_CUPTI_LIB"):
        return os.environ["RLSCOPE_CUPTI_LIB"]
    maps = _maps(pid)
    mapped = sorted({p for p in maps if CUPTI_LIB.search(p)})
    if mapped:
        return mapped[0]
    for lib in sorted({p for p in maps if "libcudart.so" in p}):
        near = sorted(glob.glob(os.path.join(os.path.dirname(lib), "libcupti.so.*")))
        if near:
            return near[0]
    return local_cupti(_cuda_major(maps))


def local_cupti(major: int | None = None) -> str:
    """A libcupti installed beside rlscope-top (the nvidia-cuda-cupti wheel), if its major fits."""
    try:
        import nvidia  # noqa: PLC0415 - namespace package of the CUDA wheels
    except ImportError:
        return ""
    for base in list(nvidia.__path__):
        for lib in sorted(glob.glob(os.path.join(base, "cu*", "lib", "libcupti.so.*"))):
            m = re.search(r"libcupti\.so\.(\d+)", lib)
            if major is None or (m and int(m.group(1)) == major):
                return lib
    return ""


def _cuda_major(maps: list[str]) -> int | None:
    for p in maps:
        m = re.search(r"libcudart\.so\.(\d+)", p)
        if m:
            return int(m.group(1))
    return None


def _status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def _ptrace_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


def _have_cap(cap: int) -> bool:
    eff = _status(os.getpid()).get("CapEff", "0")
    return bool(int(eff, 16) >> cap & 1)


def preflight(pid: int) -> None:
    """Raise GpuActivityUnavailable (one line, a hint) when injecting into ``pid`` must not be tried."""
    st = _status(pid)
    if not st:
        raise GpuActivityUnavailable(f"no process with PID {pid}", hint="check the PID with `ps -ef`", pid=pid)
    scope = _ptrace_scope()
    if scope >= 3:
        raise GpuActivityUnavailable(
            "ptrace is disabled on this machine (kernel.yama.ptrace_scope=3)", pid=pid,
            hint="it stays off until reboot; start the job with RLSCOPE_GPU_ACTIVITY=1, or use `rlscope-top run`")
    if not _have_cap(CAP_SYS_PTRACE):
        raise GpuActivityUnavailable(
            "rlscope-top lacks CAP_SYS_PTRACE (a container, or capabilities dropped)", pid=pid,
            hint="run it as root on the host, or add CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE)")
    state = st.get("State", "?")[:1]
    if state in "TtZX":
        what = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger", "Z": "a zombie: it has exited",
                "X": "exiting"}[state]
        raise GpuActivityUnavailable(f"PID {pid} is {what}; the GPU agent is not injected", pid=pid,
                                     hint="continue it first (`kill -CONT PID`)" if state in "Tt" else
                                     "the job is gone; start it again")
    tracer = st.get("TracerPid", "0").strip()
    if tracer != "0":
        raise GpuActivityUnavailable(f"PID {pid} is already traced by PID {tracer} (gdb, strace, py-spy?)", pid=pid,
                                     hint="detach that tool first; only one tracer may hold a process")
    if not cuda_libs(pid):
        raise GpuActivityUnavailable(f"PID {pid} maps no CUDA library (libcuda, libcudart): nothing to trace", pid=pid,
                                     hint="attach once the job has initialised CUDA, or drop --gpu-activity")
    try:
        mine, theirs = os.stat("/proc/self/ns/mnt").st_ino, os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        mine = theirs = 0
    if mine != theirs:
        raise GpuActivityUnavailable(f"PID {pid} runs in another mount namespace (a container)", pid=pid,
                                     hint="run rlscope-top inside that container, or start the job with "
                                          "CUDA_INJECTION64_PATH pointing at the agent")


def inject(pid: int, path: str) -> float:
    """dlopen the agent in ``pid`` through ptrace. Returns the seconds the process was held.

    Raises:
        GpuActivityUnavailable: pyinjector is missing, or ptrace / dlopen failed.
    """
    try:
        import pyinjector  # noqa: PLC0415 - only with --gpu-activity
    except ImportError:
        raise GpuActivityUnavailable("pyinjector is not installed in rlscope-top's Python", pid=pid,
                                     hint="`pip install pyinjector==1.4.0` (scripts/setup.sh installs it)") from None
    t = time.monotonic()
    try:
        pyinjector.inject(pid, path)
    except Exception as e:  # pyinjector.InjectorError carries the failing step and errno
        text = " ".join(str(e).split())[:200]
        hint = ("ptrace was refused: check kernel.yama.ptrace_scope, seccomp and CAP_SYS_PTRACE"
                if "EPERM" in text or "ermission" in text else "the process is unchanged; see `rlscope-top doctor PID`")
        raise GpuActivityUnavailable(f"could not inject the GPU agent into PID {pid}: {text}", pid=pid,
                                     hint=hint) from None
    return time.monotonic() - t
