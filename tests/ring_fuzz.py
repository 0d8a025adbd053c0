"""Seeded fuzzing of the ring reader and of `compare`'s summary loading: hostile or broken
files give RingError / UsageError, nothing else.

Cases start from a real ring (written by RingWriter, lapped so head and tail are not 0)
and are: random bytes, truncations, byte flips in the header and the data, and header
fields (capacity, head, tail, seq, version) set to extremes. Shared by the suite
(tests/test_safe_files.py) and the larger run in bench/fuzz_ring.py.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
from typing import Callable

from rich.console import Console

from rlscope_top.report import compare
from rlscope_top.ring import records as R
from rlscope_top.report import summary as S
from rlscope_top.errors import UsageError
from rlscope_top.ring.ring import HEADER_SIZE, RingError, RingReader, RingWriter

_FIELDS = {"version": (8, "<I"), "capacity": (16, "<Q"), "head": (24, "<Q"), "tail": (32, "<Q"),
           "seq": (40, "<Q"), "flags": (52, "<I")}
_EXTREMES = [0, 1, 7, 8, 4095, 4096, 2**31, 2**32 - 1, 2**63, 2**64 - 1]


def base_ring(path: str) -> bytes:
    """A lapped 8 KiB ring of varied records, as bytes."""
    w = RingWriter(path, capacity=8192)
    for i in range(200):
        w.write(R.note(i, "info", "x" * (i % 97)))
    w.close()
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return data


def mutate(rng: random.Random, base: bytes) -> bytes:
    """One hostile variant of ``base``."""
    kind = rng.randrange(5)
    b = bytearray(base)
    if kind == 0:
        return rng.randbytes(rng.choice([0, 8, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 64, len(base)]))
    if kind == 1:
        return bytes(b[:rng.randrange(len(b))])
    if kind == 2:
        for _ in range(rng.randrange(1, 16)):
            i = rng.randrange(64) if rng.random() < 0.5 else rng.randrange(HEADER_SIZE, len(b))
            b[i] = rng.randrange(256)
        return bytes(b)
    off, fmt = _FIELDS[rng.choice(list(_FIELDS))]
    v = rng.choice(_EXTREMES) if kind == 3 else rng.randrange(2 ** (8 * struct.calcsize(fmt)))
    struct.pack_into(fmt, b, off, v % 2 ** (8 * struct.calcsize(fmt)))
    return bytes(b)


def fuzz(path: str, cases: int, seed: int) -> dict:
    """Run ``cases`` variants through RingReader. Returns counts and the first untyped errors."""
    rng = random.Random(seed)
    base = base_ring(path)
    return drive(path, cases, lambda: mutate(rng, base), _one)


def drive(path: str, cases: int, make: Callable[[], bytes], one: Callable[[str, dict, bytes], None]) -> dict:
    """Write ``cases`` variants from ``make`` to ``path`` in turn and hand each to ``one``,
    which counts it in ``out`` (typed, read, untyped, examples)."""
    out = {"cases": cases, "typed": 0, "read": 0, "untyped": 0, "examples": []}
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(cases):
            data = make()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            one(path, out, data)
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def _one(path: str, out: dict, data: bytes) -> None:
    try:
        r = RingReader(path)
        try:
            for _ in range(3):
                r.poll(limit=1000)
        finally:
            r.close()
        out["read"] += 1
    except RingError:
        out["typed"] += 1
    except Exception as e:  # noqa: BLE001 - what the fuzzer looks for
        _untyped(out, e, f"header {data[:64].hex()}")


def _untyped(out: dict, e: Exception, what: str) -> None:
    out["untyped"] += 1
    if len(out["examples"]) < 5:
        out["examples"].append(f"{type(e).__name__}: {e} ({what})")


def summary_doc() -> dict:
    """A small summary with every field `compare` reads."""
    return {"schema": S.SCHEMA, "duration_s": 10.0,
            "totals": {"wall_s": 10.0, "python_s": 4.0, "backend_s": 5.0, "simulator_s": 1.0, "cuda_api_s": None,
                       "gpu_s": None},
            "shares": {"python": 0.4, "backend": 0.5, "simulator": 0.1, "cuda_api": 0.0},
            "transitions": {"python->backend": 1009, "backend->cuda_api": None},
            "calls": {"backend": 1009, "simulator": 23, "cuda_api": None},
            "frameworks": {"torch": {"calls": 1009, "backend_s": 5.0, "python->backend": 1009}}}


_WRONG = [None, "x", -1, float("inf"), float("nan"), [], {}, True, 2**70, {"a": 1}, [1.5], 0, 3.5]


def mutant(rng: random.Random) -> dict:
    """A summary with one field (top level, in a section, or in a framework) set to a wrong value."""
    doc = summary_doc()
    spots = [(doc, k) for k in doc] + [(sec, k) for sec in doc.values() if isinstance(sec, dict) for k in sec]
    spots += [(doc["frameworks"]["torch"], k) for k in ("calls", "backend_s", "python->backend")]
    where, key = rng.choice(spots)
    where[key] = rng.choice(_WRONG)
    return doc


def fuzz_compare(tmpdir: str, cases: int, seed: int) -> dict:
    """Run ``cases`` mutated summaries through `compare` against a good one."""
    rng = random.Random(seed)
    a, b = os.path.join(tmpdir, "a.json"), os.path.join(tmpdir, "b.json")
    with open(a, "w") as f:
        json.dump(summary_doc(), f)
    out = {"cases": cases, "typed": 0, "read": 0, "untyped": 0, "examples": []}
    for _ in range(cases):
        text = json.dumps(mutant(rng))
        with open(b, "w") as f:
            f.write(text)
        try:
            compare.run(a, b, console=Console(file=io.StringIO()))
            out["read"] += 1
        except UsageError:
            out["typed"] += 1
        except Exception as e:  # noqa: BLE001 - what the fuzzer looks for
            _untyped(out, e, text[:300])
    return out
