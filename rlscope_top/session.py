"""One monitoring session: attach, collect into the ring, read it back, summarize.

``--duration``, Ctrl-C, SIGTERM and the target exiting all end a session the same
way: stop counting, write the final records, summarize, then detach.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import Callable

from . import summary as S
from .accounting import Accounting
from .gpu_collector import GpuCollector
from .probes import catalog
from .ring import RingReader, RingWriter, default_path
from .target import check_target, is_alive, require_root

TICK_S = 0.25  # how often the collector reads the kernel maps


@dataclasses.dataclass
class Options:
    """What a session was asked to do."""

    pid: int
    duration_s: float | None = None
    interval_s: float = 1.0
    summary_path: str | None = None
    ring_path: str | None = None
    keep_ring: bool = False
    sim_libs: list[tuple[str, list[str]]] = dataclasses.field(default_factory=list)
    max_probes: int = catalog.MAX_PROBES
    max_overhead_pct: float = 5.0
    timeline: bool = False
    quiet: bool = False
    op_rules: list = dataclasses.field(default_factory=list)   # user --op rules (op_rules.Rule)
    sample_hz: float = 100.0                                   # 0: no stack sampler
    gpu: object = None          # GpuOptions (rlscope_top/gpu_collector.py); None: discover an agent


def specs_for(opts: Options) -> list[catalog.ProbeSpec]:
    """Built-in probes plus the user's simulator libraries."""
    specs = catalog.builtin()
    for lib, syms in opts.sim_libs:
        specs += catalog.sim_lib_specs(lib, syms)
    return specs


class _Stop:
    """Set by signals; the main loop polls it."""

    def __init__(self):
        self.reason: str | None = None

    def __call__(self, signum, frame):
        self.reason = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}.get(
            signum, f"signal {signum}")


def run(opts: Options, on_tick: Callable[[Accounting], None] | None = None) -> dict:
    """Run a headless session to its end and return the summary document."""
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _session(opts, lambda: stop.reason, on_tick)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_until(opts: Options, stop_reason: Callable[[], str | None]) -> dict:
    """Run a headless session that ends when ``stop_reason`` gives a reason (the caller owns signals)."""
    return _session(opts, stop_reason, None)


def run_live(opts: Options, stop_reason: Callable[[], str | None] | None = None) -> dict:
    """Run a session with the live screen; collection runs in a background thread.

    ``stop_reason`` (optional) can end the session too, e.g. when a launched command exits.
    """
    import threading  # noqa: PLC0415

    from .tui.app import RlscopeApp  # noqa: PLC0415 - textual only when a screen is wanted

    path = opts.summary_path or S.default_path(opts.pid)
    opts = dataclasses.replace(opts, summary_path=path)
    quit_ = threading.Event()
    ready = threading.Event()
    box: dict = {}

    def collect():
        try:
            box["summary"] = _session(opts, lambda: ("quit (q)" if quit_.is_set() else None) or
                                      (stop_reason() if stop_reason else None), None,
                                      ready=lambda ring: (box.setdefault("ring", ring), ready.set()), render=False)
        except BaseException as e:  # shown after the screen closes
            box["error"] = e
        finally:
            ready.set()

    worker = threading.Thread(target=collect, name="rlscope-collector", daemon=True)
    worker.start()
    ready.wait()
    if "ring" in box:
        app = RlscopeApp(box["ring"], path, interval_s=opts.interval_s, write_on_quit=False)
        old = signal.signal(signal.SIGTERM, lambda *_: app.call_later(app.action_quit_app))
        try:
            app.run()
        finally:
            signal.signal(signal.SIGTERM, old)
    quit_.set()
    worker.join()
    if "error" in box:
        raise box["error"]
    summary = box["summary"]
    S.render(summary)
    print(f"rlscope-top: {summary['end_reason']}; detached in {summary['overhead']['detach_s']:.2f}s; "
          f"summary written to {summary['_path']}", file=sys.stderr, flush=True)
    return summary


def view(ring_path: str, summary_path: str, interval_s: float = 1.0) -> str:
    """Open the live screen on a ring another process writes. Returns the summary path."""
    from .errors import RingFileError  # noqa: PLC0415
    from .ring import RingError  # noqa: PLC0415
    from .tui.app import RlscopeApp  # noqa: PLC0415

    try:
        app = RlscopeApp(ring_path, summary_path, interval_s=interval_s)
    except RingError as e:
        raise RingFileError(str(e), hint="give the path printed by `rlscope-top attach --ring PATH`") from None
    app.run()
    return summary_path


def _session(opts: Options, stop_reason: Callable[[], str | None], on_tick, ready=None, render: bool = True) -> dict:
    screen = {"owned": False}   # while the live screen is up, notices go to the ring only

    def notify(level: str, msg: str) -> None:
        if not screen["owned"] and (not opts.quiet or level != "info"):
            print(f"rlscope-top: {msg}", file=sys.stderr, flush=True)

    require_root()
    check_target(opts.pid)
    ring = RingWriter(opts.ring_path or default_path(opts.pid))
    collector = GpuCollector(opts.pid, ring, specs_for(opts), notify=notify, interval_s=opts.interval_s,
                             max_probes=opts.max_probes, max_overhead_pct=opts.max_overhead_pct,
                             timeline=opts.timeline, op_rules=opts.op_rules,
                             sample_hz=opts.sample_hz, gpu=opts.gpu)
    try:
        collector.start()
        groups = ", ".join(collector.probes.groups) or "no known libraries yet"
        notify("status", f"attached to PID {opts.pid} ({collector.probes.n_probes()} probes: {groups}); ring {ring.path}")
        reader, acct = RingReader(ring.path), Accounting()
        if ready:
            screen["owned"] = True
            ready(ring.path)
        reason = _loop(opts, collector, reader, acct, stop_reason, on_tick)
        collector.stop_counting(reason)
        acct.feed(reader.poll())
        summary = S.build(acct, ring_path=ring.path if opts.keep_ring else "", dropped=reader.dropped)
        path, failed = S.write_safely(summary, opts.summary_path or S.default_path(opts.pid), opts.pid)
        if failed:
            notify("warn", f"could not write the summary to {failed}; written to {path} instead")
        detach_s = collector.detach()
        summary["overhead"]["detach_s"] = round(detach_s, 3)
        path, _ = S.write_safely(summary, path, opts.pid)
        if render:
            S.render(summary)
            notify("status", f"detached in {detach_s:.2f}s; summary written to {path}")
        summary["_path"] = path
        return summary
    finally:
        collector.close()
        ring.close(remove=not opts.keep_ring)


def _loop(opts: Options, collector: GpuCollector, reader: RingReader, acct: Accounting,
          stop_reason: Callable[[], str | None], on_tick: Callable[[Accounting], None] | None) -> str:
    start = time.monotonic()
    next_tick = start + TICK_S
    while True:
        if reason := stop_reason():
            return reason
        if opts.duration_s is not None and time.monotonic() - start >= opts.duration_s:
            return f"duration {opts.duration_s:g}s reached"
        if not is_alive(opts.pid):
            return "target exited"
        now = time.monotonic()
        if now >= next_tick:
            collector.tick()
            acct.feed(reader.poll())
            if on_tick:
                on_tick(acct)
            next_tick = now + TICK_S
        time.sleep(0.02)
