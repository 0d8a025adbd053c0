"""One monitoring session: attach, collect into the ring, read it back, summarize.

``--duration``, Ctrl-C, SIGTERM and the target exiting all end a session the same
way: stop counting, write the final records, summarize, then detach.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import time
from typing import Callable

from ..ring import records as R
from ..report import summary as S
from ..account.books import Books
from .collector import Collector
from ..errors import IncompleteSummary
from .gpu_source import GpuSource
from . import hangup, start_priority
from ..probes import catalog
from ..ring.ring import RingReader, RingWriter, default_path
from ..safe_files import is_stream
from .target import AliveCheck, check_target, require_root

TICK_S = 0.25  # how often the collector reads the kernel maps
ATTACHING = ("attaching: loading the eBPF probes (the first attach on a new kernel compiles them: "
             "a few seconds; the target runs on)")


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
    sample_hz: float | None = None        # None: every CPU-clock tick (kernel sampler), 100 (austin); 0: none
    sampler: str = "auto"      # --sampler: kernel (stacks read in the BPF program), austin, or auto (kernel if it can)
    gpu: object = None          # GpuOptions (rlscope_top/collect/gpu_source.py); None: use an agent the target has
    on_attached: Callable[[], None] | None = None   # `run`: release the held command
    prometheus: tuple[str, int] | None = None       # --prometheus: (host, port) to serve /metrics on
    children: bool = True                           # the process tree (--no-children: PID alone)
    more_pids: tuple[int, ...] = ()                 # --pid: unrelated processes counted as well
    roles: dict[int, str] = dataclasses.field(default_factory=dict)   # --role PID=NAME
    record_path: str | None = None                  # --record: the whole session in one file
    record_max_mb: int = 1024                       # --record-max-mb: past it, no more events
    polite_start: bool = False                      # `attach`: start-up work niced (start_priority.py)


def specs_for(opts: Options) -> list[catalog.ProbeSpec]:
    """Built-in probes plus the user's simulator libraries."""
    specs = catalog.builtin()
    for lib, syms in opts.sim_libs:
        specs += catalog.sim_lib_specs(lib, syms)
    return specs


_FORCED_EXIT_CLEANUP: list[Callable[[], None]] = []   # what a second signal still removes (the ring)


class _Stop:
    """Set by signals; the main loop polls it. A second signal ends the process at once."""

    def __init__(self):
        self.reason: str | None = None

    def __call__(self, signum, frame):
        if signum == signal.SIGHUP:
            hangup.silence_dead_terminal()
        if self.reason is not None:
            force_exit(signum)
        self.reason = hangup.REASONS.get(signum, f"signal {signum}")


def force_exit(signum: int) -> None:
    """Leave now, without a summary: remove the ring; the kernel removes the probes with us."""
    for fn in list(_FORCED_EXIT_CLEANUP):
        try:
            fn()
        except Exception:  # noqa: BLE001 - nothing may stop a forced exit
            pass
    os.write(2, f"rlscope-top: second {signal.Signals(signum).name}: exiting now, without a summary\n".encode())
    os._exit(128 + signum)


def run(opts: Options, on_tick: Callable[[Books], None] | None = None) -> dict:
    """Run a headless session to its end and return the summary document."""
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in hangup.ending_signals(signal.SIGINT, signal.SIGTERM)}
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

    from .gpu_source import GpuOptions  # noqa: PLC0415

    path = opts.summary_path or S.default_path(opts.pid)
    opts = dataclasses.replace(opts, summary_path=path, gpu=opts.gpu or GpuOptions())
    quit_ = threading.Event()
    ready = threading.Event()
    box: dict = {}

    def collect():
        try:
            box["summary"] = _session(opts, lambda: (box.get("end", "quit (q)") if quit_.is_set() else None) or
                                      (stop_reason() if stop_reason else None), None,
                                      ready=lambda ring: (box.setdefault("ring", ring), ready.set()), render=False)
        except BaseException as e:  # shown after the screen closes
            box["error"] = e
            app = box.get("app")
            if app is not None:          # the screen opened before attach finished: close it
                app.call_from_thread(app.exit)
        finally:
            ready.set()

    with _stray_output_held():
        _live_screen(opts, path, collect, box, ready, quit_)
    if box.get("end", "").startswith("hung up"):
        hangup.silence_dead_terminal()
    if "error" in box:
        raise box["error"]
    summary = box["summary"]
    S.render(summary)
    print(f"rlscope-top: {summary['end_reason']}; detached in {summary['overhead']['detach_s']:.2f}s; "
          f"summary written to {summary['_path']}", file=sys.stderr, flush=True)
    return summary


