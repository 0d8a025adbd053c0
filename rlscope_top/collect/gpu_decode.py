"""Decode whole CUPTI activity buffers in the monitor, vectorised (no bcc, no textual).

The agent hands over each completed CUPTI buffer as bytes (probes/gpu_agent.c). Each
record is as long as its kind's struct in the CUPTI the target runs, which the agent
asked CUPTI for (``cuptiActivityGetStructSize``). The layout of each struct comes from cupti-python's
numpy dtypes (``activity_kernel13_dtype`` and so on), picked by size: a CUPTI whose
records match none of them is refused with one line, never guessed.

The agent copies each buffer's records into one frame per kind (same bytes, grouped),
so each frame is one numpy view: the Python work is per frame, never per record.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from ..errors import LayoutError

KIND_MEMCPY, KIND_MEMSET, KIND_KERNEL, KIND_DRIVER, KIND_RUNTIME, KIND_CONCURRENT_KERNEL = 1, 2, 3, 4, 5, 10
KIND_NAMES = {KIND_MEMCPY: "memcpy", KIND_MEMSET: "memset", KIND_KERNEL: "kernel", KIND_DRIVER: "driver API",
              KIND_RUNTIME: "runtime API", KIND_CONCURRENT_KERNEL: "kernel"}

# Which cupti-python dtypes can describe each kind, and the fields we read of them.
CANDIDATES = {
    "kernel": ("activity_kernel9_dtype", "activity_kernel10_dtype", "activity_kernel11_dtype",
               "activity_kernel12_dtype", "activity_kernel13_dtype"),
    "memcpy": ("activity_memcpy5_dtype", "activity_memcpy6_dtype", "activity_memcpy7_dtype"),
    "memset": ("activity_memset4_dtype", "activity_memset5_dtype"),
    "api": ("activity_api_dtype",),
}
FIELDS = {
    "kernel": ("start", "end", "device_id", "stream_id", "correlation_id", "name"),
    "memcpy": ("start", "end", "device_id", "stream_id", "correlation_id", "bytes", "copy_kind"),
    "memset": ("start", "end", "device_id", "stream_id", "correlation_id", "bytes"),
    "api": ("start", "end", "thread_id", "correlation_id", "cbid"),
}
GROUP = {KIND_KERNEL: "kernel", KIND_CONCURRENT_KERNEL: "kernel", KIND_MEMCPY: "memcpy", KIND_MEMSET: "memset",
         KIND_RUNTIME: "api", KIND_DRIVER: "api"}

# The monitor's own table of one GPU activity (kernel, memcpy, memset) after decoding.
ACT_KERNEL, ACT_MEMCPY, ACT_MEMSET = 0, 1, 2
ACTIVITY = np.dtype([("kind", "u1"), ("start", "<i8"), ("end", "<i8"), ("device", "<u4"), ("stream", "<u4"),
                     ("corr", "<u4"), ("detail", "<i8")])     # detail: kernel name pointer, else bytes
API = np.dtype([("corr", "<u4"), ("tid", "<u4"), ("start", "<i8"), ("domain", "u1")])



def _cupti():
    try:
        from cupti import cupti  # noqa: PLC0415 - optional (gpu/test extras)
    except Exception as e:  # ImportError, or a broken install
        raise LayoutError(f"cupti-python is not importable in rlscope-top's Python ({e}): "
                          "`pip install cupti-python` there to decode GPU activity") from None
    return cupti


def _reduced(full: np.dtype, names: tuple[str, ...]) -> np.dtype:
    """The same record with only the fields we read (numpy skips the rest)."""
    return np.dtype({"names": list(names), "formats": [full.fields[n][0] for n in names],
                     "offsets": [full.fields[n][1] for n in names], "itemsize": full.itemsize})


def layouts(kind_sizes: dict[int, int]) -> dict[int, np.dtype]:
    """A reduced dtype for every kind the agent walks, chosen by its record size.

    Args:
        kind_sizes: record bytes per activity kind, as the target's CUPTI reported them.

    Raises:
        LayoutError: cupti-python is missing, or a kernel/memcpy/memset/API record size
            matches none of its dtypes (a CUPTI newer than cupti-python).
    """
    cupti = _cupti()
    out = {}
    for kind, size in kind_sizes.items():
        group = GROUP.get(kind)
        if group is None:
            continue
        fulls = [getattr(cupti, n) for n in CANDIDATES[group] if hasattr(cupti, n)]
        match = [d for d in fulls if d.itemsize == size]
        if not match:
            known = ", ".join(str(d.itemsize) for d in fulls)
            raise LayoutError(f"the target's CUPTI writes {KIND_NAMES[kind]} records of {size} bytes; this "
                              f"cupti-python knows {known}: upgrade cupti-python where rlscope-top runs")
        out[kind] = _reduced(match[-1], FIELDS[group])
    return out


@dataclasses.dataclass
class Batch:
    """The activities and API records of some buffers, as numpy tables."""

    acts: np.ndarray           # ACTIVITY
    api: np.ndarray            # API
    unknown: int = 0           # frames of a kind (or size) we cannot decode


def decode(frames: list[tuple[int, bytes]], dtypes: dict[int, np.dtype]) -> Batch:
    """Decode frames of same-kind records into one Batch (times still on CUPTI's clock).

    Args:
        frames: (CUPTI activity kind, records as CUPTI wrote them) from the agent.
        dtypes: :func:`layouts` of the agent's record sizes.
    """
    parts: dict[int, list[np.ndarray]] = {}
    unknown = 0
    for kind, buf in frames:
        dt = dtypes.get(kind)
        if dt is None or len(buf) % dt.itemsize:
            unknown += 1
            continue
        parts.setdefault(kind, []).append(np.frombuffer(buf, dt))
    acts = [_acts(ACT_KERNEL, parts.get(KIND_CONCURRENT_KERNEL, []) + parts.get(KIND_KERNEL, []), "name"),
            _acts(ACT_MEMCPY, parts.get(KIND_MEMCPY, []), "bytes"),
            _acts(ACT_MEMSET, parts.get(KIND_MEMSET, []), "bytes")]
    api = [_api(0, parts.get(KIND_RUNTIME, [])), _api(1, parts.get(KIND_DRIVER, []))]
    return Batch(np.concatenate(acts), np.concatenate(api), unknown)


def _acts(kind: int, arrays: list[np.ndarray], detail: str) -> np.ndarray:
    n = sum(len(a) for a in arrays)
    out = np.empty(n, ACTIVITY)
    if not n:
        return out
    src = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    out["kind"] = kind
    out["start"], out["end"] = src["start"], src["end"]
    out["device"], out["stream"], out["corr"] = src["device_id"], src["stream_id"], src["correlation_id"]
    out["detail"] = src[detail]
    return out


def _api(domain: int, arrays: list[np.ndarray]) -> np.ndarray:
    n = sum(len(a) for a in arrays)
    out = np.empty(n, API)
    if not n:
        return out
    src = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    out["corr"], out["tid"], out["start"] = src["correlation_id"], src["thread_id"], src["start"]
    out["domain"] = domain
    return out
