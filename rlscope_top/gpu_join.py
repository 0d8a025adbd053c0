"""Join GPU activity to the CUDA API calls that launched it (collector side).

The agent sends compact CUPTI records (see Converter in the agent). Here each
kernel, memcpy and memset is matched by correlation id with the runtime (or driver)
API record of the call that issued it: that gives the launching thread and the
instant of the launch, and through them the operation (``op_of``). CUPTI's clock is
converted to CLOCK_MONOTONIC with the offset the agent measures in each batch.

An activity whose API record has not arrived yet waits up to ``wait_ns`` (API records
usually complete first, but may sit in another buffer); after that it is written
with an unknown thread.
"""

from __future__ import annotations

import collections
from typing import Callable

from . import gpu_records as G

API_KEEP = 200_000          # unmatched API records kept at most (oldest dropped first)


def default_op_of(tid: int, ts: int) -> str:
    """The operation active on a thread at an instant: one ``<all>`` until operations land."""
    return G.ALL_OP


class Joiner:
    """Correlation-id join plus clock conversion; emits ring ``gpu`` records."""

    def __init__(self, op_of: Callable[[int, int], str] = default_op_of, wait_ns: int = 1_000_000_000):
        self.op_of = op_of
        self.wait_ns = wait_ns
        self.offset = 0                  # cupti ts - monotonic ns
        self.api: collections.OrderedDict[int, tuple[int, int, int]] = collections.OrderedDict()
        self.pending: collections.deque[tuple[int, list]] = collections.deque()   # (arrived, raw)
        self.names: dict[int, str] = {}
        self._new_names: dict[int, str] = {}
        self.joined = self.unjoined = self.records = 0

    def feed(self, msg: dict, now: int) -> None:
        """Take one ``act`` message from the agent (arrival time ``now``, monotonic ns)."""
        if msg.get("clock"):
            c, mono = msg["clock"]
            self.offset = c - mono
        for nid, name in (msg.get("names") or {}).items():
            self.names[int(nid)] = name
            self._new_names[int(nid)] = name
        for start, end, tid, corr, cbid, dom in msg.get("a", ()):
            if dom == 0 or corr not in self.api:     # prefer the runtime call over the driver call inside it
                self.api[corr] = (tid, start - self.offset, cbid)
        while len(self.api) > API_KEEP:
            self.api.popitem(last=False)
        for kind, key in ((G.KERNEL, "k"), (G.MEMCPY, "m"), (G.MEMSET, "s")):
            for r in msg.get(key, ()):
                self.pending.append((now, [kind, *r]))

    def ready(self, now: int, final: bool = False) -> dict | None:
        """A ring ``gpu`` record of everything joined (or waited long enough), or None."""
        items = []
        while self.pending and (final or self._joinable(self.pending[0], now)):
            _, raw = self.pending.popleft()
            items.append(self._item(raw))
        if not items and not self._new_names:
            return None
        names, self._new_names = self._new_names, {}
        return G.gpu(items, names)

    def _joinable(self, entry: tuple[int, list], now: int) -> bool:
        arrived, raw = entry
        return raw[5] in self.api or now - arrived >= self.wait_ns

    def _item(self, raw: list) -> list:
        kind, start, end, dev, stream, corr = raw[:6]
        detail = raw[6]                          # kernel: name id; memcpy/memset: bytes
        api = self.api.get(corr)        # kept: a graph launch's kernels all share its id
        tid, launch = (api[0], api[1]) if api else (0, 0)
        self.records += 1
        if api:
            self.joined += 1
        else:
            self.unjoined += 1
        op = self.op_of(tid, launch) if api else G.ALL_OP
        return G.activity(kind, start - self.offset, end - self.offset, dev, stream, corr, tid, launch, op, detail)
