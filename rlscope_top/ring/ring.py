"""File-backed mmap ring of length-framed msgpack records: one writer, many readers.

Layout (little-endian; see docs/ring-format.md):

    header (4096 bytes): magic, version, header size, capacity, head, tail, seq,
                         writer pid, flags, created time
    data (capacity bytes): frames [u32 length][u32 kind][u64 seq][payload], 8-aligned

``head`` and ``tail`` are logical byte positions that only grow; the physical offset
is ``pos % capacity``. The writer moves ``tail`` past records it is about to
overwrite *before* writing, so a reader that copied a frame and then still sees
``tail <= frame position`` knows the copy is whole. Readers never write.
"""

from __future__ import annotations

import collections
import mmap
import os
import stat
import struct
import time

import msgpack

from ..safe_files import create_exclusive, private_dir
from ..errors import RecordTooLarge, RingError

MAGIC = b"RLSRING\0"
VERSION = 1
HEADER_SIZE = 4096
FRAME = struct.Struct("<IIQ")          # length, kind, seq
KIND_RECORD, KIND_PAD = 0, 1
FLAG_CLOSED = 1
DEFAULT_CAPACITY = 8 << 20
DEFAULT_DIR = "/dev/shm/rlscope-top"

# header field offsets
_OFF_VERSION, _OFF_HSIZE, _OFF_CAP = 8, 12, 16
_OFF_HEAD, _OFF_TAIL, _OFF_SEQ = 24, 32, 40
_OFF_PID, _OFF_FLAGS, _OFF_CREATED = 48, 52, 56




def _align8(n: int) -> int:
    return (n + 7) & ~7


def default_path(pid: int) -> str:
    """A fresh ring path for a session on ``pid`` under the private default dir."""
    return os.path.join(DEFAULT_DIR, f"ring-{pid}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.bin")


SWEPT: list[str] = []     # rings of dead monitors this process removed (the session says so once)


def _create(path: str) -> int:
    """A new ring file, 0600, never through a symlink; the default directory private (0700)."""
    d = os.path.dirname(os.path.abspath(path))
    if d == DEFAULT_DIR:
        private_dir(d)
        SWEPT.extend(sweep_stale(d))
    try:
        return create_exclusive(path)
    except FileExistsError:
        raise RingError(f"{path} already exists; a ring is always a new file") from None
    except OSError as e:
        raise RingError(f"cannot create ring {path}: {e.strerror or e}") from None


def sweep_stale(d: str = DEFAULT_DIR) -> list[str]:
    """Remove rings left by a monitor that was killed (SIGKILL): not closed, writer gone.

    Rings kept on purpose (``--keep-ring``) are closed, so they stay.
    """
    gone = []
    for name in os.listdir(d):
        p = os.path.join(d, name)
        head = _writer(p) if name.startswith("ring-") and name.endswith(".bin") else None
        if head and head[0] and not head[1] & FLAG_CLOSED and not _alive(head[0]):
            try:
                os.unlink(p)
                gone.append(p)
            except OSError:
                pass
    return gone


def live_writers(targets, d: str = DEFAULT_DIR) -> dict[int, set[int]]:
    """The monitors (writer PIDs, this process left out) whose open default ring is on one of
    ``targets``: other sessions attached to them now, by target. A ring given with --ring is
    not seen."""
    want, found = set(targets), {}
    try:
        names = os.listdir(d)
    except OSError:
        return found
    for name in names:
        parts = name.split("-")
        if not (name.startswith("ring-") and name.endswith(".bin") and len(parts) > 2 and parts[1].isdigit()
                and int(parts[1]) in want):
            continue
        head = _writer(os.path.join(d, name))
        if head and head[0] and head[0] != os.getpid() and not head[1] & FLAG_CLOSED and _alive(head[0]):
            found.setdefault(int(parts[1]), set()).add(head[0])
    return found


