"""A stand-in for the GPU this machine lacks, behind cupti-python's own interface.

``FakeCupti`` has the functions of ``cupti.cupti`` that the agent calls
(activity_enable/disable, activity_register_callbacks, activity_flush_all,
get_timestamp, get_callback_name) and the real module's enums and error classes. Its
records are *real* cupti-python record objects (ActivityKernel13, ActivityAPI,
ActivityMemcpy7, ActivityMemset5) filled in by hand, handed to the registered
callback when the agent flushes, as CUPTI hands over completed buffers. Used only by
tests (injected with ``enable_gpu_activity(cupti=...)`` or ``Agent(cupti)``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from cupti import cupti as real

DATA = Path(__file__).parent / "data"

_KIND = {"ActivityKernel13": "CONCURRENT_KERNEL", "ActivityAPI": None, "ActivityMemcpy7": "MEMCPY",
         "ActivityMemset5": "MEMSET"}


def record(spec: dict):
    """One real cupti-python record object from a JSON-able dict (see tests/data/README.md)."""
    cls = getattr(real, spec["type"])
    r = cls()
    kind = spec.get("kind") or _KIND[spec["type"]]
    r.kind = int(getattr(real.ActivityKind, kind))
    for k, v in spec.items():
        if k in ("type", "kind"):
            continue
        if k == "cbid" and isinstance(v, str):
            enum = real.RuntimeApiTraceCbid if kind == "RUNTIME" else real.DriverApiTraceCbid
            v = int(enum[v])
        elif k == "copy_kind" and isinstance(v, str):
            v = int(real.ActivityMemcpyKind[v])
        setattr(r, k, v)
    return r


def load(name: str) -> dict:
    """A hand-built sequence from tests/data, with its records as real cupti objects."""
    doc = json.loads((DATA / name).read_text())
    doc["objects"] = [record(s) for s in doc["records"]]
    return doc


class FakeCupti:
    """The part of ``cupti.cupti`` the agent uses, delivering hand-built real records.

    Args:
        offset_ns: CUPTI's clock minus CLOCK_MONOTONIC (to test the conversion).
        fail: an exception ``activity_enable`` raises (e.g. a real cuptiError).
    """

    ActivityKind = real.ActivityKind
    CallbackDomain = real.CallbackDomain
    Result = real.Result
    cuptiError = real.cuptiError
    RuntimeApiTraceCbid = real.RuntimeApiTraceCbid
    DriverApiTraceCbid = real.DriverApiTraceCbid

    def __init__(self, offset_ns: int = 0, fail: BaseException | None = None):
        self.offset_ns, self.fail = offset_ns, fail
        self.enabled: set[int] = set()
        self.callbacks = None
        self.pending: list = []
        self.flushes: list[int] = []
        self._lock = threading.Lock()
        self._corr = 0
        self._stream_free: dict[int, int] = {}

    def activity_enable(self, kind) -> None:
        if self.fail is not None:
            raise self.fail
        self.enabled.add(int(kind))

    def activity_disable(self, kind) -> None:
        self.enabled.discard(int(kind))

    def activity_register_callbacks(self, requested, completed) -> None:
        self.callbacks = (requested, completed)

    def activity_flush_all(self, flag: int) -> None:
        self.flushes.append(flag)
        with self._lock:
            batch = [r for r in self.pending if r.kind in self.enabled]
            self.pending = []
        if batch and self.callbacks:
            self.callbacks[1](batch)

    def get_timestamp(self) -> int:
        return time.monotonic_ns() + self.offset_ns

    def get_callback_name(self, domain, cbid: int) -> str:
        enum = self.RuntimeApiTraceCbid if int(domain) == int(self.CallbackDomain.RUNTIME_API) else self.DriverApiTraceCbid
        return enum(cbid).name

    # -- producing activity (what the GPU and driver would do) ----------------
    def emit(self, records: list) -> None:
        """Queue records for the next flush (only enabled kinds are delivered)."""
        with self._lock:
            self.pending.extend(records)

    def launch(self, tid: int, name: str, dur_ns: int, gap_ns: int = 5_000, stream: int = 7) -> tuple[int, int]:
        """A cudaLaunchKernel now on thread ``tid`` and its kernel; returns the kernel's
        (start, end) in CLOCK_MONOTONIC ns."""
        self._corr += 1
        t = time.monotonic_ns()
        api_end = time.monotonic_ns()
        k0 = max(api_end + gap_ns, self._stream_free.get(stream, 0))   # a stream runs one kernel at a time
        self._stream_free[stream] = k0 + dur_ns
        o = self.offset_ns
        self.emit([record({"type": "ActivityAPI", "kind": "RUNTIME", "start": t + o, "end": api_end + o,
                           "thread_id": tid, "process_id": 0, "correlation_id": self._corr,
                           "cbid": "cudaLaunchKernel_v7000"}),
                   record({"type": "ActivityKernel13", "start": k0 + o, "end": k0 + dur_ns + o, "device_id": 0,
                           "stream_id": stream, "correlation_id": self._corr, "name": name, "context_id": 1})])
        return k0, k0 + dur_ns
