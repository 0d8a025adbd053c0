"""A target's CPython interpreter, read from outside: where its thread states are, and what a
code object is called. The kernel half (pystack.c) reads frame chains; this names them.

Layouts are per CPython minor version, measured against a live interpreter
(tests/test_pystack.py checks them against the running one).
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from typing import Callable

from ..errors import NotReadablePython
from .bpf_cache import file_id
from .elf_symbols import STT_OBJECT, ElfFile, NotElf, symbol_values
from .maps import task_ids

NONE = 0xFFFFFFFF
WALKS = 6               # walks of the thread list tried for a whole one (thread_states)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Byte offsets of the fields the sampler reads (x86-64)."""

    runtime_interp_head: int      # _PyRuntimeState.interpreters.head
    interp_threads_head: int      # PyInterpreterState.threads.head
    tstate_prev: int
    tstate_next: int
    tstate_interp: int
    tstate_cframe: int            # PyThreadState.cframe (NONE: the frame is in the thread state)
    tstate_native_id: int         # PyThreadState.native_thread_id (the tid in its pid namespace)
    cframe_current: int           # _PyCFrame.current_frame
    frame_code: int               # _PyInterpreterFrame.f_code
    frame_previous: int
    frame_instr: int              # _PyInterpreterFrame.prev_instr: the instruction it is at
    code_filename: int
    code_qualname: int
    unicode_state: int            # PyASCIIObject.state
    unicode_length: int
    ascii_data: int               # sizeof(PyASCIIObject): a compact ASCII string's characters
    compact_data: int             # sizeof(PyCompactUnicodeObject)


LAYOUTS = {
    (3, 11): Layout(runtime_interp_head=40, interp_threads_head=16, tstate_prev=0, tstate_next=8, tstate_interp=16,
                    tstate_cframe=56,
                    tstate_native_id=160, cframe_current=8, frame_code=32, frame_previous=48, frame_instr=56,
                    code_filename=112, code_qualname=128, unicode_state=32, unicode_length=16,
                    ascii_data=48, compact_data=72),
}


class Interpreter:
    """One target process's interpreter: its thread states and code object names."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise NotReadablePython(f"cannot read its memory: {e.strerror}") from None
        try:
            self.version, self.runtime = find_runtime(pid, self.read)
            self.layout = LAYOUTS.get(self.version[:2])
            if self.layout is None:
                raise NotReadablePython(f"CPython {self.version[0]}.{self.version[1]} (the in-kernel sampler "
                                        f"reads {', '.join('%d.%d' % v for v in sorted(LAYOUTS))})",
                                        other_version=True)
        except NotReadablePython:
            self.close()
            raise
        self._names: dict[int, str] = {}
        self._states: dict[int, int] = {}         # native tid -> its state, as last read whole

    def close(self) -> None:
        """Release the memory handle (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, addr: int, n: int) -> bytes | None:
        """n bytes of the target's memory (None: unmapped, or the process is gone)."""
        try:
            data = os.pread(self._fd, n, addr)
        except (OSError, OverflowError, ValueError):
            return None
        return data if len(data) == n else None

    def ptr(self, addr: int) -> int:
        """A pointer in the target (0 if unreadable)."""
        b = self.read(addr, 8)
        return struct.unpack("<Q", b)[0] if b else 0

    def thread_states(self) -> dict[int, int]:
        """{tid as this machine sees it: PyThreadState address} of the main interpreter.

        The list is read while the target runs, and a thread that exits mid-walk leaves a freed
        state whose fields are allocator data: the walk is cut short or sent astray. So a walk
        counts only where it is whole (``_walk_thread_states``). Threads that start and exit
        back to back keep the list's head in flux for a while (6% of walks torn, all WALKS in a
        row ~1e-4 of the time, under tests/test_pystack.py's churn); then the states of the
        last whole read and of the torn walks are kept for the threads still alive: a live
        thread's state does not move, and the oldest threads (the main one) sit at the list's
        end, where torn walks do not reach.
        """
        ns = ns_tids(self.pid)
        walks: list[dict[int, int]] = []
        for _ in range(WALKS):
            whole, found = self._walk_thread_states()
            if whole:
                self._states = found
                break
            walks.append(found)
        else:
            live = set(task_ids(self.pid))
            merged = dict(self._states)
            for w in walks:
                merged.update(w)
            self._states = {native: t for native, t in merged.items() if ns.get(native, native) in live}
        return {ns.get(native, native): t for native, t in self._states.items()}

    def _walk_thread_states(self) -> tuple[bool, dict[int, int]]:
        """One walk of the thread state list: whether it was whole, and {native tid: state
        address}. Whole: it reached the list's end, and each state it met named the one before
        it as its prev and this interpreter as its own (a freed state's fields do not)."""
        L = self.layout
        interp = self.ptr(self.runtime + L.runtime_interp_head)
        t = self.ptr(interp + L.interp_threads_head) if interp else 0
        out: dict[int, int] = {}
        seen: set[int] = set()
        prev, n = 0, max(L.tstate_prev, L.tstate_next, L.tstate_interp, L.tstate_native_id) + 8
        for _ in range(4096):                      # a torn list must not loop forever
            if not t:
                return bool(interp), out
            raw = self.read(t, n)
            if not raw or t in seen:
                return False, out
            seen.add(t)
            back, nxt, owner, native = (struct.unpack_from("<Q", raw, off)[0] for off in
                                        (L.tstate_prev, L.tstate_next, L.tstate_interp, L.tstate_native_id))
            if back != prev or owner != interp:
                return False, out
            if native:
                out[native] = t
            prev, t = t, nxt
        return False, out

    def name(self, code: int) -> str:
        """``/path/file.py:qualname`` of a code object (as austin writes frames), kept per address."""
        got = self._names.get(code)
        if got is None:
            L = self.layout
            f = self.string(self.ptr(code + L.code_filename))
            q = self.string(self.ptr(code + L.code_qualname))
            got = f"{f or '?'}:{q or '?'}"
            if f is not None and q is not None:
                if len(self._names) > 200_000:
                    self._names.clear()
                self._names[code] = got
        return got

    def string(self, addr: int) -> str | None:
        """A str object's text (compact strings: every name the compiler makes)."""
        L = self.layout
        head = self.read(addr + L.unicode_length, 8) if addr else None
        st = self.read(addr + L.unicode_state, 4) if head else None
        if st is None:
            return None
        n, state = struct.unpack("<q", head)[0], struct.unpack("<I", st)[0]
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or kind not in (1, 2, 4) or not 0 <= n <= 4096:
            return None
        raw = self.read(addr + (L.ascii_data if ascii_ else L.compact_data), n * kind)
        if raw is None:
            return None
        return raw.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], "replace")


