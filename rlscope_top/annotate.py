"""Operation annotations: ``with rlscope_top.operation("inference"):``.

Standard library only, safe to leave in production code, never raises into the
caller. The process keeps a small shared-memory region (a memfd named
``rlscope-top-ops``, so it shows in /proc/PID/maps and vanishes with the process).
While no monitor is attached, an annotation only pushes and pops a per-thread
stack. While one is attached (it sets a flag in the region), each boundary also
appends ``(CLOCK_MONOTONIC ns, innermost op id)`` to the thread's slot; the
kernel side reads these entries at the thread's next probe or context switch and
splits time at the recorded instants (docs/annotations.md has the layout).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time

MEMFD_NAME = "rlscope-top-ops"
MAGIC = b"RLSOPS01"
VERSION = 1
HDR_SIZE = 4096
NSLOTS = 64
SLOT_SIZE = 1024
NENT = 60                     # entries per slot's log (16 bytes each, after a 16-byte head)
NAME_SIZE = 64                # byte 0: kind (0 plain, 1 simulation); then the name, NUL-ended
MAX_NAMES = 1024
NAMES_OFF = HDR_SIZE + NSLOTS * SLOT_SIZE
REGION_SIZE = NAMES_OFF + MAX_NAMES * NAME_SIZE
ATTACHED_OFF = 16             # u8 epoch: a monitor sets 1..255 while attached, 0 when it leaves
NNAMES_OFF = 20               # u32 names published so far
PROBE_SLOTS = 8               # a thread's slot is within this many of tid % NSLOTS
KINDS = {"": 0, "simulation": 1}

_lock = threading.Lock()
_tls = threading.local()
_mm: mmap.mmap | None = None
_ids: dict[tuple[str, int], int] = {}
_ops: dict = {}                # name (or (name, kind)) -> _Operation
_broken = False
_pack_entry = struct.Struct("<QII").pack_into
_pack_u32 = struct.Struct("<I").pack_into
_now = time.monotonic_ns


def _region() -> mmap.mmap | None:
    """The shared region, created on first use (None where memfd is unavailable)."""
    global _mm, _broken
    if _mm is not None or _broken:
        return _mm
    try:
        fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, REGION_SIZE)
            mm = mmap.mmap(fd, REGION_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)   # the mapping keeps the memfd alive and visible in /proc/PID/maps
        struct.pack_into("<8sIIII", mm, 0, MAGIC, VERSION, NSLOTS, 0, 0)
        struct.pack_into("<IIIIII", mm, 24, SLOT_SIZE, NENT, NAMES_OFF, NAME_SIZE, MAX_NAMES, HDR_SIZE)
        _mm = mm
    except (AttributeError, OSError, ValueError):   # not Linux, or no memfd: annotations do nothing
        _broken = True
    return _mm


def _op_id(name: str, kind: int) -> int:
    """Publish a name in the region's table once; ids start at 1 (0 = no operation)."""
    key = (name, kind)
    with _lock:
        if key in _ids:
            return _ids[key]
        mm = _region()
        n = len(_ids)
        if mm is None or n >= MAX_NAMES:
            return 0
        raw = name.encode("utf-8", "replace")[:NAME_SIZE - 2]
        off = NAMES_OFF + n * NAME_SIZE
        mm[off:off + NAME_SIZE] = bytes([kind]) + raw + b"\0" * (NAME_SIZE - 1 - len(raw))
        _ids[key] = n + 1
        _pack_u32(mm, NNAMES_OFF, n + 1)   # after the name: a reader never sees a blank entry
        return n + 1


class _Thread:
    """One thread's stack of op ids and its slot in the region."""

    __slots__ = ("stack", "slot", "seq", "epoch", "__weakref__")

    def __init__(self):
        self.stack = [0]
        self.seq = 0
        self.epoch = 0
        self.slot = _claim_slot(threading.get_native_id())

    def __del__(self):       # the thread is gone: free its slot for a later thread
        try:
            if self.slot and _mm is not None:
                _pack_u32(_mm, self.slot, 0)
        except Exception:
            pass


