"""CUPTI activity records as the GPU agent hands them to the monitor, built with
cupti-python's own numpy dtypes (no GPU needed): one frame of same-kind records per
kind, as probes/gpu_agent.c groups them. Used by the decoder and join tests and by the
hand-built sequence in tests/data (see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cupti import cupti as real

DATA = Path(__file__).parent / "data"
KIND = {"ActivityKernel13": 10, "ActivityMemcpy7": 1, "ActivityMemset5": 2}
DTYPE = {"ActivityKernel13": real.activity_kernel13_dtype, "ActivityMemcpy7": real.activity_memcpy7_dtype,
         "ActivityMemset5": real.activity_memset5_dtype, "ActivityAPI": real.activity_api_dtype}
SIZES = {10: real.activity_kernel13_dtype.itemsize, 1: real.activity_memcpy7_dtype.itemsize,
         2: real.activity_memset5_dtype.itemsize, 5: real.activity_api_dtype.itemsize,
         4: real.activity_api_dtype.itemsize}
NAME_BASE = 0x7F00_0000_1000        # pretend pointers to kernel names in the target


def _kind(spec: dict) -> int:
    if spec["type"] == "ActivityAPI":
        return int(getattr(real.ActivityKind, spec["kind"]))
    return KIND[spec["type"]]


def _value(field: str, v, names: dict[str, int]):
    if field == "name":
        return names.setdefault(v, NAME_BASE + 0x100 * len(names))
    if field == "cbid" and isinstance(v, str):
        return int(getattr(real.RuntimeApiTraceCbid, v, None) or getattr(real.DriverApiTraceCbid, v))
    if field == "copy_kind" and isinstance(v, str):
        return int(getattr(real.ActivityMemcpyKind, v))
    return v


def frames(specs: list[dict]) -> tuple[list[tuple[int, bytes]], dict[int, str]]:
    """(frames, {name pointer: name}) for record specs in tests/data's format."""
    names: dict[str, int] = {}
    by_kind: dict[int, list[dict]] = {}
    for spec in specs:
        by_kind.setdefault(_kind(spec), []).append(spec)
    out = []
    for kind, group in by_kind.items():
        recs = np.zeros(len(group), DTYPE[group[0]["type"]])     # one array: its itemsize is CUPTI's
        recs["kind"] = kind
        for i, spec in enumerate(group):
            for field, v in spec.items():
                if field not in ("type", "kind"):
                    recs[field][i] = _value(field, v, names)
        out.append((kind, recs.tobytes()))
    return out, {p: n for n, p in names.items()}


def load(name: str) -> dict:
    """A sequence from tests/data with its frames and names."""
    with open(DATA / name) as f:
        seq = json.load(f)
    seq["frames"], seq["names"] = frames(seq["records"])
    return seq
