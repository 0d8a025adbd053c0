"""Join GPU activity to the CUDA API calls that launched it (collector side, vectorised).

Each kernel, memcpy and memset is matched by correlation id with the runtime (or
driver) API record of the call that issued it: that gives the launching thread and
the instant of the launch, and through them the operation (``op_of``). A runtime call
and the driver call inside it share the id: the runtime record wins.

An activity whose API record has not arrived yet waits up to ``wait_ns``; after that
it goes out with an unknown thread (counted in ``unjoined``). All of it runs on numpy
arrays: the work per batch does not loop over records in Python.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import gpu_decode as D
from ..ring import gpu_records as G

API_KEEP = 200_000          # API records kept for the join (the newest by correlation id)

# A joined activity: what the GPU aggregation reads.
JOINED = np.dtype([("kind", "u1"), ("start", "<i8"), ("end", "<i8"), ("device", "<u4"), ("stream", "<u4"),
                   ("corr", "<u4"), ("detail", "<i8"), ("tid", "<u4"), ("launch", "<i8"), ("op", "<u4")])


def default_op_of(tid: int, ts: int) -> str:
    """The operation active on a thread at an instant: one ``<all>`` until operations land."""
    return G.ALL_OP


class Joiner:
    """Correlation-id join plus clock conversion; yields JOINED arrays."""

    def __init__(self, op_of: Callable[[int, int], str] = default_op_of, wait_ns: int = 1_000_000_000):
        self.op_of = op_of
        self.wait_ns = wait_ns
        self.offset = 0                       # CUPTI ts - CLOCK_MONOTONIC ns (0: CUPTI uses ours)
        self.api = np.empty(0, D.API)         # sorted by corr, one per corr
        self.pending = np.empty(0, D.ACTIVITY)
        self.arrived = np.empty(0, np.int64)
        self.op_names: list[str] = [G.ALL_OP]  # op index -> name (JOINED["op"])
        self._op_ids = {G.ALL_OP: 0}
        self.joined = self.unjoined = self.records = 0

    def feed(self, batch: D.Batch, now: int) -> None:
        """Take one decoded batch (arrival time ``now``, monotonic ns)."""
        if len(batch.api):
            api = batch.api.copy()
            api["start"] -= self.offset
            both = np.concatenate([self.api, api])
            order = np.lexsort((both["domain"], both["corr"]))      # by corr, runtime (0) first
            both = both[order]
            first = np.ones(len(both), bool)
            first[1:] = both["corr"][1:] != both["corr"][:-1]
            self.api = both[first][-API_KEEP:]
        if len(batch.acts):
            acts = batch.acts.copy()
            acts["start"] -= self.offset
            acts["end"] -= self.offset
            self.pending = np.concatenate([self.pending, acts])
            self.arrived = np.concatenate([self.arrived, np.full(len(acts), now, np.int64)])

    def ready(self, now: int, final: bool = False) -> np.ndarray:
        """Every pending activity that found its API record, or waited long enough."""
        p = self.pending
        if not len(p):
            return np.empty(0, JOINED)
        corr = self.api["corr"]
        idx = np.searchsorted(corr, p["corr"])
        idx_c = np.minimum(idx, max(0, len(corr) - 1))
        found = (idx < len(corr)) & (corr[idx_c] == p["corr"]) if len(corr) else np.zeros(len(p), bool)
        go = found | final | (now - self.arrived >= self.wait_ns)
        out = np.zeros(int(go.sum()), JOINED)
        src = p[go]
        for f in D.ACTIVITY.names:
            out[f] = src[f]
        hit = found[go]
        api = self.api[idx_c[go]]
        out["tid"] = np.where(hit, api["tid"], 0)
        out["launch"] = np.where(hit, api["start"], 0)
        out["op"] = self._ops(out["tid"], out["launch"], hit)
        self.pending, self.arrived = p[~go], self.arrived[~go]
        n_hit = int(hit.sum())
        self.records += len(out)
        self.joined += n_hit
        self.unjoined += len(out) - n_hit
        return out

    def _ops(self, tids: np.ndarray, launch: np.ndarray, hit: np.ndarray) -> np.ndarray:
        """Operation index per activity: the launching thread's operation, one lookup per thread."""
        ops = np.zeros(len(tids), np.uint32)
        if not hit.any():
            return ops
        uniq, inv = np.unique(tids[hit], return_inverse=True)
        last = launch[hit].max()
        ids = np.array([self._op_id(self.op_of(int(t), int(last))) for t in uniq], np.uint32)
        ops[hit] = ids[inv]
        return ops

    def _op_id(self, name: str) -> int:
        i = self._op_ids.get(name)
        if i is None:
            i = self._op_ids[name] = len(self.op_names)
            self.op_names.append(name)
        return i
