"""Traced windows: GPU kernel timing within the overhead budget at any kernel rate.

CUPTI costs the training thread about 2 us per traced kernel (measured on an H100), so
at RL rates (80k kernels/s) continuous tracing alone would cost ~16%. When the budget
says the GPU agent is the costly part, the GPU source traces in short windows (0.5 s,
spaced so that they use about half the budget) and estimates what happens between them:

- per launch, when the eBPF probes count the CUDA launches (exact), from the kernels,
  busy time and so on per launch of the latest window;
- per second otherwise, from the latest window's rates.

Every figure so estimated is marked ``estimated``; the summary says how many windows
there were and how much time they covered.
"""

from __future__ import annotations

import dataclasses

from ..account.gpu_accounting import FIGURES

WINDOW_S = 0.5          # how long a traced window lasts
SHARE = 0.5             # share of the overhead budget the windows may use
MIN_PERIOD_S = 2.0      # windows start at most this often
KEYS = (*FIGURES, "busy_ns")


def _figs(totals) -> dict:
    """Cumulative figures of everything and of each operation, now."""
    return {"all": totals.all.figures(), "ops": {n: o.figures() for n, o in totals.ops.items()}}


def _delta(a: dict, b: dict) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in KEYS}


@dataclasses.dataclass
class Snap:
    """What the totals and the launch probes said at one instant."""

    ns: int
    launches: int
    figs: dict


class GpuWindows:
    """The windowed mode of one GPU source: when to trace, and the estimates in between."""

    def __init__(self):
        self.on = False
        self.period_s = 0.0
        self.open: Snap | None = None        # the window being traced now
        self.next_ns = 0
        self.windows = 0
        self.traced_ns = 0
        self.basis: dict | None = None        # the latest window: figures per ns and per launch
        self.est = {"all": dict.fromkeys(KEYS, 0.0), "ops": {}}
        self.est_ns = 0
        self.how = "rate"
        self._last: Snap | None = None

    def begin(self, cost_pct: float, max_pct: float, base: Snap, now: Snap) -> float:
        """Switch to windows: the traced stretch from ``base`` to ``now`` is the first basis."""
        self.on = True
        self.period_s = max(MIN_PERIOD_S, WINDOW_S * cost_pct / (SHARE * max_pct))
        self.next_ns = now.ns          # the first window at once: the continuous stretch's
        self._learn(base, now)         # counts come in whole CUPTI buffers, a rough basis
        self._last = now
        return self.period_s

    def due(self, now_ns: int) -> bool:
        """Whether a window should open now."""
        return self.on and self.open is None and now_ns >= self.next_ns

    def opened(self, snap: Snap) -> None:
        """A window began (CUPTI on)."""
        self.open = snap
        self._last = None

    def closing(self, now_ns: int) -> bool:
        """Whether the open window has run its length."""
        return self.open is not None and now_ns >= self.open.ns + int(WINDOW_S * 1e9)

    def closed(self, snap: Snap) -> None:
        """The window ended (CUPTI off, flushed): its figures become the basis."""
        self._learn(self.open, snap)
        self.windows += 1
        self.traced_ns += snap.ns - self.open.ns
        self.open = None
        self.next_ns = snap.ns + int(self.period_s * 1e9)
        self._last = snap

    def _learn(self, a: Snap, b: Snap) -> None:
        dt = b.ns - a.ns
        if dt <= 0:
            return
        allf = _delta(a.figs["all"], b.figs["all"])
        ops = {n: _delta(a.figs["ops"].get(n, {}), f) for n, f in b.figs["ops"].items()}
        launches = b.launches - a.launches
        self.basis = {"ns": dt, "launches": launches, "all": allf,
                      "ops": {n: f for n, f in ops.items() if any(f.values())}}

    def gap(self, snap: Snap) -> None:
        """Between windows: estimate what this stretch (since the last call) ran."""
        last, self._last = self._last, snap
        if last is None or self.basis is None or self.open is not None:
            return
        dt = snap.ns - last.ns
        b = self.basis
        if b["launches"] > 0 and snap.launches - last.launches >= 0 and snap.launches > 0:
            scale, self.how = (snap.launches - last.launches) / b["launches"], "launches"
        else:
            scale, self.how = dt / b["ns"], "rate"
        self.est_ns += dt
        for k in KEYS:
            self.est["all"][k] += b["all"][k] * scale
        for n, f in b["ops"].items():
            acc = self.est["ops"].setdefault(n, dict.fromkeys(KEYS, 0.0))
            for k in KEYS:
                acc[k] += f[k] * scale

    def record(self) -> dict | None:
        """The ``windows`` part of a gtot record (None while tracing continuously)."""
        if not self.on:
            return None
        r = lambda f: {k: int(v) for k, v in f.items()}   # noqa: E731
        return {"mode": "windowed", "windows": self.windows, "period_s": round(self.period_s, 3),
                "traced_ns": self.traced_ns, "estimated_ns": self.est_ns, "basis": self.how,
                "estimate": {"all": r(self.est["all"]), "ops": {n: r(f) for n, f in self.est["ops"].items()}}}
