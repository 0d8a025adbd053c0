"""Checks on a target PID before anything is attached to it."""

from __future__ import annotations

import os
import select

import psutil

from ..errors import KernelThread, NoSuchProcess, NotRoot, SelfAttach, ThreadId, ZombieProcess

PF_KTHREAD = 0x00200000


def require_root() -> None:
    """Raise NotRoot unless this process may load BPF programs."""
    if os.geteuid() != 0:
        raise NotRoot("rlscope-top needs root to load eBPF programs",
                      hint="run it with sudo, or as root (CAP_BPF and CAP_PERFMON are needed)")


def check_target(pid: int) -> psutil.Process:
    """Validate that ``pid`` is a live user-space process other than us.

    Returns:
        The psutil handle of the target.

    Raises:
        NoSuchProcess, ThreadId, SelfAttach, ZombieProcess, KernelThread.
    """
    if pid <= 0:
        raise NoSuchProcess(f"{pid} is not a valid PID", hint="give the PID of a running process", pid=pid)
    try:
        proc = psutil.Process(pid)
        status = proc.status()
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"no process with PID {pid}", pid=pid,
                            hint="check the PID with `ps -ef` or `pgrep -f train.py`") from None
    owner = _thread_group(pid)
    if owner not in (None, pid):        # /proc/TID answers for a thread too: its probes would see nothing
        raise ThreadId(f"PID {pid} is a thread of process {owner} ({_name_of(owner)}), not a process",
                       pid=pid, hint=f"attach to the process: rlscope-top {owner}")
    if pid == os.getpid() or pid in _our_ancestors_below_init():
        raise SelfAttach(f"PID {pid} is rlscope-top itself (or the sudo or timeout that runs it)", pid=pid,
                         hint="give the PID of the training process, not of the monitor")
    if status == psutil.STATUS_ZOMBIE:
        raise ZombieProcess(f"PID {pid} ({_name(proc)}) is a zombie: it has exited", pid=pid,
                            hint="the training process is gone; restart it and attach again")
    if _is_kernel_thread(pid):
        raise KernelThread(f"PID {pid} ({_name(proc)}) is a kernel thread", pid=pid,
                           hint="attach to a user-space training process (python ...)")
    return proc


def _thread_group(pid: int) -> int | None:
    """The process (thread group) ``pid`` belongs to, or None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(ln.split()[1]) for ln in f if ln.startswith("Tgid:")), None)
    except (OSError, ValueError, IndexError):
        return None


def command_line(pid: int) -> str:
    """The target's command line, or its name when that is unreadable."""
    try:
        proc = psutil.Process(pid)
        return " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return ""


def is_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class AliveCheck:
    """``is_alive(pid)`` for a loop that asks 50 times a second: a pidfd polled (~0.3 us;
    psutil reads /proc/PID/stat twice, ~30 us), psutil where there is no pidfd."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._fd = None
            return
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)    # readable once it has exited (a zombie too)

    def __call__(self) -> bool:
        if self._fd is None:
            return is_alive(self.pid)
        return not self._poll.poll(0)

    def close(self) -> None:
        """Close the pidfd (asked after that, it falls back to psutil)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def thread_name(pid: int, tid: int) -> str:
    """The comm of one thread, or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def thread_running(pid: int, tid: int) -> bool:
    """Whether a thread is in state R right now."""
    st = thread_stat(pid, tid)
    return st is not None and st[0] == "R"


def thread_stat(pid: int, tid: int) -> tuple[str, int] | None:
    """A thread's state and the CPU it last ran on (/proc's stat fields 3 and 39), or None
    where it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[36])
    except (OSError, IndexError, ValueError):
        return None


def _is_kernel_thread(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return bool(int(fields[6]) & PF_KTHREAD)
    except (OSError, IndexError, ValueError):
        return False


def _our_ancestors_below_init() -> set[int]:
    """The monitor and the wrappers that started it (sudo, the shell)."""
    out = set()
    try:
        p = psutil.Process(os.getpid()).parent()
        while p is not None and p.pid > 1 and p.name() in ("sudo", "timeout", "su", "setpriv"):
            out.add(p.pid)
            p = p.parent()
    except psutil.Error:
        pass
    return out


def _name_of(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"