def _writer(path: str) -> tuple[int, int] | None:
    """(writer PID, flags) from a ring file's header, never through a symlink; None for
    anything that is not a ring."""
    try:
        with open(path, "rb", opener=lambda f, fl: os.open(f, fl | os.O_NOFOLLOW)) as f:
            head = f.read(_OFF_CREATED)
    except OSError:
        return None
    if len(head) < _OFF_CREATED or head[:8] != MAGIC:
        return None
    return struct.unpack_from("<II", head, _OFF_PID)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RingWriter:
    """The single writer of a ring file."""

    def __init__(self, path: str, capacity: int = DEFAULT_CAPACITY):
        if capacity < 4096 or capacity % 8:
            raise ValueError("capacity must be a multiple of 8 and at least 4096")
        fd = _create(path)
        try:
            os.ftruncate(fd, HEADER_SIZE + capacity)
            self._mm = mmap.mmap(fd, HEADER_SIZE + capacity)
        finally:
            os.close(fd)
        self.path, self.capacity = path, capacity
        self._head = self._tail = self._seq = 0
        self._starts: collections.deque[int] = collections.deque()
        self._packer = msgpack.Packer(use_bin_type=True)
        mm = self._mm
        mm[0:8] = MAGIC
        struct.pack_into("<IIQ", mm, _OFF_VERSION, VERSION, HEADER_SIZE, capacity)
        struct.pack_into("<QQQIIQ", mm, _OFF_HEAD, 0, 0, 0, os.getpid(), 0, time.time_ns())

    def write(self, record: dict) -> int:
        """Append one record. Returns its sequence number."""
        payload = self._packer.pack(record)
        size = _align8(FRAME.size + len(payload))
        if size > self.capacity // 2:
            raise RecordTooLarge(f"record of {len(payload)} bytes is too large for the ring")
        pos, cap, mm = self._head, self.capacity, self._mm
        rem = cap - pos % cap
        if rem < size:                      # no split frames: pad to the physical end
            self._advance_tail(pos + rem, pos + rem)
            if rem >= FRAME.size:
                FRAME.pack_into(mm, HEADER_SIZE + pos % cap, rem - FRAME.size, KIND_PAD, self._seq)
            pos += rem
        self._advance_tail(pos + size, pos)
        off = HEADER_SIZE + pos % cap
        mm[off + FRAME.size:off + FRAME.size + len(payload)] = payload
        FRAME.pack_into(mm, off, len(payload), KIND_RECORD, self._seq)
        self._starts.append(pos)
        seq, self._seq, self._head = self._seq, self._seq + 1, pos + size
        struct.pack_into("<QQ", mm, _OFF_HEAD, self._head, self._tail)
        struct.pack_into("<Q", mm, _OFF_SEQ, self._seq)
        return seq

    def _advance_tail(self, new_end: int, next_start: int) -> None:
        """Before bytes up to ``new_end`` are written, move tail past what they overwrite."""
        limit = new_end - self.capacity
        if not self._starts or self._starts[0] >= limit:
            return
        while self._starts and self._starts[0] < limit:
            self._starts.popleft()
        self._tail = self._starts[0] if self._starts else next_start
        struct.pack_into("<Q", self._mm, _OFF_TAIL, self._tail)

    def close(self, remove: bool = False) -> None:
        """Mark the ring closed (readers see it) and unmap; optionally delete it."""
        if self._mm is None:
            return
        struct.pack_into("<I", self._mm, _OFF_FLAGS, FLAG_CLOSED)
        self._mm.close()
        self._mm = None
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class RingReader:
    """One reader of a ring; keeps its own position and counts what it lost."""

    def __init__(self, path: str, from_start: bool = True):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise RingError(f"cannot open ring {path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RingError(f"{path} is not an rlscope-top ring (not a regular file)")
            if st.st_size < HEADER_SIZE:
                raise RingError(f"{path} is not an rlscope-top ring (too small)")
            self._mm = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
        except OSError as e:
            raise RingError(f"cannot map ring {path}: {e.strerror or e}") from None
        finally:
            os.close(fd)
        if self._mm[0:8] != MAGIC:
            raise RingError(f"{path} is not an rlscope-top ring (bad magic)")
        version, hsize, cap = struct.unpack_from("<IIQ", self._mm, _OFF_VERSION)
        if version != VERSION or hsize != HEADER_SIZE:
            raise RingError(f"{path} is ring format v{version}; this reader knows v{VERSION}")
        self.path, self.capacity = path, cap
        self._check_header(st.st_size)
        self.dropped = 0
        self._pos = self._u64(_OFF_TAIL) if from_start else self._u64(_OFF_HEAD)
        self._next_seq = self._seq_at(self._pos)

    def _check_header(self, size: int) -> None:
        cap, head, tail = self.capacity, self._u64(_OFF_HEAD), self._u64(_OFF_TAIL)
        if cap < 4096 or cap % 8 or size < HEADER_SIZE + cap:
            raise RingError(f"{self.path} is a corrupt ring (capacity {cap}, file {size} bytes)")
        if tail > head or head - tail > cap:
            raise RingError(f"{self.path} is a corrupt ring (head {head}, tail {tail}, capacity {cap})")

    def _corrupt(self, what: str) -> RingError:
        return RingError(f"{self.path} is a corrupt ring ({what} at byte {self._pos})")

    def _seq_at(self, pos: int) -> int | None:
        """Seq of the record at ``pos`` (the next one written when pos is the head)."""
        if pos >= self._u64(_OFF_HEAD):
            return self._u64(_OFF_SEQ)
        phys = pos % self.capacity
        if self.capacity - phys < FRAME.size:
            return None
        return FRAME.unpack_from(self._mm, HEADER_SIZE + phys)[2]

    def _u64(self, off: int) -> int:
        return struct.unpack_from("<Q", self._mm, off)[0]

    @property
    def closed(self) -> bool:
        """Whether the writer has closed the ring."""
        return bool(struct.unpack_from("<I", self._mm, _OFF_FLAGS)[0] & FLAG_CLOSED)

    @property
    def writer_pid(self) -> int:
        """PID of the process that writes the ring."""
        return struct.unpack_from("<I", self._mm, _OFF_PID)[0]

    def lag(self) -> int:
        """Bytes written that this reader has not read yet."""
        return self._u64(_OFF_HEAD) - self._pos

    def poll(self, limit: int = 100_000) -> list[dict]:
        """Return the records written since the last call (at most ``limit``)."""
        out: list[dict] = []
        head, cap, mm = self._u64(_OFF_HEAD), self.capacity, self._mm
        while self._pos < head and len(out) < limit:
            phys = self._pos % cap
            rem = cap - phys
            if rem >= FRAME.size:
                length, kind, seq = FRAME.unpack_from(mm, HEADER_SIZE + phys)
            if self._u64(_OFF_TAIL) > self._pos:   # overwritten before or while we read
                self._resync(self._u64(_OFF_TAIL))
                continue
            if rem < FRAME.size or kind == KIND_PAD:
                self._pos += rem
                continue
            start = HEADER_SIZE + phys + FRAME.size
            payload = mm[start:start + min(length, rem - FRAME.size)]
            if self._u64(_OFF_TAIL) > self._pos:
                continue
            if kind != KIND_RECORD or length > rem - FRAME.size:
                raise self._corrupt(f"frame kind {kind}, length {length}")
            try:
                rec = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            except (ValueError, TypeError, msgpack.UnpackException) as e:
                raise self._corrupt(f"undecodable record: {type(e).__name__}") from None
            if not isinstance(rec, dict):
                raise self._corrupt(f"a {type(rec).__name__} where a record belongs")
            if self._next_seq is not None and seq > self._next_seq:
                self.dropped += seq - self._next_seq
            self._next_seq = seq + 1
            self._pos += _align8(FRAME.size + length)
            out.append(rec)
        return out

    def _resync(self, tail: int) -> None:
        """Jump to the oldest intact record; the gap is counted when its seq is read."""
        self._pos = tail

    def close(self) -> None:
        """Unmap the ring."""
        self._mm.close()
