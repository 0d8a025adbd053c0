"""A whole session in one file that does not lap (``--record FILE``; docs/record-format.md).

The file is a 64-byte header (magic, version, header size, the target's pid, created time)
and then the ring's frames, back to back: ``[u32 length][u32 kind][u64 seq][msgpack payload]``
padded to 8 bytes, the same framing as ring.py. Every record the collector writes to the ring
is written here too. Past ``max_bytes`` it keeps what a summary needs (counters, operations,
notes, modes, the end) and drops bulk events (``--timeline`` events, GPU activity), and says so.
A full disk stops the recording, not the session. The last record, ``fin``, carries what the
session's summary took from outside the records (ring drops, detach time), so that
``replay`` rebuilds that summary field for field.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from typing import Callable

import msgpack

from ..errors import RecordingError
from ..safe_files import create_exclusive
from . import gpu_records as G
from . import records as R
from .ring import FRAME, KIND_RECORD, _align8

MAGIC = b"RLSREC\0\0"
VERSION = 1
HEADER = struct.Struct("<8sIIIxxxxQ")      # magic, version, header size, pid, created ns
HEADER_SIZE = 64
FIN = "fin"
BULK = frozenset((R.EVENTS, R.INTERVALS, G.GPU, G.NVML, G.SYNC))   # dropped first past the bound


def fin(*, dropped: int, detach_s: float | None, ring_path: str) -> dict:
    """The recording's last record: what the summary took from outside the records."""
    return {"t": FIN, "dropped": dropped, "detach_s": detach_s, "ring_path": ring_path}


class Recorder:
    """A ring writer that also appends every record to a recording file.

    Args:
        ring: the session's RingWriter (everything else is delegated to it).
        path: the recording; an existing name (a symlink included) is refused.
        pid: the target's pid (in the header).
        max_bytes: past this, bulk events are no longer recorded.
        note: ``note(level, msg)``, for the bound and a failed write.

    Raises:
        RecordingError: the file cannot be created.
    """

    def __init__(self, ring, path: str, pid: int, max_bytes: int, note: Callable[[str, str], None]):
        try:
            self._fd = create_exclusive(path)
        except FileExistsError:
            raise RecordingError(f"{path} exists", hint="give a new file name, or remove the old recording",
                                 pid=pid) from None
        except OSError as e:
            raise RecordingError(f"cannot create {path}: {e.strerror}",
                                 hint="give a path in a directory you can write", pid=pid) from None
        self._ring, self.record_path, self._max = ring, path, max_bytes
        self._note = note
        self._packer = msgpack.Packer(use_bin_type=True)
        self._seq = 0
        self._size = HEADER_SIZE
        self._bulk_dropped = 0
        self._failed = False
        self._append(HEADER.pack(MAGIC, VERSION, HEADER_SIZE, pid, time.time_ns()).ljust(HEADER_SIZE, b"\0"))

    def __getattr__(self, name):
        return getattr(self._ring, name)

    def write(self, record: dict) -> int:
        """Write to the ring, then to the recording. Returns the ring's sequence number."""
        seq = self._ring.write(record)
        self.record(record)
        return seq

    def record(self, record: dict) -> None:
        """Append one record to the recording only (unless past its bound or failed)."""
        if self._failed:
            return
        if record.get("t") in BULK and self._size >= self._max:
            if not self._bulk_dropped:
                self._note("warn", f"recording reached --record-max-mb ({self._max >> 20} MB): "
                                   "it keeps counters and operations, no more events")
            self._bulk_dropped += 1
            return
        payload = self._packer.pack(record)
        frame = FRAME.pack(len(payload), KIND_RECORD, self._seq) + payload
        self._append(frame.ljust(_align8(len(frame)), b"\0"))
        self._seq += 1

    def finish(self, *, dropped: int, detach_s: float | None, ring_path: str) -> None:
        """Append the ``fin`` record and close the recording (idempotent)."""
        if self._fd is None:
            return
        self.record(fin(dropped=dropped, detach_s=detach_s, ring_path=ring_path))
        self.close_recording()

    def close_recording(self) -> None:
        """Close the file; what is in it stays readable."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _append(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self._size += len(data)
        except OSError as e:
            self._failed = True
            self._note("warn", f"recording stopped at {self._size >> 20} MB: {e.strerror} "
                               f"({self.record_path} keeps what was written; the session goes on)")


class Recording:
    """A recording read back: its records and what was wrong with the file, if anything.

    Attributes:
        pid: the target's pid from the header.
        records: every whole record, in order (``fin`` excluded).
        fin: the ``fin`` record, or None (a session that did not end cleanly).
        problem: None, or what stopped the reading early (truncated or corrupt tail).
    """

    def __init__(self, pid: int, records: list[dict], fin_rec: dict | None, problem: str | None):
        self.pid, self.records, self.fin, self.problem = pid, records, fin_rec, problem


def read(path: str) -> Recording:
    """Read a recording, recovering every whole record before a damaged tail.

    Raises:
        RecordingError: not a recording (empty, another format, another version) or unreadable.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror}", hint="give the file written by --record") from None
    if not data:
        raise RecordingError(f"{path} is empty", hint="the session wrote nothing: was --record given?")
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise RecordingError(f"{path} is not an rlscope-top recording",
                             hint="give the file written by --record FILE (a ring or summary is not one)")
    _, version, hsize, pid, _ = HEADER.unpack_from(data)
    if version != VERSION:
        raise RecordingError(f"{path} is recording format v{version}; this rlscope-top reads v{VERSION}",
                             hint="replay it with the rlscope-top version that wrote it")
    return _frames(data, hsize, pid)


