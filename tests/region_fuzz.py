"""Seeded fuzzing of the GPU agent's shared region as the monitor reads it: the region reader
(probes/gpu_region.py), the decoding, the correlation join and the GPU totals, the path each
tick of a real session takes (rlscope_top/collect/gpu_source.py `_take`, then `finish`).

The region is written by the target, so every byte of it is hostile: header fields at
extremes (head, tail, sizes, record sizes), byte flips in the records (times, ids), random
bytes, truncations. A case may end in RegionError (the agent is "lost") or LayoutError (record
sizes no cupti-python dtype has), or read cleanly; anything else is a defect, and so is a
structure that grows with a forged value (busy-time bins, kernel and device tables).
Shared by tests/test_hostile_input.py and bench/fuzz_ring.py.
"""

from __future__ import annotations

import random
import struct

import numpy as np

from rlscope_top.collect import gpu_decode as D
from rlscope_top.account.gpu_accounting import GpuTotals
from rlscope_top.collect.gpu_join import Joiner
from rlscope_top.probes import gpu_region as GR
from ring_fuzz import drive

PID = 4242
CAP, NCAP = 8192, 4096
T0 = 1_000_000_000_000          # the session's start (monotonic ns)
NOW = T0 + 10_000_000_000       # each case reads the region 10 s into the session
_HEADER_FIELDS = ("head", "tail", "names_head", "data_capacity", "names_capacity", "version", "agent_pid",
                  "header_size")
_EXTREMES = [0, 1, 7, 8, 4095, 4096, CAP, CAP + 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]
# Bounds a forged region must not push past (the structures' own caps, with room).
MAX_BINS = 6_100 + 8
MAX_KERNEL_NAMES = 4_096 + 1


def _dtypes() -> tuple[np.dtype, np.dtype]:
    from cupti import cupti  # noqa: PLC0415 - the test extra has it

    return cupti.activity_kernel13_dtype, cupti.activity_api_dtype


def _frame(kind: int, recs: np.ndarray) -> bytes:
    body = recs.tobytes()
    raw = GR.FRAME.pack(len(body), GR.FRAME_RECORDS, kind, len(recs), 0) + body
    return raw + b"\0" * (-len(raw) % 8)


def base_region() -> bytes:
    """A consistent region: 12 kernels and their 12 runtime API records, 3 kernel names."""
    kdt, adt = _dtypes()
    k = np.zeros(12, kdt)
    k["start"] = T0 + np.arange(12) * 1_000_000
    k["end"] = k["start"] + 400_000
    k["correlation_id"] = np.arange(1, 13)
    k["name"] = 0x1000 + (np.arange(12) % 3) * 8
    a = np.zeros(12, adt)
    a["start"] = k["start"] - 50_000
    a["end"] = a["start"] + 5_000
    a["correlation_id"] = k["correlation_id"]
    a["thread_id"] = PID
    data = _frame(D.KIND_CONCURRENT_KERNEL, k) + _frame(D.KIND_RUNTIME, a)
    names = b""
    for i in range(3):
        text = f"kernel_{i}".encode()
        raw = GR.NAME.pack(0x1000 + i * 8, len(text), 0) + text
        names += raw + b"\0" * (-len(raw) % 8)
    hdr = bytearray(GR.HEADER)
    hdr[0:8] = GR.MAGIC
    for name, value in (("version", GR.VERSION), ("header_size", GR.HEADER), ("agent_pid", PID)):
        struct.pack_into("<I", hdr, GR.OFF[name], value)
    for name, value in (("data_capacity", CAP), ("names_capacity", NCAP), ("head", len(data)),
                        ("names_head", len(names))):
        struct.pack_into("<Q", hdr, GR.OFF[name], value)
    sizes = [0] * GR.NKINDS
    sizes[D.KIND_CONCURRENT_KERNEL], sizes[D.KIND_RUNTIME] = kdt.itemsize, adt.itemsize
    struct.pack_into(f"<{GR.NKINDS}I", hdr, GR.OFF["kind_size"], *sizes)
    return bytes(hdr) + data.ljust(CAP, b"\0") + names.ljust(NCAP, b"\0")


