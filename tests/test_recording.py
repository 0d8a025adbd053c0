"""Issue 14 without eBPF: the recording file (rlscope_top/ring/recording.py) bounded, after a
full disk, and read back when it is truncated, corrupt, empty, foreign or of another version;
`replay` and `export` on bad files say one line and a hint."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from rlscope_top.errors import EXIT_RECORDING, EXIT_USAGE, RecordingError
from rlscope_top.ring import recording
from rlscope_top.ring import records as R
from rlscope_top.ring.ring import RingWriter
from streams import MS, tree_stream
from test_cli_errors import assert_clean_error, run_cli


def _record(tmp_path, records, max_bytes=1 << 30, name="s.rlsrec"):
    notes = []
    ring = RingWriter(str(tmp_path / f"{name}.ring"), capacity=1 << 20)
    rec = recording.Recorder(ring, str(tmp_path / name), 4242, max_bytes, lambda lvl, msg: notes.append(msg))
    for r in records:
        rec.write(r)
    rec.finish(dropped=0, detach_s=0.25, ring_path="")
    ring.close(remove=True)
    return tmp_path / name, notes


def test_round_trip_and_fin(tmp_path):
    stream = tree_stream()
    path, notes = _record(tmp_path, stream)
    got = recording.read(str(path))
    assert got.pid == 4242 and got.problem is None and not notes
    assert got.records == stream
    assert got.fin == recording.fin(dropped=0, detach_s=0.25, ring_path="")


def test_past_the_bound_events_go_counters_stay(tmp_path):
    events = [R.events([[1000 + i, 7, "on", 0]]) for i in range(101)]
    ctr = R.counters(5000, [], [])
    path, notes = _record(tmp_path, [tree_stream()[0], *events, ctr], max_bytes=2048)
    got = recording.read(str(path))
    kept = [r for r in got.records if r["t"] == R.EVENTS]
    assert 0 < len(kept) < 101 and got.records[-1] == ctr
    assert len(notes) == 1 and "--record-max-mb" in notes[0]


def test_a_full_disk_stops_the_recording_not_the_session(tmp_path, monkeypatch):
    stream = tree_stream()
    ring = RingWriter(str(tmp_path / "r.ring"), capacity=1 << 20)
    notes = []
    rec = recording.Recorder(ring, str(tmp_path / "full.rlsrec"), 1, 1 << 30, lambda lvl, msg: notes.append(msg))
    rec.write(stream[0])

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(recording.os, "write", full)
    for r in stream[1:]:
        assert rec.write(r) >= 0                 # the ring still takes every record
    monkeypatch.undo()
    rec.finish(dropped=0, detach_s=None, ring_path="")
    ring.close(remove=True)
    assert len(notes) == 1 and "No space left" in notes[0] and "session goes on" in notes[0]
    assert recording.read(str(tmp_path / "full.rlsrec")).records == stream[:1]


def test_truncated_and_corrupt_tails_keep_what_came_before(tmp_path):
    path, _ = _record(tmp_path, tree_stream())
    data = path.read_bytes()
    whole = len(recording.read(str(path)).records)
    cut = tmp_path / "cut.rlsrec"
    cut.write_bytes(data[:-20])
    got = recording.read(str(cut))
    assert "truncated" in got.problem and got.fin is None and len(got.records) == whole
    bad = bytearray(data)
    first = recording.HEADER_SIZE
    length = struct.unpack_from("<I", bad, first)[0]
    second = first + ((16 + length + 7) & ~7)
    struct.pack_into("<I", bad, second + 4, 9)                # the second frame's kind
    (tmp_path / "bad.rlsrec").write_bytes(bytes(bad))
    got = recording.read(str(tmp_path / "bad.rlsrec"))
    assert "corrupt after 1 records" in got.problem and len(got.records) == 1


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"RLSRING\0" + bytes(100), "is not an rlscope-top recording"),
    (struct.pack("<8sIIIxxxxQ", recording.MAGIC, 99, 64, 1, 0).ljust(64, b"\0"), "format v99"),
])
def test_not_a_recording(tmp_path, content, words):
    p = tmp_path / "x.rlsrec"
    p.write_bytes(content)
    with pytest.raises(RecordingError, match=words):
        recording.read(str(p))
    assert_clean_error(run_cli("replay", str(p), "--headless"), EXIT_RECORDING, words)
    assert_clean_error(run_cli("export", str(p), "--format", "csv", "-o", str(tmp_path / "o.csv")),
                       EXIT_RECORDING, words)


def test_replay_of_a_truncated_recording_says_so_and_goes_on(tmp_path):
    path, _ = _record(tmp_path, tree_stream())
    cut = tmp_path / "cut.rlsrec"
    cut.write_bytes(path.read_bytes()[:-20])
    p = run_cli("replay", str(cut), "--headless")
    assert p.returncode == 0, p.stderr
    assert "truncated after" in p.stderr and "using the records before it" in p.stderr
    assert "rlscope-top summary" in p.stdout


def test_export_chrome_needs_timeline_events(tmp_path):
    path, _ = _record(tmp_path, tree_stream())
    assert_clean_error(run_cli("export", str(path), "--format", "chrome", "-o", str(tmp_path / "t.json")),
                       EXIT_RECORDING, "no timeline events")
    p = run_cli("export", str(path), "--format", "csv", "-o", str(tmp_path / "t.csv"))
    assert p.returncode == 0 and (tmp_path / "t.csv").read_text().startswith("t_s,pid,category")


def test_record_never_writes_over_a_file(tmp_path):
    old = tmp_path / "old.rlsrec"
    old.write_text("keep me")
    assert_clean_error(run_cli("attach", "1", "--record", str(old), "--headless"), EXIT_USAGE, "the file exists")
    link = tmp_path / "link.rlsrec"
    link.symlink_to(tmp_path / "nowhere")
    assert_clean_error(run_cli("attach", "1", "--record", str(link), "--headless"), EXIT_USAGE, "the file exists")
    assert old.read_text() == "keep me" and not (tmp_path / "nowhere").exists()


@pytest.mark.anyio
async def test_replay_screen_plays_the_recording(tmp_path):
    from rlscope_top.commands.replay import Playback
    from rlscope_top.tui.app import RlscopeApp

    path, _ = _record(tmp_path, tree_stream())
    play = Playback(str(path), (None, None), speed=0)
    try:
        app = RlscopeApp(play.ring_path, str(tmp_path / "s.json"), clock=lambda: 1000.0, pid=play.recording.pid)
        async with app.run_test(size=(140, 48)) as pilot:
            for _ in range(50):
                await pilot.pause(0.05)
                t = app.query_one("#procs")
                if t.row_count == 3:
                    break
            assert [str(t.get_row_at(i)[0]) for i in range(t.row_count)] == ["42", "50", "60"]
            assert "+2 processes" in str(app.query_one("#header").render())
    finally:
        play.close()
    assert not os.path.exists(play.ring_path)           # the private ring is gone


def test_stack_counts_hand_over_changes_and_stay_bounded(monkeypatch):
    from rlscope_top.probes.stack_sampler import StackCounts

    c = StackCounts()
    c.add(1, 2, ["/a.py:main", "/a.py:step"], 10_000)
    c.add(1, 2, ["/a.py:main", "/a.py:step"], 10_000)
    c.add(1, 3, ["/a.py:main"], 7)
    frames, items = c.take()
    assert frames == [[0, "/a.py:main"], [1, "/a.py:step"]]
    assert sorted(items) == [[1, 2, [0, 1], 20_000], [1, 3, [0], 7]]
    assert c.take() == ([], [])
    monkeypatch.setattr(StackCounts, "MAX_STACKS", 2)
    c.add(1, 4, ["/a.py:other"], 5)                    # a third distinct stack: not kept
    assert c.take() == ([[2, "/a.py:other"]], []) and c.dropped_us == 5


def test_speedscope_export_of_recorded_stacks_validates(tmp_path):
    import json

    import jsonschema

    from rlscope_top.report.export import speedscope

    stk = R.stacks(10, [[0, "/t.py:<module>"], [1, "/t.py:python_phase"], [2, "/t.py:sim"]],
                   [[42, 42, [0, 1], 23_000], [42, 42, [0, 2], 1009], [50, 50, [0], 7]])
    doc = speedscope([*tree_stream(), stk])
    schema = json.loads((Path(__file__).parent / "data" / "speedscope-file-format-schema.json").read_text())
    jsonschema.validate(doc, schema)
    main = doc["profiles"][0]
    assert main["name"].startswith("PID 42 thread 42") and main["endValue"] == 24_009
    assert [doc["shared"]["frames"][s[-1]]["name"] for s in main["samples"]] == ["python_phase", "sim"]
    bad = {**doc, "profiles": [{**main, "unit": "fortnights"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(RecordingError, match="no sampled stacks"):
        speedscope(tree_stream())


@pytest.mark.anyio
async def test_replay_keys_pause_seek_and_speed(tmp_path):
    from rlscope_top.commands.replay import Playback
    from rlscope_top.tui.app import RlscopeApp

    path, _ = _record(tmp_path, tree_stream())          # counters at 0.0 s and 1.5 s of the session
    play = Playback(str(path), (None, None), speed=0)            # at the end
    header = lambda: str(app.query_one("#header").render())   # noqa: E731

    async def settle(pilot, want_rows: int) -> int:
        for _ in range(60):
            await pilot.pause(0.05)
            app.refresh_view()
            if app.query_one("#procs").row_count == want_rows:
                break
        return app.query_one("#procs").row_count

    try:
        app = RlscopeApp(play.ring_path, str(tmp_path / "s.json"), clock=lambda: 1000.0, pid=play.recording.pid,
                         player=play)
        async with app.run_test(size=(140, 48)) as pilot:
            assert await settle(pilot, 3) == 3
            assert "replay 1.5/1.5 s x1" in header()
            await pilot.press("space")                      # pause
            await pilot.press("left_square_bracket")        # back 10 s: to the start
            assert await settle(pilot, 1) == 1              # the first counters knew the main process only
            assert not app.query_one("#procs").has_class("show")
            assert "replay 0.0/1.5 s x1 ||" in header() and play.generation == 1
            await pilot.press("plus")
            await pilot.press("right_square_bracket")       # forward: the end again
            assert await settle(pilot, 3) == 3
            assert "replay 1.5/1.5 s x2" in header()
            await pilot.press("question_mark")
            await pilot.pause()
            assert "play / pause" in str(app.screen.query_one("#help").render())
    finally:
        play.close()


def _gpu_stream() -> list[dict]:
    """A recorded session with a launching thread and GPU activity made here (no GPU: the
    records are what the collector writes from CUPTI and NVML, docs/ring-format.md)."""
    from rlscope_top.ring import gpu_records as G

    stream = tree_stream()
    t0 = stream[0]["t0"]
    ev = R.events([[t0, 42, "on", 0], [t0 + 10_000_000, 42, "enter", 3], [t0 + 10_020_000, 42, "exit", 3]])
    kernels = [G.activity(G.KERNEL, t0 + 11_000_000 + i * 1_000_000, t0 + 11_500_000 + i * 1_000_000, 0, 7, 100 + i,
                          42, t0 + 10_000_000, "<none>", 5) for i in range(23)]
    kernels.append(G.activity(G.MEMCPY, t0 + 40_000_000, t0 + 40_200_000, 0, 9, 200, 0, 0, "<none>", 4096))
    nvml = G.nvml(t0 + 50_000_000, 0, "H100", util=[[t0 + 20_000_000, 41], [t0 + 40_000_000, 97]])
    return [stream[0], ev, G.gpu(kernels, {5: "gemm_kernel"}), nvml, *stream[1:]]


def test_timeline_exports_draw_gpu_streams_flows_and_nvml():
    import io
    import json

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    from rlscope_top.report.export import chrome, perfetto

    records = _gpu_stream()
    doc = chrome(records)
    k = [e for e in doc["traceEvents"] if e.get("cat") == "gpu"]
    assert len(k) == 24 and sum(e["dur"] for e in k if e["name"] == "gemm_kernel") == pytest.approx(23 * 500)
    assert {e["tid"] for e in k} == {7, 9}
    assert len([e for e in doc["traceEvents"] if e.get("ph") == "s" and e["tid"] == 42]) == 23
    assert [e["args"]["util"] for e in doc["traceEvents"] if e.get("ph") == "C"] == [41, 97]
    buf = io.BytesIO()
    perfetto(records, buf)
    trace = Trace()
    trace.ParseFromString(buf.getvalue())
    names = {pk.track_descriptor.uuid: pk.track_descriptor.name for pk in trace.packet if pk.HasField("track_descriptor")}
    begins, opened, ended, counters = {}, [], [], []
    for pk in trace.packet:
        e = pk.track_event
        if not pk.HasField("track_event"):
            continue
        if e.type == TrackEvent.TYPE_SLICE_BEGIN and "stream" in names[e.track_uuid]:
            begins[e.track_uuid] = pk.timestamp
            ended += list(e.terminating_flow_ids)
        elif e.type == TrackEvent.TYPE_SLICE_END and e.track_uuid in begins:
            opened.append((names[e.track_uuid], pk.timestamp - begins.pop(e.track_uuid)))
        elif e.type == TrackEvent.TYPE_COUNTER:
            counters.append(e.double_counter_value)
    assert sum(d for n, d in opened if n == "GPU 0 stream 7") == 23 * 500_000
    assert sorted(ended) == list(range(100, 123)) and counters == [41.0, 97.0]
    started = [f for pk in trace.packet if pk.track_event.type == TrackEvent.TYPE_INSTANT for f in pk.track_event.flow_ids]
    assert sorted(started) == sorted(ended)


def test_a_window_from_s_is_the_counters_growth_since_it_opened(tmp_path):
    """stream(): counters at 0.5 s (main 0.3+0.1 s Python, 23 torch calls) and 2.0 s (0.6+0.2 s,
    1009 calls). --from 1 opens at the 0.5 s counters: 1.5 s, 986 calls, less the 0.7 s counted by then."""
    from rlscope_top.commands.replay import summary_of
    from streams import ops_stream

    path, _ = _record(tmp_path, ops_stream())
    whole, late = summary_of(str(path)), summary_of(str(path), (1.0, None))
    assert late["totals"]["wall_s"] == pytest.approx(1.5)
    assert late["calls"]["backend"] == 1009 - 23 and late["transitions"]["python->backend"] == 1009 - 23
    assert late["calls"]["simulator"] == 23 - 7
    main, main0 = (next(th for th in s["threads"] if th["tid"] == 42) for s in (late, whole))
    # its 0.7 s of counted time at 0.5 s (0.3+0.1 Python, 0.2 Backend, 0.1 Simulator) left out
    assert main["on_cpu_s"] + main["off_cpu_s"] == pytest.approx(main0["on_cpu_s"] + main0["off_cpu_s"] - 0.7)
    # (the `simulation` operation's Python moves to Simulator in each window's rows: the two
    # together are the counters' growth)
    assert main["python_s"] + main["simulator_s"] == pytest.approx(main0["python_s"] + main0["simulator_s"] - 0.5)
    # threads and operations first counted after the window opened are in it
    assert {th["tid"] for th in late["threads"]} == {th["tid"] for th in whole["threads"]}
    assert set(late["operations"]) == set(whole["operations"]) >= {"inference", "env"}
    assert recording.since(ops_stream(), 10_000 * MS) is None           # nothing after it
    assert recording.since(ops_stream(), 0) == ops_stream()            # before the first counters: all


def test_a_windows_bookkeeping_is_what_the_program_spent_in_it(tmp_path):
    """The counters' ``bookkeeping_s`` is cumulative: a window's self-report holds its growth."""
    from rlscope_top.commands.replay import summary_of
    from streams import ops_stream

    recs = ops_stream()
    ctrs = [r for r in recs if r.get("t") == R.COUNTERS]
    for r, bk in zip(ctrs, (0.011, 0.041)):
        r["bookkeeping_s"] = bk
    path, _ = _record(tmp_path, recs)
    whole, late = summary_of(str(path)), summary_of(str(path), (1.0, None))
    assert whole["overhead"]["by_source_s"]["bookkeeping"] == pytest.approx(0.041)
    assert late["overhead"]["by_source_s"]["bookkeeping"] == pytest.approx(0.030)


def test_a_window_counts_the_ranges_closed_in_it(tmp_path):
    """The kernel's range totals are cumulative, like the rest of the counters: a window's
    ranges are their growth since it opened (23 by 0.5 s, 1009 by 2.0 s: 986 in --from 1)."""
    from rlscope_top.commands.replay import summary_of
    from streams import stream

    out = stream()
    out[1] = {**out[1], "ranges": {"step": [23, 23 * MS], "warm": [1, MS]}}     # warm: none in the window
    out[3] = {**out[3], "ranges": {"step": [1009, 1009 * MS], "zero_grad": [7, 7 * MS], "warm": [1, MS]}}
    path, _ = _record(tmp_path, out)
    assert summary_of(str(path))["ranges"]["step"] == {"count": 1009, "total_s": 1.009}
    assert summary_of(str(path), (1.0, None))["ranges"] == {"step": {"count": 986, "total_s": 0.986},
                                                            "zero_grad": {"count": 7, "total_s": 0.007}}


@pytest.mark.parametrize("args, code, words", [
    (("--from", "3", "--to", "2"), EXIT_USAGE, "--from 3 is not before --to 2"),
    (("--from", "60"), EXIT_RECORDING, "no counters after --from 60 s"),
])
def test_replay_window_errors(tmp_path, args, code, words):
    path, _ = _record(tmp_path, tree_stream())
    assert_clean_error(run_cli("replay", str(path), "--headless", *args), code, words)


def test_a_window_takes_a_thread_folded_since_out_of_its_folded_row(tmp_path):
    """Thread 50 (exited, 0.3 s) is its own row when the window opens and inside "(N exited
    threads)" (tid -1) later: the window's folded row is what the other folded thread added."""
    from rlscope_top.commands.replay import summary_of
    from streams import meta_record

    def th(tid, on_ms, exited=True):
        return R.thread(tid=tid, name=f"t{tid}", python=True, exited=exited, pid=42,
                        ns=[[on_ms * MS, 0], [0, 0], [0, 0], [0, 0]], trans=[[0] * 4 for _ in range(4)],
                        calls=[0, 0, 0, 0], oh=[0] * 4)
    main0, main1 = th(42, 400, exited=False), th(42, 1900, exited=False)
    folded = {**th(-1, 300 + 700), "name": "(2 exited threads)"}       # t50's 300 ms and t51's 700 ms
    path, _ = _record(tmp_path, [meta_record({}), R.counters(1500 * MS, [main0, th(50, 300)], []),
                                 R.counters(3000 * MS, [main1, folded], [])])
    rows = {t["tid"]: t for t in summary_of(str(path), (1.0, None))["threads"]}
    assert rows[-1]["on_cpu_s"] == pytest.approx(0.7) and rows[42]["on_cpu_s"] == pytest.approx(1.5)
