"""``rlscope-top export FILE --format perfetto|chrome|speedscope|csv -o OUT``: a recording for
other tools.

perfetto (protobuf, written with perfetto's own TracePacket protos) and chrome (the Trace Event
Format JSON that chrome://tracing and ui.perfetto.dev load): one track per thread, grouped by
process: a slice per span of one category, on or off CPU, replayed from the ``--timeline``
events through the same engine the accounting uses (the slices of a thread sum to its counted
time), the annotated ranges and the operations (annotated or sampled, as the kernel applied
them) as slices of their own, and GPU activity per device and stream.
speedscope: the stack sampler's stacks, one sampled profile per thread, weighted by time.
csv: one row per counters record (the collector's ticks), per process and category: cumulative
on- and off-CPU seconds and calls.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys

from ..account.engine import Engine
from ..errors import RecordingError
from ..ring import gpu_records as G
from ..ring import recording
from ..ring import records as R
from ..vocab import CATEGORIES, LABELS
from ..safe_files import write_output

FORMATS = ("perfetto", "chrome", "speedscope", "csv")
RANGE_TRACK = 1 << 40           # perfetto: a thread's ranges track is this | tid (threads: tid << 1)
OP_TRACK = 4 << 40              # ... and its operations track this | tid
CHILD_TRACKS = {"range": (RANGE_TRACK, "ranges"), "op": (OP_TRACK, "operations")}   # interval kind -> track


@dataclasses.dataclass
class Spans:
    """What the timeline exports draw: slices ``(pid, tid, name, cat, t0_ns, t1_ns)`` (category
    spans, on or off CPU, and annotated ranges), and the names of processes and threads."""

    slices: list[tuple]
    processes: dict[int, str]
    threads: dict[int, tuple[int, str]]       # tid -> (pid, name)
    meta: dict
    gpu: list[tuple] = dataclasses.field(default_factory=list)        # (device, stream, name, t0, t1, tid, launch_ts, corr)
    counters: list[tuple] = dataclasses.field(default_factory=list)   # (device, series, ts, value): NVML, %


def spans(records: list[dict]) -> Spans:
    """Category spans per thread, replayed from the ``--timeline`` events through the engine
    the accounting uses (a thread's spans sum to its counted time), and the annotated ranges.

    Raises:
        RecordingError: no ``--timeline`` events in the recording (no slices to draw).
    """
    meta = next(r for r in records if r.get("t") == R.META)
    pid_of = _thread_pids(records, meta["pid"])
    open_: dict[int, list] = {}         # tid -> its open span [category, on_cpu, start, end]
    out: list[tuple] = []

    def close(tid: int, span: list) -> None:
        cat, on, t0, t1 = span
        name = LABELS[CATEGORIES[cat]] + ("" if on else " (off-CPU)")
        out.append((pid_of.get(tid, meta["pid"]), tid, name, CATEGORIES[cat], t0, t1))

    def on_slice(tid: int, cat: int, on: bool, t0: int, t1: int) -> None:
        last = open_.get(tid)
        if last and last[0] == cat and last[1] == on and last[3] == t0:   # the same span goes on
            last[3] = t1
            return
        if last:
            close(tid, last)
        open_[tid] = [cat, on, t0, t1]

    engine = Engine(meta["t0"], meta.get("tids0", []), on_slice=on_slice)
    n_events = 0
    gpu, counters = _gpu_records(records)
    for r in records:
        if r.get("t") == R.EVENTS:
            for ts, tid, kind, cat in r["items"]:
                engine.add(ts, tid, kind, cat)
                n_events += 1
            engine.advance()
        elif r.get("t") == R.INTERVALS:
            out += [(pid_of.get(tid, meta["pid"]), tid, name, kind, t0, t1) for tid, kind, name, t0, t1 in r["items"]]
    if not n_events and not gpu:
        raise RecordingError("the recording has no timeline events or GPU activity to draw slices from",
                             hint="record with --timeline (rlscope-top PID --timeline --record FILE)")
    # the last counters record, as the accounting ends its engine: a later record (the end,
    # a note) would stretch the open spans past the time the summary counts
    ends = [r["ts"] for r in records if r.get("t") == R.COUNTERS] or [r["ts"] for r in records if "ts" in r]
    engine.advance(final_ts=max(ends, default=engine.applied_until))
    for tid, last in open_.items():
        close(tid, last)
    procs, names = _names(records, meta)
    threads = {tid: (pid, names.get(tid, "") or str(tid)) for tid, pid in pid_of.items()}
    return Spans(out, procs, threads, meta, gpu, counters)


def _gpu_records(records: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """The GPU activity (kernel names resolved from the names seen so far) and the NVML
    counters' samples as (device, series, ts, value)."""
    gpu, counters, kernel_names = [], [], {}
    for r in records:
        if r.get("t") == G.GPU:
            kernel_names.update(r.get("names") or {})
            gpu += [_activity(a, kernel_names) for a in r["items"]]
        elif r.get("t") == G.NVML:
            counters += [(r["dev"], k, ts, v) for k in ("util", "mem_util", "sm_active") for ts, v in r.get(k) or ()]
    return gpu, counters


def _activity(a: list, names: dict) -> tuple:
    """A GPU activity as (device, stream, name, start, end, tid, launch_ts, corr)."""
    kind = a[G.KIND]
    name = (names.get(a[G.DETAIL]) or names.get(str(a[G.DETAIL])) or f"kernel {a[G.DETAIL]}") if kind == G.KERNEL \
        else {G.MEMCPY: "memcpy", G.MEMSET: "memset"}.get(kind, kind) + f" {a[G.DETAIL]} B"
    return (a[G.DEVICE], a[G.STREAM], name, a[G.START], a[G.END], a[G.TID], a[G.LAUNCH], a[G.CORR])


GPU_PID = 1 << 30        # chrome: device d is process GPU_PID + d, its streams are its threads


def chrome(records: list[dict]) -> dict:
    """The Trace Event Format document (chrome://tracing, ui.perfetto.dev) of a recording."""
    sp = spans(records)
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{pid} {cmd[:60]}"}}
          for pid, cmd in sp.processes.items()]
    ev += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
           for tid, (pid, name) in sp.threads.items()]
    ev += [{"name": name, "cat": cat, "ph": "X", "ts": t0 / 1e3, "dur": (t1 - t0) / 1e3, "pid": pid, "tid": tid}
           for pid, tid, name, cat, t0, t1 in sp.slices]
    ev += _chrome_gpu(sp)
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"source": "rlscope-top", "pid": sp.meta["pid"], "command": sp.meta.get("cmd", "")}}