def _frames(data: bytes, pos: int, pid: int) -> Recording:
    records, fin_rec, problem, seq = [], None, None, 0
    unpacker_opts = {"raw": False, "strict_map_key": False}
    while pos < len(data):
        if len(data) - pos < FRAME.size:
            problem = f"truncated after {len(records)} records (a partial frame header)"
            break
        length, kind, got_seq = FRAME.unpack_from(data, pos)
        end = pos + FRAME.size + length
        if kind != KIND_RECORD or got_seq != seq:
            problem = f"corrupt after {len(records)} records (a bad frame at byte {pos})"
            break
        if end > len(data):
            problem = f"truncated after {len(records)} records (a partial record)"
            break
        try:
            rec = msgpack.unpackb(data[pos + FRAME.size:end], **unpacker_opts)
        except (ValueError, msgpack.UnpackException) as e:
            problem = f"corrupt after {len(records)} records ({type(e).__name__} at byte {pos})"
            break
        if isinstance(rec, dict) and rec.get("t") == FIN:
            fin_rec = rec
        elif isinstance(rec, dict):
            records.append(rec)
        pos, seq = _align8(end), seq + 1
    return Recording(pid, records, fin_rec, problem)


Window = tuple[float | None, float | None]      # (from, to) seconds into the session; None: its start, end


def load(path: str, window: Window = (None, None)) -> tuple[Recording, list[dict]]:
    """A recording and its records in ``window`` (from, to) seconds into the session (None:
    its start, its end); a damaged tail is said on stderr and the records before it are used.

    Raises:
        RecordingError: unreadable, no session start (meta record) in it, or nothing in the window.
    """
    rec = read(path)
    if rec.problem:
        print(f"rlscope-top: {path}: {rec.problem}; using the records before it", file=sys.stderr)
    meta = next((r for r in rec.records if r.get("t") == R.META), None)
    if meta is None:
        raise RecordingError(f"{path} has no session start (meta record)",
                             hint="the session ended before it attached: record it again")
    records, (from_s, to_s) = rec.records, window
    if to_s is not None:
        limit = meta["t0"] + int(to_s * 1e9)
        records = [r for r in records if r.get("t") == R.META or r.get("ts", 0) <= limit]
    if from_s:
        records = since(records, meta["t0"] + int(from_s * 1e9))
        if records is None:
            raise RecordingError(f"{path} has no counters after --from {from_s:g} s (or before --to)",
                                 hint="give a window inside the session: `replay --headless` prints its length")
    return rec, records


# What grows in a counters record (docs/ring-format.md): a window's figure is its growth since
# the window opened. Names, flags and rates stand as they are.
_GROWS = frozenset(("ns", "trans", "calls", "oh", "fw", "ticks", "sw", "pre", "omp", "samples", "samples_incl", "ranges",
                    "samples_total", "nested", "hits", "target_sys_s", "target_cpu_s", "monitor_cpu_s",
                    "idle_cpu_s", "busy_cpu_s", "steal_cpu_s", "all_cpu_s", "invalid", "cpu_s", "bookkeeping_s"))
_GPU_GROWS = frozenset(("all", "ops", "devices", "overlap", "op_overlap", "sync"))