@contextlib.contextmanager
def _stray_output_held():
    """Textual draws on ``sys.__stderr__`` (fd 2). While the screen is up, give it its own
    descriptor for the terminal and send fd 2 itself (the BPF compile's warnings, C libraries,
    Python warnings) to a temp file, shown after the screen closes: a stray line would scroll
    the screen and wipe rows Textual does not redraw (the footer)."""
    import tempfile  # noqa: PLC0415

    sys.stderr.flush()
    saved = os.dup(2)
    tty = os.fdopen(os.dup(2), "w", buffering=1)
    log = tempfile.TemporaryFile()
    old = sys.__stderr__, sys.stderr
    os.dup2(log.fileno(), 2)
    sys.__stderr__, sys.stderr = tty, tty
    try:
        yield
    finally:
        sys.__stderr__, sys.stderr = old
        os.dup2(saved, 2)
        os.close(saved)
        tty.close()
        log.seek(0)
        held = log.read().decode(errors="replace")
        log.close()
        if held.strip():
            with contextlib.suppress(OSError):      # no terminal left (a hang-up)
                sys.stderr.write(held if held.endswith("\n") else held + "\n")
                sys.stderr.flush()


def _live_screen(opts: Options, path: str, collect, box: dict, ready, quit_) -> None:
    import threading  # noqa: PLC0415

    from ..tui.app import RlscopeApp  # noqa: PLC0415 - textual only when a screen is wanted

    worker = threading.Thread(target=collect, name="rlscope-collector", daemon=True)
    old = {s: signal.signal(s, _screen_ending(box, quit_)) for s in hangup.ending_signals(signal.SIGTERM)}
    try:
        worker.start()
        ready.wait()
        if "ring" in box and not quit_.is_set():
            app = box["app"] = RlscopeApp(box["ring"], path, interval_s=opts.interval_s, write_on_quit=False,
                                          request_gpu=opts.gpu.inject_now.set, pid=opts.pid)
            try:
                app.run()
            except OSError:              # the terminal went away under the screen
                if "end" not in box:
                    raise
    finally:
        quit_.set()
        worker.join()
        for s, h in old.items():
            signal.signal(s, h)


def _screen_ending(box: dict, quit_) -> Callable:
    """SIGTERM or SIGHUP while the screen is up (or attach is under way): the session ends as
    with q, its summary written. A second one exits at once."""
    def on(signum, frame):
        if "end" in box:
            force_exit(signum)
        box["end"] = hangup.REASONS[signum]
        quit_.set()
        app = box.get("app")
        if app is not None:
            app.call_later(app.action_quit_app)
    return on


def view(ring_path: str, summary_path: str, interval_s: float = 1.0) -> str:
    """Open the live screen on a ring another process writes. Returns the summary path."""
    from ..errors import RingFileError  # noqa: PLC0415
    from ..ring.ring import RingError  # noqa: PLC0415
    from ..tui.app import RlscopeApp  # noqa: PLC0415

    try:
        app = RlscopeApp(ring_path, summary_path, interval_s=interval_s)
    except RingError as e:
        raise RingFileError(str(e), hint="give the path printed by `rlscope-top attach --ring PATH`") from None
    app.run()
    return summary_path


def _read_to_end(reader: RingReader, books: Books, collector: Collector) -> None:
    """Everything left in the ring, and the session's meta even where a flood of records
    lapped the ring before the reader saw it (the summary never lacks its pid or window)."""
    if not books.cpu.meta:
        books.feed([collector.meta_record()])
    while recs := reader.poll():
        books.feed(recs)
    if not books.cpu.meta:
        books.feed([collector.meta_record()])


