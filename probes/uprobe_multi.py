"""uprobe_multi links (Linux 6.6+): attach a BPF program to a function with BPF_LINK_CREATE.

bcc attaches uprobes as perf events; removing one costs ~0.1 s (an RCU grace period under
a lock), one after the other, so 35 probes took 3.5 s to detach. A uprobe_multi link is
removed by closing its fd, and links closed from several threads at once share their
grace periods: 34 links close in ~0.05 s (measured on kernel 6.18). bcc can load its
programs for this attach type (``load_func(..., attach_type=BPF_TRACE_UPROBE_MULTI)``);
the link itself is one raw bpf(2) call. Where the kernel lacks it, the loader keeps using
bcc's perf-event uprobes.
"""

from __future__ import annotations

import ctypes as ct
import os
import threading
from typing import Callable

SYS_BPF = 321                     # x86-64
BPF_PROG_LOAD, BPF_LINK_CREATE = 5, 28
BPF_PROG_TYPE_KPROBE = 2
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
ATTR_SIZE = 128

_libc = ct.CDLL(None, use_errno=True)
_supported: bool | None = None


def _attr() -> ct.Array:
    return (ct.c_uint8 * ATTR_SIZE)()


def _put(attr: ct.Array, off: int, value: int, size: int) -> None:
    ct.memmove(ct.addressof(attr) + off, ct.byref((ct.c_uint64 if size == 8 else ct.c_uint32)(value)), size)


def _bpf(cmd: int, attr: ct.Array) -> int:
    fd = _libc.syscall(SYS_BPF, cmd, ct.byref(attr), ATTR_SIZE)
    if fd < 0:
        err = ct.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def link(prog_fd: int, path: str, offset: int, ret: bool, pid: int, cookie: int = 0) -> int:
    """Attach ``prog_fd`` at file ``offset`` of ``path`` for process ``pid`` (its return, with
    ``ret``); the program reads ``cookie`` with bpf_get_attach_cookie. Returns the link's fd:
    close it to detach. Raises OSError."""
    p = ct.create_string_buffer(path.encode())
    offs = (ct.c_uint64 * 1)(offset)
    cookies = (ct.c_uint64 * 1)(cookie)
    attr = _attr()
    _put(attr, 0, prog_fd, 4)
    _put(attr, 8, BPF_TRACE_UPROBE_MULTI, 4)
    _put(attr, 16, ct.addressof(p), 8)          # uprobe_multi.path
    _put(attr, 24, ct.addressof(offs), 8)       # .offsets
    _put(attr, 40, ct.addressof(cookies), 8)    # .cookies
    _put(attr, 48, 1, 4)                        # .cnt
    _put(attr, 52, BPF_F_UPROBE_MULTI_RETURN if ret else 0, 4)
    _put(attr, 56, pid, 4)                      # .pid: only this process's threads
    return _bpf(BPF_LINK_CREATE, attr)


def close_all(fds: list[int], close: Callable[[int], object] | None = None) -> None:
    """Close links (or perf-event fds, with ``close``) from several threads at once: their
    grace periods overlap."""
    ts = [threading.Thread(target=close or _close, args=(fd,)) for fd in fds]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def wanted() -> bool:
    """Whether sessions attach with uprobe_multi links: the kernel takes them and
    RLSCOPE_PERF_UPROBES=1 does not ask for bcc's perf-event uprobes. It picks the program
    text too (generic or per probe), so the loader, the cache's warm-up and doctor ask here."""
    return supported() and os.environ.get("RLSCOPE_PERF_UPROBES") != "1"


def supported() -> bool:
    """Whether this kernel takes uprobe_multi links (tried once: a two-instruction program
    linked to this process's own getpid)."""
    global _supported
    if _supported is None:
        _supported = _try()
    return _supported


def _try() -> bool:
    insns = (ct.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)   # r0 = 0; exit
    lic = ct.create_string_buffer(b"GPL")
    attr = _attr()
    _put(attr, 0, BPF_PROG_TYPE_KPROBE, 4)
    _put(attr, 4, 2, 4)
    _put(attr, 8, ct.addressof(insns), 8)
    _put(attr, 16, ct.addressof(lic), 8)
    _put(attr, 68, BPF_TRACE_UPROBE_MULTI, 4)   # expected_attach_type
    try:
        prog = _bpf(BPF_PROG_LOAD, attr)
    except OSError:
        return False
    try:
        path, off = _own_getpid()
        if path is None:
            return False
        fd = link(prog, path, off, False, os.getpid())
        # closing a link waits out a grace period (~40 ms of an attach's wall time): not on its path
        threading.Thread(target=_close, args=(fd,), name="rlscope-probe-close", daemon=True).start()
        return True
    except OSError:
        return False
    finally:
        os.close(prog)


def _own_getpid() -> tuple[str | None, int]:
    """(libc path, file offset of getpid) of this process, read from its ELF symbols."""
    try:
        import bcc  # noqa: PLC0415 - the loader has it already
    except Exception:  # noqa: BLE001
        return None, 0
    try:
        path, off = bcc.BPF._check_path_symbol(b"c", b"getpid", None, os.getpid())
    except Exception:  # noqa: BLE001
        return None, 0
    return (path.decode() if isinstance(path, bytes) else path), off
