"""The collector's GPU source: CUPTI activity from the GPU agent, NVML samples, and the
time blocked in CUDA synchronize calls (from the eBPF probes).

It is a source with start / counters / tick / drain / finish / stop hooks that the
collector calls on its own thread, so the ring keeps one writer. Each tick it takes
whole CUPTI buffers from the agent's shared region (probes/gpu_region.py), decodes and
joins them with numpy, and writes one cumulative ``gtot`` record. Missing pieces (no
agent, no driver, no GPU, no permission, another CUPTI user) become one ``gstat``
record and one notice each; the CPU side keeps working.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time

from ..ring import gpu_records as G
from ..errors import GpuActivityUnavailable, LayoutError
from ..account.gpu_accounting import GpuTotals
from .gpu_windows import GpuWindows, Snap, _figs
from ..probes import catalog, gpu_inject, gpu_region, proc_maps
from ..probes.nvml import NvmlSampler
from .target import is_alive

START_WAIT_S = 20.0         # CUPTI's first enable can take seconds (driver, context)
STOP_WAIT_S = 10.0          # disable + forced flush
FIND_PERIOD_S = 1.0         # without an agent: look for one this often (it may be loaded later) ...
LAUNCH_FIND_PERIOD_S = 0.1  # ... and in `run`, where it starts itself and may live briefly
FIND_FULL_S = 5.0           # where the target's shared memory has not moved, look this often only (_find_due)
CUPTI_NS_PER_ACTIVITY = 2000   # CUPTI's own cost per traced activity, measured on an H100 (docs/gpu-validation.md)
CHUNK = 20_000              # activity items per `gpu` record (--timeline only)
RECENT_TICKS = 8            # snaps kept while traced continuously
BASIS_S = 1.0               # when tracing turns windowed, the last second is the first basis


@dataclasses.dataclass
class GpuOptions:
    """How the session gets GPU activity."""

    inject: bool = False                # --gpu-activity: inject the agent when the target has none
    nvml: bool = True
    launch: bool = False                # `run`: the agent starts itself in the command at cuInit
    no_agent_msg: str | None = None     # what to say when no agent is found (default: how to get one)
    inject_now: threading.Event = dataclasses.field(default_factory=threading.Event)   # the screen's `g` key


class GpuSource:
    """GPU activity, NVML and sync time for one collector."""

    name = "gpu"                      # as the overhead budget knows it

    def __init__(self, opts: GpuOptions | None = None, nvml=None):
        self.opts = opts or GpuOptions()
        self.win = GpuWindows()
        self._recent: collections.deque = collections.deque(maxlen=RECENT_TICKS)   # snaps while traced
        self._was_tracing = False
        self._nvml_mod = nvml
        self.region: gpu_region.GpuRegion | None = None
        self.dtypes: dict = {}
        self._next_find = 0.0
        self._find_key: tuple | None = None     # the target's proc_maps.stamp at the last look, and when
        self._said_none = False
        self._sync_last: dict | None = None
        self.col = None

    # -- hooks ---------------------------------------------------------------------
    def start(self, col) -> None:
        """After the probes are attached: NVML, then the agent (found, or injected)."""
        self.col, self.pid, self.ring = col, col.pid, col.ring
        self.totals = GpuTotals(t0=col.t0_ns)
        self.joiner = None          # with the agent's first activity layouts (numpy is imported then)
        self.nvml = NvmlSampler(self.pid, self._nvml_mod)
        if self.opts.nvml:
            why = self.nvml.start()
            if why:
                self._status("nvml", False, "unavailable", why)
            else:
                names = ", ".join(d.name for d in self.nvml.devices)
                self._status("nvml", True, "ok", f"NVML: sampling {len(self.nvml.devices)} GPU(s): {names}")
            col.mark_attach_step("nvml_s")
        if self.opts.inject:
            self._inject()
            col.mark_attach_step("inject_s")
        if self.opts.launch and not driver_present():      # said now; an agent that shows up anyway wins
            why = _say("no_driver", "no NVIDIA driver (libcuda.so.1 not found)")
            self._status("cupti", False, "no_driver", why, note=f"GPU activity unavailable: {why}")
            self._said_none = True
        self._find(first=True)

    def on_counters(self, ctr: dict) -> None:
        """The collector wrote a counters record: the CPU side of the overlap."""
        tracing = self.region is not None and self.region.tracing
        self.totals.counters(ctr, traced=tracing and self._was_tracing or not self.win.on)
        self._was_tracing = tracing

    def tick(self) -> None:
        """Take what the agent delivered, NVML's samples and the sync times; write the totals."""
        now = time.monotonic_ns()
        if self.opts.inject_now.is_set():
            self.opts.inject_now.clear()
            self._inject_on_request()
        if self.region is None and time.monotonic() >= self._next_find and self._find_due():
            self._find()
        self._take(now)
        if self.win.on and self.region is not None:
            self._windows(now)
        elif self.region is not None and self.region.tracing:
            self._recent.append(self._snap(now))
        for s in self.nvml.poll():
            self.totals.nvml_sample(s)
        self._sync()
        self.ring.write(self.totals.record(now, windows=self.win.record()))

    # -- the overhead budget -------------------------------------------------------
    def cost_ns(self) -> int:
        """What GPU tracing has cost the target so far: the agent's callbacks and CUPTI's
        own cost per traced activity (CUPTI_NS_PER_ACTIVITY)."""
        return int((self.totals.agent or {}).get("cost_ns", 0)) if hasattr(self, "totals") else 0

    def can_degrade(self) -> bool:
        """Whether tracing is continuous now (the budget may turn it into windows)."""
        return self.region is not None and self.region.tracing and not self.win.on

    def degrade(self, d) -> str:
        """Over budget: trace in windows from now on. Returns what happened, in words."""
        now = self._stop_window()
        period = self.win.begin(d.category_pct, self.col.budget.max_pct, self._basis_start(now), now)
        return (f"kernel tracing in {0.5:g} s windows every {period:.1f} s; GPU figures between them are "
                f"estimated (per launch, or per second)")

    def _basis_start(self, now: Snap) -> Snap:
        """The newest snap at least BASIS_S old: an older one may reach back into a stretch
        before the job started launching. (It did not move the stand-in's error measurably;
        opening the first window at once did: this basis now covers one tick.)"""
        old = [s for s in self._recent if now.ns - s.ns >= BASIS_S * 0.9e9]
        return old[-1] if old else (self._recent[0] if self._recent else now)

    def _snap(self, ns: int) -> Snap:
        return Snap(ns, self._launches(), _figs(self.totals))

    def _launches(self) -> int:
        """CUDA launches the eBPF probes counted (0 when those probes are off: then per second)."""
        probes = self.col.probes
        if probes.bpf is None or probes.modes.get(catalog.CAT_CUDA) == "off":
            return 0
        hits = probes.hits()
        rt = sum(hits[i] for i, sp in enumerate(self.col.specs)
                 if i < len(hits) and sp.group == "cudart" and "Launch" in sp.label)
        drv = sum(hits[i] for i, sp in enumerate(self.col.specs)
                  if i < len(hits) and sp.group == "cuda-driver" and "Launch" in sp.label)
        return rt or drv

    def _windows(self, now: int) -> None:
        w, r = self.win, self.region
        try:
            if w.closing(now):
                w.closed(self._stop_window())
            elif w.due(now):
                w.gap(self._snap(now))                 # up to the window: nothing is left uncovered
                if r.command(gpu_region.CMD_START, START_WAIT_S) and r.tracing:
                    self._clock()
                    w.opened(self._snap(time.monotonic_ns()))
            elif w.open is None:
                w.gap(self._snap(now))
        except gpu_region.RegionError as e:
            self._lost(str(e))

    def _stop_window(self) -> Snap:
        """Stop tracing; the window's end is when the stop was asked (launches after it are
        not traced: counting the stop's latency put the rate 4-9% low), its figures all that
        the forced flush delivered."""
        asked = self._snap(time.monotonic_ns())
        self._stop_tracing()
        return Snap(asked.ns, asked.launches, _figs(self.totals))

    def _stop_tracing(self) -> None:
        if self.region.command(gpu_region.CMD_STOP, STOP_WAIT_S):
            self._take(time.monotonic_ns(), final=True)

    def drain(self) -> None:
        """The session ends: stop CUPTI (a forced flush) and take its last records."""
        r = self.region
        if r is not None and self.win.on and self.win.open is None:
            self.win.gap(self._snap(time.monotonic_ns()))   # the stretch since the last tick
        if r is not None and is_alive(self.pid):       # a process that is gone flushed at its exit
            try:
                if self.win.open is not None:
                    self.win.closed(self._stop_window())   # a window cut short still counts
                if r.tracing and not r.command(gpu_region.CMD_STOP, STOP_WAIT_S):
                    self.col.note("warn", "the GPU agent did not stop in time: its last records may be missing")
            except gpu_region.RegionError:
                pass
        self._take(time.monotonic_ns(), final=True)

    def finish(self, ts: int) -> None:
        """Write the final totals (after the final counters)."""
        if self.opts.launch and not self._said_none and self.region is None:
            self._status("cupti", False, "no_agent", "the command never initialised CUDA: no kernel timing")
        self._sync()
        self.totals.finish()
        self.ring.write(self.totals.record(ts, windows=self.win.record()))

    def stop(self) -> None:
        """Detach: the agent stays in the target, idle; NVML shuts down."""
        if self.region is not None:
            self.region.close()
            self.region = None
        if getattr(self, "nvml", None) is not None:
            self.nvml.stop()

    # -- the agent -------------------------------------------------------------------
    def _status(self, source: str, ok: bool, code: str, msg: str, level: str = "info", note: str | None = None,
                **extra) -> None:
        rec = G.status(time.monotonic_ns(), source, ok, code, msg, **extra)
        self.totals.status[source] = rec
        self.ring.write(rec)
        self.col.note(level, note or msg)

    def _inject(self) -> None:
        """--gpu-activity: load the agent into the target unless it has one."""
        if gpu_region.find(self.pid) is not None:
            return
        gpu_inject.preflight(self.pid)
        path = gpu_inject.agent_path()
        self.col.note("status", f"--gpu-activity: injecting the GPU agent into PID {self.pid} with ptrace "
                                 f"({path}); it stays loaded, idle, after detach")
        held = gpu_inject.inject(self.pid, path)
        end = time.monotonic() + gpu_inject.REGION_WAIT_S
        while gpu_region.find(self.pid) is None and time.monotonic() < end:
            time.sleep(0.01)
        self.col.note("info", f"GPU agent injected into PID {self.pid} (the process was held {held * 1e3:.0f} ms)")

    def _inject_on_request(self) -> None:
        """The live screen's `g`: inject now; a refusal is one notice, never the session's end."""
        if self.region is not None:
            return
        try:
            gpu_inject.preflight(self.pid)
            self._inject()
        except GpuActivityUnavailable as e:
            self._status("cupti", False, "no_agent", f"{e.message} ({e.hint})", level="warn")
            return
        self._said_none = False
        self._next_find = 0.0
        self._find()

    def _find_due(self) -> bool:
        """Whether a look for the agent's region can find it: the agent maps a memfd, so the
        target's shared memory moves (proc_maps.stamp); failing that, every FIND_FULL_S. rl-zoo3's ~1,300
        regions took 2.2 ms a look, every second, on a machine with no GPU. In `run` the agent
        is expected: always look."""
        if self.opts.launch:
            return True
        now = time.monotonic()
        stamp = proc_maps.stamp([self.pid])
        if self._find_key and stamp == self._find_key[0] and now - self._find_key[1] < FIND_FULL_S:
            self._next_find = now + FIND_PERIOD_S
            return False
        self._find_key = (stamp, now)
        return True

    def _find(self, first: bool = False) -> None:
        self._next_find = time.monotonic() + (LAUNCH_FIND_PERIOD_S if self.opts.launch else FIND_PERIOD_S)
        try:
            region = gpu_region.open_region(self.pid)
        except gpu_region.RegionError as e:
            if self.opts.inject:
                raise GpuActivityUnavailable(str(e), hint="another program uses that shared-memory name in the "
                                                          "target; rlscope-top does not touch it", pid=self.pid) from None
            self._no_agent(str(e), level="warn")
            return
        if region is None:
            if first and not self.opts.launch:
                self._no_agent(self.opts.no_agent_msg or self._why_no_agent())
            return
        holder = region.holder()
        if holder:
            region.close()
            self._no_agent(f"another rlscope-top (PID {holder}) collects PID {self.pid}'s GPU activity", level="warn")
            return
        self._connect(region)

    def _why_no_agent(self) -> str:
        """How to get kernel timing, where there is a GPU to time: a CPU-only job on a machine
        with no driver gets one short line, not the agent's how-to."""
        return G.HOW_TO if driver_present() or gpu_inject.cuda_libs(self.pid) else G.no_gpu(self.pid)

    def _no_agent(self, msg: str, level: str = "info") -> None:
        self._next_find = float("inf") if level == "warn" else self._next_find
        if not self._said_none:
            self._said_none = True
            self._status("cupti", False, "no_agent", msg, level=level)

    def _connect(self, region: gpu_region.GpuRegion) -> None:
        self.region = region
        region.claim(os.getpid(), gpu_inject.choose_cupti(self.pid))
        if not region.tracing and not region.command(gpu_region.CMD_START, START_WAIT_S):
            self._status("cupti", False, "error", "the GPU agent did not answer: no kernel timing", level="warn")
            return
        code, msg = region.status()
        if region.tracing:
            from . import gpu_decode as D  # noqa: PLC0415 - numpy: only once there is an agent
            from .gpu_join import Joiner  # noqa: PLC0415

            try:
                self.dtypes = D.layouts(region.kind_sizes())
            except LayoutError as e:
                region.command(gpu_region.CMD_STOP, STOP_WAIT_S)
                self._status("cupti", False, "unsupported", str(e), level="warn",
                             note=f"GPU activity unavailable: {e}")
                return
            self.joiner = self.joiner or Joiner(op_of=self.col.current_op_name)
            self._clock()
            self._status("cupti", True, "ok", "CUPTI activity on", pid=self.pid,
                         cupti_version=region.u32("cupti_version"))
            self._said_none = True
            return
        level = "info" if code in ("no_driver", "no_gpu") else "warn"
        self._status("cupti", False, code, _say(code, msg), level=level, note=f"GPU activity unavailable: {_say(code, msg)}")

    def _clock(self) -> None:
        """CUPTI's clock against ours, as the agent measured it at this start (each window's
        start measures it again; the last window's records were all taken at its stop)."""
        r = self.region
        self.joiner.offset = r.u64("clock_offset_ns") if r.u32("clock") else 0

    def _take(self, now: int, final: bool = False) -> None:
        r = self.region
        if r is not None:
            try:
                r.heartbeat()
                frames = r.read()
                r.names()
            except gpu_region.RegionError as e:
                self._lost(str(e))
                return
            if frames and self.dtypes:
                from . import gpu_decode as D  # noqa: PLC0415 - imported by _connect already

                batch = D.decode(frames, self.dtypes)
                self.undecoded = getattr(self, "undecoded", 0) + batch.unknown
                self.joiner.feed(batch, now)
            self.totals.agent = self._agent_figures(r)
        if self.joiner is None:
            return
        acts = self.joiner.ready(now, final=final)
        if len(acts):
            names = r.name_text if r is not None else {}
            self.totals.add(acts, self.joiner.op_names, names, now)
            if self.col.probes.timeline:
                self._write_items(acts)

    def _agent_figures(self, r: gpu_region.GpuRegion) -> dict:
        st = r.stats()
        acts = self.totals.all.kernels + self.totals.all.memcpys + self.totals.all.memsets
        st.update(undecoded=getattr(self, "undecoded", 0) + self.totals.impossible, unjoined=getattr(self.joiner, "unjoined", 0),
                  cost_ns=st["callback_ns"] + CUPTI_NS_PER_ACTIVITY * acts)
        return st

    def _lost(self, why: str) -> None:
        self.region.close()
        self.region = None
        self._next_find = float("inf")
        self._status("cupti", False, "error", f"GPU agent lost: {why}", level="warn")

    def _write_items(self, acts) -> None:
        names = self.joiner.op_names
        kinds = (G.KERNEL, G.MEMCPY, G.MEMSET)
        items = [[kinds[k], a, b, d, s, c, t, la, names[o], det] for k, a, b, d, s, c, det, t, la, o in
                 zip(*(acts[f].tolist() for f in ("kind", "start", "end", "device", "stream", "corr", "detail",
                                                   "tid", "launch", "op")))]
        for i in range(0, len(items), CHUNK):
            self.ring.write(G.gpu(items[i:i + CHUNK], {}))

    def _sync(self) -> None:
        probes = self.col.probes
        if probes.bpf is None:
            return
        try:
            st = probes.sync_times()
        except Exception:  # noqa: BLE001 - a map read must not end the session
            return
        if st and st != self._sync_last:
            self._sync_last = st
            self.totals.sync({k: v[0] for k, v in st.items()}, {k: v[1] for k, v in st.items()})


def driver_present() -> bool:
    """Whether this machine has an NVIDIA driver library (libcuda.so.1) to load."""
    import ctypes.util  # noqa: PLC0415

    return ctypes.util.find_library("cuda") is not None


def _say(code: str, msg: str) -> str:
    """The agent's answer as one line with the fix."""
    fixes = {
        "no_driver": "kernel timing needs an NVIDIA GPU and its driver; CPU-side CUDA API figures still work",
        "no_gpu": "check CUDA_VISIBLE_DEVICES and nvidia-smi",
        "no_permission": "the driver lets only admins profile: run the job as root, or load the driver with "
                         "NVreg_RestrictProfilingToAdminUsers=0",
        "other_subscriber": "another CUPTI user (torch.profiler, Kineto, Nsight) holds CUPTI in this process; "
                            "kernel timing is off while it does",
        "no_libcupti": "install the nvidia-cuda-cupti wheel that matches the job's CUDA",
        "unsupported": "CUPTI 13.0 or newer is needed",
    }
    fix = fixes.get(code)
    return f"{msg}: {fix}" if fix else msg