def _say_swept(notify) -> None:
    from ..ring import ring as ring_mod  # noqa: PLC0415

    if ring_mod.SWEPT:
        notify("info", f"removed {len(ring_mod.SWEPT)} ring(s) left by monitors that were killed "
                       f"({', '.join(os.path.basename(p) for p in ring_mod.SWEPT[:3])})")
        ring_mod.SWEPT.clear()


def _new_ring(opts: Options) -> RingWriter:
    from ..errors import RingFileError  # noqa: PLC0415
    from ..ring.ring import RingError  # noqa: PLC0415

    try:
        return RingWriter(opts.ring_path or default_path(opts.pid))
    except RingError as e:
        raise RingFileError(str(e), hint="give --ring a new file name in a directory you can write, "
                                         "or leave --ring out", pid=opts.pid) from None


def _session(opts: Options, stop_reason: Callable[[], str | None], on_tick, ready=None, render: bool = True) -> dict:
    screen = {"owned": False}   # while the live screen is up, notices go to the ring only

    def notify(level: str, msg: str) -> None:
        if not screen["owned"] and (not opts.quiet or level != "info"):
            print(f"rlscope-top: {msg}", file=sys.stderr, flush=True)

    _preflight(opts)
    ring = _new_ring(opts)
    _say_swept(notify)
    drop_ring = (lambda: None) if opts.keep_ring else (lambda: os.unlink(ring.path))
    _FORCED_EXIT_CLEANUP.append(drop_ring)
    collector = None
    stack = contextlib.ExitStack()
    try:
        if opts.record_path:
            from ..ring.recording import Recorder  # noqa: PLC0415

            ring = Recorder(ring, opts.record_path, opts.pid, opts.record_max_mb << 20, notify)
            stack.callback(ring.close_recording)
        collector = _collector(opts, ring, notify)
        reader, books = RingReader(ring.path), Books()
        if ready:                    # the screen opens now and says what is going on
            ring.write(R.note(time.monotonic_ns(), "status", ATTACHING))
            screen["owned"] = True
            ready(ring.path)
        collector.start()
        if opts.on_attached:
            opts.on_attached()
        groups = ", ".join(collector.probes.groups) or "no known libraries yet"
        n0, n = collector.probes_at_attach, collector.probes.n_probes()
        now = f", {n} after the overhead budget's first windows" if n != n0 else ""
        notify("status", f"attached to PID {opts.pid} ({n0} probes: {groups}{now}); ring {ring.path}")
        exporter = _Exporter(opts, notify)
        stack.callback(exporter.stop)
        reason = _loop(opts, collector, reader, books, stop_reason, exporter.ticked(on_tick, reader))
        collector.stop_counting(reason)
        _read_to_end(reader, books, collector)
        summary = S.build(books.cpu, books.gpu, ring_path=ring.path if opts.keep_ring else "", dropped=reader.dropped)
        exporter.publish(summary)
        return _finish(opts, summary, collector, ring, reader.dropped, notify, render)
    finally:
        start_priority.end()
        stack.close()
        if collector is not None:
            collector.close()
        ring.close(remove=not opts.keep_ring)
        _FORCED_EXIT_CLEANUP.remove(drop_ring)


def _preflight(opts: Options) -> None:
    """What must hold before the ring exists: root, live targets, and --sim-lib symbols that
    resolve in a library mapped now (a misspelling fails before the slow compile)."""
    if opts.polite_start:
        start_priority.begin(opts.pid)    # a no-op where `attach` began it before its imports
    require_root()
    for pid in (opts.pid, *opts.more_pids):
        check_target(pid)
    if opts.sim_libs:
        from ..commands.symbols_cmd import check_sim_libs  # noqa: PLC0415

        check_sim_libs(opts.pid, opts.sim_libs)