def _chrome_gpu(sp: Spans) -> list[dict]:
    """GPU kernels per device and stream, a flow from each launching thread, NVML counters."""
    ev = [{"name": "process_name", "ph": "M", "pid": GPU_PID + d, "args": {"name": f"GPU {d}"}}
          for d in sorted({g[0] for g in sp.gpu} | {c[0] for c in sp.counters})]
    for dev, stream, name, t0, t1, tid, launch, corr in sp.gpu:
        ev.append({"name": name, "cat": "gpu", "ph": "X", "ts": t0 / 1e3, "dur": (t1 - t0) / 1e3,
                   "pid": GPU_PID + dev, "tid": stream})
        if tid and launch:
            pid = sp.threads.get(tid, (sp.meta["pid"], ""))[0]
            ev.append({"name": "launch", "cat": "flow", "ph": "s", "id": corr, "ts": launch / 1e3, "pid": pid, "tid": tid})
            ev.append({"name": "launch", "cat": "flow", "ph": "f", "bp": "e", "id": corr, "ts": t0 / 1e3,
                       "pid": GPU_PID + dev, "tid": stream})
    ev += [{"name": f"NVML {series} %", "ph": "C", "ts": ts / 1e3, "pid": GPU_PID + dev, "args": {series: v}}
           for dev, series, ts, v in sp.counters]
    return ev


def perfetto(records: list[dict], out) -> None:
    """Write a recording as a Perfetto protobuf trace (perfetto's own TracePacket protos): a
    track per process and thread, slices as begin/end track events (ns)."""
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder  # noqa: PLC0415

    sp = spans(records)
    b = StreamingTraceProtoBuilder(out)

    def packet():
        pk = b.create_packet()
        pk.trusted_packet_sequence_id = 1
        return pk

    uuid_of = _perfetto_tracks(sp, b, packet)
    marks = []
    for pid, tid, name, cat, t0, t1 in sp.slices:
        track = uuid_of.get(tid) if cat in CATEGORIES else CHILD_TRACKS[cat][0] | tid if cat in CHILD_TRACKS else None
        marks.append((t0, 1, track, name, cat))
        marks.append((t1, 0, track, name, cat))
    marks += _perfetto_gpu(sp, b, packet, uuid_of)
    _perfetto_events(b, packet, marks, sp.counters)