def _claim_slot(tid: int) -> int:
    """A slot near tid % NSLOTS (the kernel side looks PROBE_SLOTS slots from there)."""
    mm = _region()
    if mm is None:
        return 0
    with _lock:
        for k in range(PROBE_SLOTS):
            off = HDR_SIZE + ((tid + k) % NSLOTS) * SLOT_SIZE
            if struct.unpack_from("<I", mm, off)[0] in (0, tid):
                mm[off:off + SLOT_SIZE] = bytes(SLOT_SIZE)
                _pack_u32(mm, off, tid)
                return off
    return 0


def _thread(epoch: int) -> _Thread:
    """This thread's state; a new monitor (epoch) starts it from an empty stack."""
    try:
        t = _tls.t
    except AttributeError:
        t = _tls.t = _Thread()
    if t.epoch != epoch:
        t.stack = [0]
        t.epoch = epoch
    return t


class _Operation:
    """A named operation: a context manager and a decorator. Reusable and thread-safe.

    Nothing is recorded while no monitor is attached (the region's epoch byte is 0):
    that check is the whole cost then.
    """

    __slots__ = ("name", "kind", "id")

    def __init__(self, name: str, kind: int):
        self.name, self.kind = name, kind
        self.id = _op_id(name, kind)

    def __enter__(self):
        e = _mm[ATTACHED_OFF]
        if e:
            try:        # _thread() and _log() inlined: this path must stay under 1 us
                try:
                    t = _tls.t
                except AttributeError:
                    t = _thread(e)
                if t.epoch != e:
                    t = _thread(e)
                t.stack.append(self.id)
                if t.slot:
                    w = t.seq = t.seq + 1
                    _pack_entry(_mm, t.slot + 16 + (w % NENT) * 16, _now(), self.id, w)
            except Exception:
                pass
        return self

    def __exit__(self, a, b, c):
        e = _mm[ATTACHED_OFF]
        if e:
            try:
                t = _tls.t
                if t.epoch != e:
                    t = _thread(e)
                st = t.stack
                if len(st) > 1:
                    st.pop()
                if t.slot:
                    w = t.seq = t.seq + 1
                    _pack_entry(_mm, t.slot + 16 + (w % NENT) * 16, _now(), st[-1], w)
            except Exception:
                pass
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        wrapper.__wrapped__ = fn
        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__qualname__ = getattr(fn, "__qualname__", wrapper.__name__)
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper


class _Disabled:
    """What ``operation`` returns if it cannot work here: does nothing, never raises."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, a, b, c):
        return False

    def __call__(self, fn):
        return fn


_DISABLED = _Disabled()


def operation(name: str, kind: str = ""):
    """Mark a high-level operation for rlscope-top.

    Nested operations are flattened: the innermost one active on a thread owns the
    time. Costs a stack push and pop while no monitor is attached.

    Args:
        name: The operation's name, e.g. ``"inference"`` (at most 62 bytes are kept).
        kind: ``"simulation"`` to count the operation's Python time as simulation
            (its Python/native split is still shown), else ``""``.

    Returns:
        A reusable context manager that also works as a decorator.
    """
    try:
        return _ops[name] if not kind else _ops[(name, kind)]
    except (KeyError, TypeError):
        return _new_operation(name, kind)


def _new_operation(name, kind):
    try:
        op = _Operation(str(name), KINDS.get(kind, 0))
        if op.id == 0:
            return _DISABLED
        _ops[name if not kind else (name, kind)] = op
        return op
    except Exception:
        return _DISABLED


def _after_fork_in_child() -> None:
    """A forked child shares the parent's region: give it a fresh one of its own."""
    global _mm, _tls
    _mm = None
    _tls = threading.local()
    _ids.clear()
    for key, op in list(_ops.items()):
        op.id = _op_id(op.name, op.kind)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
