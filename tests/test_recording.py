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
from streams import tree_stream
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
    play = Playback(str(path), None, speed=0)
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
    schema = json.loads((Path(__file__).parent / "data" / "speedscope-file-format.schema.json").read_text())
    jsonschema.validate(doc, schema)
    main = doc["profiles"][0]
    assert main["name"].startswith("PID 42 thread 42") and main["endValue"] == 24_009
    assert [doc["shared"]["frames"][s[-1]]["name"] for s in main["samples"]] == ["python_phase", "sim"]
    bad = {**doc, "profiles": [{**main, "unit": "fortnights"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(RecordingError, match="no sampled stacks"):
        speedscope(tree_stream())