def _perfetto_tracks(sp: Spans, b, packet) -> dict[int, int]:
    """A track per process (keyed -pid) and thread (keyed tid), and the ranges' and operations'
    child tracks (they straddle category spans). Returns the tracks' uuids by key."""
    uuid_of: dict[int, int] = {}
    for pid, cmd in sp.processes.items():
        pk = packet()
        uuid_of[-pid] = pid << 1 | 1
        pk.track_descriptor.uuid = uuid_of[-pid]
        pk.track_descriptor.process.pid = pid
        pk.track_descriptor.process.process_name = cmd[:60]
        b.write_packet(pk)
    for tid, (pid, name) in sp.threads.items():
        pk = packet()
        uuid_of[tid] = tid << 1
        pk.track_descriptor.uuid = uuid_of[tid]
        pk.track_descriptor.thread.pid = pid
        pk.track_descriptor.thread.tid = tid
        pk.track_descriptor.thread.thread_name = name
        b.write_packet(pk)
    children = {(tid, cat) for _, tid, _, cat, _, _ in sp.slices if cat in CHILD_TRACKS and tid in uuid_of}
    for tid, kind in sorted(children):
        pk = packet()
        pk.track_descriptor.uuid = CHILD_TRACKS[kind][0] | tid
        pk.track_descriptor.parent_uuid = uuid_of[tid]
        pk.track_descriptor.name = CHILD_TRACKS[kind][1]
        b.write_packet(pk)
    return uuid_of


def _perfetto_events(b, packet, marks: list, counters: list) -> None:
    """Slice begins/ends and instants (with their flows) in time order, ends first at one
    instant; then the counters."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent  # noqa: PLC0415

    for ts, begin, track, name, cat, *flow in sorted(marks, key=lambda m: m[:3]):
        if track is None:
            continue
        pk = packet()
        pk.timestamp = ts
        ev = pk.track_event
        ev.track_uuid = track
        ev.type = TrackEvent.TYPE_SLICE_BEGIN if begin == 1 else TrackEvent.TYPE_SLICE_END if begin == 0 \
            else TrackEvent.TYPE_INSTANT
        if begin:
            ev.name = name
            ev.categories.append(cat)
        if flow and flow[0]:
            (ev.flow_ids if begin == 2 else ev.terminating_flow_ids).append(flow[0])
        b.write_packet(pk)
    for dev, series, ts, v in counters:
        pk = packet()
        pk.timestamp = ts
        pk.track_event.track_uuid = _counter_uuid(dev, series)
        pk.track_event.type = TrackEvent.TYPE_COUNTER
        pk.track_event.double_counter_value = float(v)
        b.write_packet(pk)


GPU_TRACK, COUNTER_TRACK = 2 << 40, 3 << 40     # perfetto: GPU stream and NVML counter track uuids
_SERIES = ("util", "mem_util", "sm_active")


def _counter_uuid(dev: int, series: str) -> int:
    return COUNTER_TRACK | dev << 8 | _SERIES.index(series)


def _perfetto_gpu(sp: Spans, b, packet, uuid_of: dict) -> list[tuple]:
    """Track descriptors for each GPU stream and NVML series; the kernels' begin/end marks
    (the begin ends the launch's flow) and an instant that starts it on the launching thread."""
    for dev, stream in sorted({(g[0], g[1]) for g in sp.gpu}):
        pk = packet()
        pk.track_descriptor.uuid = GPU_TRACK | dev << 32 | stream
        pk.track_descriptor.name = f"GPU {dev} stream {stream}"
        b.write_packet(pk)
    for dev, series in sorted({(c[0], c[1]) for c in sp.counters}):
        pk = packet()
        pk.track_descriptor.uuid = _counter_uuid(dev, series)
        pk.track_descriptor.name = f"GPU {dev} NVML {series} %"
        pk.track_descriptor.counter.unit_name = "%"
        b.write_packet(pk)
    marks = []
    for dev, stream, name, t0, t1, tid, launch, corr in sp.gpu:
        track = GPU_TRACK | dev << 32 | stream
        flow = corr if tid in uuid_of and launch else 0
        marks += [(t0, 1, track, name, "gpu", flow), (t1, 0, track, name, "gpu", 0)]
        if flow:
            marks.append((launch, 2, uuid_of[tid], "launch", "cuda", flow))
    return marks


def _thread_pids(records: list[dict], main_pid: int) -> dict[int, int]:
    """tid -> pid from the counters records' thread rows (a row without pid is the main process's)."""
    out: dict[int, int] = {}
    for r in records:
        if r.get("t") == R.COUNTERS:
            for th in r["threads"]:
                out[th["tid"]] = th.get("pid", main_pid)
    return out


def _names(records: list[dict], meta: dict) -> tuple[dict[int, str], dict[int, str]]:
    """Process commands and thread names, from the counters records."""
    procs = {meta["pid"]: meta.get("cmd", "")}
    names: dict[int, str] = {}
    for r in records:
        if r.get("t") == R.COUNTERS:
            for p in r.get("procs") or ():
                procs[p["pid"]] = p["cmd"]
            for th in r["threads"]:
                names[th["tid"]] = th.get("name", "")
    return procs, names


SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope(records: list[dict]) -> dict:
    """A speedscope document: one sampled profile per thread, its stacks weighted by the wall
    time each sample held until the thread's next one, in microseconds.

    Raises:
        RecordingError: no sampled stacks in the recording.
    """
    meta = next(r for r in records if r.get("t") == R.META)
    frames: dict[int, str] = {}
    per: dict[tuple[int, int], dict[tuple, int]] = {}
    for r in records:
        if r.get("t") == R.STACKS:
            frames.update({i: f for i, f in r["frames"]})
            for pid, tid, ids, us in r["items"]:
                row = per.setdefault((pid, tid), {})
                row[tuple(ids)] = row.get(tuple(ids), 0) + us
    if not per:
        raise RecordingError("the recording has no sampled stacks",
                             hint="record with the stack sampler on (the default; not --sample-hz 0)")
    _, names = _names(records, meta)
    profiles = []
    for (pid, tid), stacks in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(stacks.values())
        profiles.append({"type": "sampled", "name": f"PID {pid} thread {tid} {names.get(tid, '')}".rstrip(),
                         "unit": "microseconds", "startValue": 0, "endValue": total,
                         "samples": [list(ids) for ids in stacks], "weights": list(stacks.values())})
    shared = [_frame(frames.get(i, "?")) for i in range(max(frames, default=-1) + 1)]
    return {"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": shared}, "profiles": profiles,
            "name": f"rlscope-top: PID {meta['pid']} {meta.get('cmd', '')[:60]}", "activeProfileIndex": 0,
            "exporter": "rlscope-top"}