def _collector(opts: Options, ring, notify) -> Collector:
    """The session's collector, from the options (not started)."""
    return Collector(opts.pid, ring, specs_for(opts), notify=notify, interval_s=opts.interval_s,
                     max_probes=opts.max_probes, max_overhead_pct=opts.max_overhead_pct,
                     timeline=opts.timeline, op_rules=opts.op_rules, sample_hz=opts.sample_hz,
                     sampler=opts.sampler, sources=[GpuSource(opts.gpu)], children=opts.children,
                     roots=(opts.pid, *opts.more_pids), roles=opts.roles)


def _finish(opts: Options, summary: dict, collector: Collector, ring, dropped: int, notify, render: bool) -> dict:
    """Write the summary, detach, write it again with the detach time, close the recording,
    print. The first write comes before the detach so that a detach that hangs or is killed
    loses nothing.

    Raises:
        IncompleteSummary: the ring lost the session's start (the summary is written all the same).
    """
    def write(path: str, say: bool) -> str:
        path, failed = S.write_safely(summary, path, opts.pid)
        if failed and say:
            notify("warn", f"could not write the summary to {failed}; written to {path} instead")
        return path

    path = opts.summary_path or S.default_path(opts.pid)
    stream = is_stream(path)         # /dev/null, /dev/stdout, a FIFO: one write, after the detach
    if not stream:
        path = write(path, True)
    detach_s = collector.detach()
    summary["overhead"]["detach_s"] = round(detach_s, 3)
    path = write(path, stream)
    if opts.record_path:
        ring.finish(dropped=dropped, detach_s=summary["overhead"]["detach_s"], ring_path=summary["ring"]["path"])
    if render:
        S.render(summary, S.table_console(path))
        notify("status", f"detached in {detach_s:.2f}s; summary written to {path}")
    if lacks := S.incomplete(summary):
        raise IncompleteSummary(f"the summary lacks {lacks} (written to {path} all the same)",
                                "the ring lost the session's start: report this with the summary", pid=opts.pid)
    summary["_path"] = path
    return summary


class _Exporter:
    """``--prometheus``: the summary as it stands, published once per refresh to the exporter
    (rlscope_top/report/prometheus.py); nothing when the option is not given."""

    def __init__(self, opts: Options, notify):
        self.opts, self.metrics, self.server, self._next = opts, None, None, 0.0
        if opts.prometheus:
            from ..report import prometheus  # noqa: PLC0415 - prometheus_client only when asked

            metrics = prometheus.SessionMetrics()
            self.server = prometheus.serve(opts.prometheus, metrics, notify)
            self.metrics = metrics if self.server is not None else None

    def ticked(self, on_tick, reader: RingReader):
        """``on_tick`` plus publishing, at most once per refresh interval."""
        if self.server is None:
            return on_tick

        def tick(books: Books) -> None:
            if on_tick:
                on_tick(books)
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self.opts.interval_s
                self.publish(S.build(books.cpu, books.gpu, ring_path="", dropped=reader.dropped))
        return tick

    def publish(self, doc: dict) -> None:
        if self.metrics is not None:
            self.metrics.publish(doc)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()


def _loop(opts: Options, collector: Collector, reader: RingReader, books: Books,
          stop_reason: Callable[[], str | None], on_tick: Callable[[Books], None] | None) -> str:
    with contextlib.closing(AliveCheck(opts.pid)) as alive:
        return _run_loop(opts, collector, reader, books, stop_reason, on_tick, alive)


def _run_loop(opts: Options, collector: Collector, reader: RingReader, books: Books,
              stop_reason: Callable[[], str | None], on_tick: Callable[[Books], None] | None,
              alive: Callable[[], bool]) -> str:
    start = time.monotonic()
    next_tick = start + TICK_S
    while True:
        if reason := stop_reason():
            return reason
        if opts.duration_s is not None and time.monotonic() - start >= opts.duration_s:
            return f"duration {opts.duration_s:g}s reached"
        if not alive():
            return "target exited"
        now = time.monotonic()
        if now >= next_tick:
            collector.tick()
            books.feed(reader.poll())
            if on_tick:
                on_tick(books)
            next_tick = now + TICK_S
        else:
            collector.poll_windows(now)
        time.sleep(0.02)
