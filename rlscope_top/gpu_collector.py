"""The collector with the GPU side: CUPTI activity from the in-process agent, NVML
samples, and the time blocked in CUDA synchronize calls (from the eBPF probes).

It is still the ring's only writer: everything happens in the collector's tick, on
the session's thread. Missing pieces (no agent, no driver, no GPU, no permission)
become one ``gstat`` record and one notice each; the CPU side keeps working.
"""

from __future__ import annotations

import dataclasses
import time

from . import gpu_records as G
from .collector import Collector
from .gpu_join import Joiner
from .gpu_link import AgentLink, discover
from .probes.nvml import NvmlSampler

CHUNK = 20_000              # activity items per ring record, well under the ring's size
STATUS_WAIT_S = 15.0        # CUPTI's first enable can take seconds (driver, context)
DRAIN_S = 3.0               # at the end: how long to wait for the agent's last records



@dataclasses.dataclass
class GpuOptions:
    """How the session gets GPU activity."""

    link: AgentLink | None = None     # launch mode: the agent already connected and said hello
    remote_exec: bool = False         # --gpu-activity: inject the agent with sys.remote_exec
    nvml: bool = True
    no_agent_msg: str | None = None   # what to say when no agent answers (default: how to get one)


class GpuCollector(Collector):
    """A Collector that also writes GPU activity, NVML samples and sync time to the ring."""

    def __init__(self, *args, gpu: GpuOptions | None = None, nvml=None, **kw):
        super().__init__(*args, **kw)
        self.gpu_opts = gpu or GpuOptions()
        self.link = self.gpu_opts.link
        self.joiner = Joiner(op_of=self.current_op_name)
        self.nvml = NvmlSampler(self.pid, nvml)
        self._status_by = 0.0
        self._sync_last: dict | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Attach the probes (the target may still be held), then start the GPU sources."""
        super().start()
        self._start_nvml()
        self._start_agent()

    def tick(self) -> None:
        """The CPU side's tick, then whatever the GPU sources have."""
        super().tick()
        self._gpu_tick()

    def stop_counting(self, reason: str) -> None:
        """Collect the agent's last records (it flushes at exit or on stop), then freeze."""
        self._drain_agent()
        self._gpu_tick(final=True)
        super().stop_counting(reason)

    def detach(self) -> float:
        """Remove the probes; hang up on the agent; shut NVML down."""
        took = super().detach()
        if self.link is not None:
            self.link.close()
        self.nvml.stop()
        return took

    # -- sources -----------------------------------------------------------
    def _status(self, source: str, ok: bool, code: str, msg: str, level: str = "info", note: str | None = None,
                **extra) -> None:
        self.ring.write(G.status(time.monotonic_ns(), source, ok, code, msg, **extra))
        self._note(level, note or msg)

    def _start_nvml(self) -> None:
        if not self.gpu_opts.nvml:
            return
        why = self.nvml.start()
        if why:
            self._status("nvml", False, "unavailable", why)
        else:
            names = ", ".join(d.name for d in self.nvml.devices)
            self._status("nvml", True, "ok", f"NVML: sampling {len(self.nvml.devices)} GPU(s): {names}")

    def _start_agent(self) -> None:
        if self.gpu_opts.no_agent_msg:           # launch mode, and nothing said hello
            self._status("cupti", False, "no_agent", self.gpu_opts.no_agent_msg)
            return
        if self.link is None and self.gpu_opts.remote_exec:
            from .remote import inject  # noqa: PLC0415 - only with --gpu-activity

            inject(self.pid)
        if self.link is None:
            path = discover(self.pid)
            self.link = AgentLink.connect(path) if path else None
            if self.link is not None:
                self.link.wait(lambda m: m.get("t") == "hello", 5.0)
        if self.link is None or self.link.hello is None:
            self.link = None
            self._status("cupti", False, "no_agent", self.gpu_opts.no_agent_msg or G.HOW_TO)
            return
        self.link.send({"t": "start", "collect": True})
        self._status_by = time.monotonic() + STATUS_WAIT_S

    def _gpu_tick(self, final: bool = False) -> None:
        now = time.monotonic_ns()
        if self.link is not None:
            self._take(self.link.poll(), now)
            if self._status_by and time.monotonic() > self._status_by:
                self._status_by = 0.0
                self._status("cupti", False, "error", "the GPU activity agent did not answer: no kernel timing",
                             level="warn")
        rec = self.joiner.ready(now, final=final)
        if rec is not None:
            self._write_gpu(rec)
        for s in self.nvml.poll():
            self.ring.write(G.nvml(s.pop("ts"), s.pop("dev"), s.pop("name"), **s))
        self._write_sync()

    def _take(self, msgs: list[dict], now: int) -> None:
        for m in msgs:
            t = m.get("t")
            if t == "act":
                self.joiner.feed(m, now)
            elif t == "status":
                self._status_by = 0.0
                note = m["msg"] if m.get("ok") else f"GPU activity unavailable: {m['msg']}"
                self._status("cupti", bool(m.get("ok")), m.get("code", "error"), m["msg"], note=note,
                             level="info" if m.get("ok") or m.get("code") in ("no_driver", "no_gpu") else "warn",
                             pid=self.link.hello.get("pid") if self.link and self.link.hello else None)
            elif t == "bye" and m.get("dropped"):
                self._note("warn", f"GPU activity agent dropped {m['dropped']:,} records (monitor too slow)")

    def _write_gpu(self, rec: dict) -> None:
        items = rec["items"]
        for i in range(0, max(1, len(items)), CHUNK):
            self.ring.write(G.gpu(items[i:i + CHUNK], rec["names"] if i == 0 else {}))

    def _write_sync(self) -> None:
        if self.probes.bpf is None:
            return
        try:
            st = self.probes.sync_times()
        except Exception:  # noqa: BLE001 - a map read must not end the session
            return
        if st and st != self._sync_last:
            self._sync_last = st
            self.ring.write(G.sync(time.monotonic_ns(), {k: v[0] for k, v in st.items()},
                                   {k: v[1] for k, v in st.items()}))

    def _drain_agent(self) -> None:
        if self.link is None:
            return
        if not self.link.closed:
            self.link.send({"t": "stop"})
        _, msgs = self.link.wait(lambda m: m.get("t") == "bye", DRAIN_S)
        time.sleep(0.05)                  # a batch the agent's sender held while it said bye
        self._take(msgs + self.link.poll(), time.monotonic_ns())