def _frame(text: str) -> dict:
    """A sampled ``/path/file.py:function`` frame as a speedscope frame."""
    path, sep, func = text.rpartition(":")
    return {"name": func, "file": path} if sep else {"name": text}


def csv_text(records: list[dict]) -> str:
    """One row per counters record, process and category (cumulative since attach)."""
    meta = next(r for r in records if r.get("t") == R.META)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["t_s", "pid", "category", "on_cpu_s", "off_cpu_s", "calls"])
    for r in records:
        if r.get("t") != R.COUNTERS:
            continue
        per: dict[int, list] = {}
        for th in r["threads"]:
            acc = per.setdefault(th.get("pid", meta["pid"]), [[0, 0, 0] for _ in CATEGORIES])
            for i in range(len(CATEGORIES)):
                acc[i][0] += th["ns"][i][0]
                acc[i][1] += th["ns"][i][1]
                acc[i][2] += th["calls"][i]
        t = round((r["ts"] - meta["t0"]) / 1e9, 6)
        for pid, acc in sorted(per.items()):
            for i, c in enumerate(CATEGORIES):
                w.writerow([t, pid, c, acc[i][0] / 1e9, acc[i][1] / 1e9, acc[i][2]])
    return buf.getvalue()


def run(path: str, fmt: str, out: str) -> int:
    """The ``export`` command. Returns the exit code."""
    _, records = recording.load(path)
    if fmt == "perfetto":
        buf = io.BytesIO()
        perfetto(records, buf)
        write_output(out, buf.getvalue())
    else:
        render = {"chrome": lambda: json.dumps(chrome(records)), "speedscope": lambda: json.dumps(speedscope(records)),
                  "csv": lambda: csv_text(records)}[fmt]
        write_output(out, render())
    print(f"rlscope-top: {fmt} export written to {out}", file=sys.stderr)   # stdout may be the export
    return 0