def mutate(rng: random.Random, base: bytes) -> bytes:
    """One hostile variant of ``base``."""
    kind = rng.randrange(6)
    b = bytearray(base)
    if kind == 0:
        return rng.randbytes(rng.choice([0, 64, GR.HEADER - 1, GR.HEADER, len(base)]))
    if kind == 1:
        return bytes(b[:rng.randrange(len(b))])
    if kind == 2:                                  # the records: times, ids, name pointers
        for _ in range(rng.randrange(1, 24)):
            b[rng.randrange(GR.HEADER, GR.HEADER + 8 * 1024)] = rng.randrange(256)
        return bytes(b)
    if kind == 3:                                  # a record's time set to an extreme
        i = rng.randrange(GR.HEADER, GR.HEADER + 6 * 1024 - 8) & ~7
        struct.pack_into("<Q", b, i, rng.choice(_EXTREMES))
        return bytes(b)
    if kind == 4:                                  # a record size in the header
        k = rng.choice([D.KIND_CONCURRENT_KERNEL, D.KIND_RUNTIME, D.KIND_KERNEL, rng.randrange(GR.NKINDS)])
        struct.pack_into("<I", b, GR.OFF["kind_size"] + 4 * k, rng.choice([0, 1, 8, 40, 248, 2**32 - 1]))
        return bytes(b)
    name = rng.choice(_HEADER_FIELDS)
    fmt = "<I" if name in GR.U32 else "<Q"
    width = 8 * struct.calcsize(fmt)
    v = rng.choice(_EXTREMES) if rng.random() < 0.7 else rng.randrange(2**width)
    struct.pack_into(fmt, b, GR.OFF[name], v % 2**width)
    return bytes(b)


def read_like_a_session(path: str) -> GpuTotals:
    """What a session does with a region: open it, take frames and names each tick, decode,
    join, count; then finish. Raises RegionError or LayoutError on a region it refuses."""
    r = GR.GpuRegion(PID, path)
    try:
        dtypes = D.layouts(r.kind_sizes())
        joiner, totals = Joiner(), GpuTotals(t0=T0)
        for tick in range(3):
            now = NOW + tick * 250_000_000
            frames = r.read()
            r.names()
            if frames and dtypes:
                joiner.feed(D.decode(frames, dtypes), now)
            totals.add(joiner.ready(now, final=tick == 2), joiner.op_names, r.name_text, now)
        totals.finish()
        return totals
    finally:
        r.close()


def bounded(totals: GpuTotals) -> str | None:
    """What grew past its bound, if anything."""
    for u in totals.unions():
        if len(u.bins) > MAX_BINS:
            return f"{len(u.bins)} busy-time bins"
    if len(totals.top) > MAX_KERNEL_NAMES:
        return f"{len(totals.top)} kernel names"
    if len(totals.devices) > 64:
        return f"{len(totals.devices)} devices"
    return None


def fuzz(path: str, cases: int, seed: int) -> dict:
    """Run ``cases`` variants through a session's reading. Returns counts and the first defects."""
    rng = random.Random(seed)
    base = base_region()
    return drive(path, cases, lambda: mutate(rng, base), _one)


def _one(path: str, out: dict, data: bytes) -> None:
    try:
        grew = bounded(read_like_a_session(path))
    except (GR.RegionError, D.LayoutError):
        out["typed"] += 1
        return
    except Exception as e:  # noqa: BLE001 - what the fuzzer looks for
        grew = f"{type(e).__name__}: {e}"
    if grew is None:
        out["read"] += 1
        return
    out["untyped"] += 1
    if len(out["examples"]) < 5:
        out["examples"].append(grew)