def since(records: list[dict], start_ns: int) -> list[dict] | None:
    """The records of a window that opens at the last counters at or before ``start_ns``: the
    later counters less those (per thread, operation and process), the window's own events,
    and the budget's modes in force when it opens. None when no counters follow."""
    base = None
    for r in records:
        if r.get("t") == R.COUNTERS and r["ts"] <= start_ns:
            base = r
    if base is None:
        return records
    if not any(r.get("t") == R.COUNTERS and r["ts"] > base["ts"] for r in records):
        return None
    t0 = base["ts"]
    gbase = next((r for r in reversed(records) if r.get("t") == G.TOTALS and r["ts"] <= t0), None)
    modes = {r["category"]: r for r in records if r.get("t") == R.MODE and r["ts"] <= t0}
    metas = [r for r in records if r.get("t") == R.META]
    main_pid = metas[0].get("pid") if metas else None
    out = [{**m, "t0": t0} for m in metas]
    out.append(_less(base, base, main_pid))
    out += [{**m, "ts": t0, "overhead_pct": 0} for m in modes.values()]    # in force, not a new step
    for r in records:
        t = r.get("t")
        if t == R.META or _ts(r) <= t0:
            continue
        if t == R.COUNTERS:
            r = _less(r, base, main_pid)
        elif t == G.TOTALS and gbase is not None:
            r = _grown(r, gbase, _GPU_GROWS)
        out.append(r)
    return out


def _ts(r: dict) -> int:
    """A record's time; for a batch without its own (events, intervals, GPU activity), its last item's end."""
    if "ts" in r:
        return r["ts"]
    last = (r.get("items") or [[]])[-1]
    pos = {R.EVENTS: 0, R.INTERVALS: 4, G.GPU: 2}.get(r.get("t"))
    return last[pos] if pos is not None and len(last) > pos else 1 << 62


def _less(ctr: dict, base: dict, main_pid: int | None) -> dict:
    """A counters record less a baseline one: threads by tid, operations by id, processes by pid."""
    out = _grown(ctr, base)
    out["threads"] = _by_key(ctr["threads"], base["threads"], "tid")
    _unfold(out["threads"], ctr["threads"], base["threads"], main_pid)
    if "ops" in ctr:
        out["ops"] = _by_key(ctr["ops"], base.get("ops") or [], "id")
    if "procs" in ctr:
        old = {p["pid"]: p for p in base.get("procs") or []}
        out["procs"] = [_less_proc(p, old.get(p["pid"]) or {}) for p in ctr["procs"]]
    for k in ("cost", "sampler"):
        if isinstance(ctr.get(k), dict):
            out[k] = _grown(ctr[k], base.get(k) or {})
    return out


def _unfold(rows: list[dict], now: list[dict], then: list[dict], main_pid: int | None) -> None:
    """A thread folded into an "(N exited threads)" row since the window opened: its count at
    the start comes out of that row too (the row holds all of it)."""
    here = {t["tid"] for t in now}
    by_tid = {r["tid"]: i for i, r in enumerate(rows)}
    for th in then:
        i = by_tid.get(R.fold_tid(th["py"], th.get("pid"), main_pid))
        if th["tid"] >= 0 and th["tid"] not in here and i is not None:
            rows[i] = _grown(rows[i], th)


def _less_proc(p: dict, old: dict) -> dict:
    out = dict(p)
    if p.get("ops"):
        out["ops"] = _by_key(p["ops"], old.get("ops") or [], "id")
    if p.get("waits"):
        then = {(w, peer): n for w, peer, n in old.get("waits") or ()}
        out["waits"] = [[w, peer, n - then.get((w, peer), 0)] for w, peer, n in p["waits"]
                        if n > then.get((w, peer), 0)]
    return out


def _by_key(now: list[dict], then: list[dict], key: str) -> list[dict]:
    old = {x[key]: x for x in then}
    return [_grown(x, old[x[key]]) if x[key] in old else x for x in now]


def _grown(now: dict, then: dict, grows: frozenset = _GROWS) -> dict:
    """A cumulative record's growth since ``then``: its growing fields less ``then``'s."""
    return {k: _minus(v, then.get(k)) if k in grows else v for k, v in now.items()}


def _minus(a, b):
    """``a - b`` for numbers, and leaf by leaf for the lists and maps that hold them."""
    if b is None or a is None or isinstance(a, (bool, str)):
        return a
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a - b
    if isinstance(a, list) and isinstance(b, list):
        return [_minus(x, b[i] if i < len(b) else None) for i, x in enumerate(a)]
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _minus(v, b.get(k)) for k, v in a.items()}
    return a