def find_runtime(pid: int, read: Callable[[int, int], bytes | None]) -> tuple[tuple[int, int, int], int]:
    """(version, address of _PyRuntime) in a process, from the ELF file that defines it;
    ``read(address, n)`` reads its memory (Interpreter.read).

    Raises:
        NotReadablePython: not a CPython 3.11+ (no ``Py_Version``), or its memory cannot be read.
    """
    for path, start, offset in _mapped_files(pid):
        want = _objects(path, start, offset)
        if "_PyRuntime" in want and "Py_Version" in want:
            raw = read(want["Py_Version"], 4)
            if raw is None:
                raise NotReadablePython("cannot read its memory")
            v = struct.unpack("<I", raw)[0]
            return (v >> 24, (v >> 16) & 0xFF, (v >> 8) & 0xFF), want["_PyRuntime"]
    raise NotReadablePython("no CPython 3.11+ interpreter found in it")


_MAPS = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s+(/\S.*)$")


def _mapped_files(pid: int):
    """(the mapped file itself, its lowest start, that mapping's file offset) of each mapped
    file, interpreter-looking names first. Opened through /proc/PID/map_files: the very file
    the process maps, whatever its path names now (a path could be a planted symlink or FIFO,
    and this runs as root)."""
    seen: dict[str, tuple[int, int, str]] = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                m = _MAPS.match(line.rstrip("\n"))
                if m and m.group(5) not in seen:
                    lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                    seen[m.group(5)] = (lo, int(m.group(4), 16), f"{lo:x}-{hi:x}")
    except OSError:
        return
    for p in sorted(seen, key=lambda p: (0 if "python" in os.path.basename(p) else 1)):
        start, offset, rng = seen[p]
        yield f"/proc/{pid}/map_files/{rng}", start, offset


_OBJECTS = frozenset(("_PyRuntime", "Py_Version"))
_SYMBOLS: dict[tuple, tuple[dict[str, int], list, int]] = {}    # file version -> what _symbols found


def _objects(path: str, start: int, offset: int) -> dict[str, int]:
    """Addresses of ``_PyRuntime`` and ``Py_Version`` in the process, if the file defines them."""
    try:
        key = file_id(path)[1:]           # the file, whichever process's mapping it is seen through
    except OSError:
        return {}
    if key not in _SYMBOLS:             # a tree of workers maps the same interpreter: read it once
        _SYMBOLS[key] = _symbols(path)
    found, loads, etype = _SYMBOLS[key]
    if not found:
        return {}
    # a position-independent file is loaded where its mapping at `offset` starts
    page = ~0xFFF
    seg = next((v for v, _, off in loads if off & page == offset), None)
    bias = 0 if etype == 2 else start - (seg & page if seg is not None else offset)
    return {n: v + bias for n, v in found.items()}


def _symbols(path: str) -> tuple[dict[str, int], list, int]:
    """(the link-time addresses of the two objects, PT_LOAD segments, ELF type) of a file."""
    try:
        with ElfFile(path) as elf:
            found: dict[str, int] = {}
            for name, value in symbol_values(elf, _OBJECTS, (STT_OBJECT,)):
                found.setdefault(name, value)
            return found, list(elf.loads), elf.etype
    except (OSError, NotElf, struct.error, ValueError):
        return {}, [], 0


def ns_tids(pid: int) -> dict[int, int]:
    """{tid in the process's own pid namespace: tid here}; empty maps are identity."""
    out: dict[int, int] = {}
    try:
        if os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid"):
            return out                  # our namespace: nothing to read (this runs every refresh)
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        ids = line.split()[1:]
                        if len(ids) > 1:
                            out[int(ids[-1])] = int(ids[0])
                        break
        except (OSError, ValueError):
            pass
    return out
