"""The msgpack ring: framing, wrap-around, lag and drop counting, format checks."""

from __future__ import annotations

import os
import stat
import struct

import pytest

from rlscope_top.ring import ring as ring_mod
from rlscope_top.ring.ring import RingError, RingReader, RingWriter


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "r.bin")


def test_roundtrip_in_order(path):
    w = RingWriter(path, capacity=1 << 16)
    r = RingReader(path)
    for i in range(1009):
        w.write({"t": "x", "i": i})
    got = r.poll()
    assert [g["i"] for g in got] == list(range(1009))
    assert r.dropped == 0


def test_wraps_without_loss_when_reader_keeps_up(path):
    w = RingWriter(path, capacity=4096)
    r = RingReader(path)
    got = []
    for i in range(1009):
        w.write({"i": i, "pad": "y" * (i % 61)})
        if i % 5 == 0:
            got += r.poll()
    got += r.poll()
    assert [g["i"] for g in got] == list(range(1009))
    assert r.dropped == 0


def test_slow_reader_counts_exact_drops(path):
    w = RingWriter(path, capacity=4096)
    r = RingReader(path)
    got = []
    for i in range(1009):
        w.write({"i": i, "pad": "z" * 40})
        if i % 211 == 0:
            got += r.poll()
    got += r.poll()
    ids = [g["i"] for g in got]
    assert ids == sorted(ids) and ids[-1] == 1008
    assert r.dropped > 0
    assert len(got) + r.dropped == 1009


def test_late_reader_starts_at_oldest_intact_record(path):
    w = RingWriter(path, capacity=4096)
    for i in range(500):
        w.write({"i": i})
    r = RingReader(path)
    got = r.poll()
    assert got[-1]["i"] == 499 and got[0]["i"] > 0
    assert [g["i"] for g in got] == list(range(got[0]["i"], 500))


def test_reader_from_head_sees_only_new(path):
    w = RingWriter(path, capacity=4096)
    w.write({"i": 0})
    r = RingReader(path, from_start=False)
    w.write({"i": 1})
    assert [g["i"] for g in r.poll()] == [1]


def test_torn_copy_is_never_returned(path):
    """A reader whose frame was overwritten mid-copy discards it and resyncs."""
    w = RingWriter(path, capacity=4096)
    r = RingReader(path)
    w.write({"i": 0, "pad": "a" * 100})
    real_u64 = r._u64
    calls = {"n": 0}

    def racing_u64(off):
        # After the frame header is read, the writer laps the reader.
        if off == ring_mod._OFF_TAIL:
            calls["n"] += 1
            if calls["n"] == 2:
                for i in range(1, 80):
                    w.write({"i": i, "pad": "b" * 100})
        return real_u64(off)

    r._u64 = racing_u64
    got = r.poll()
    got += r.poll()
    ids = [g["i"] for g in got]
    assert 0 not in ids and ids[-1] == 79
    assert len(ids) + r.dropped == 80


def test_file_and_dir_are_private(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    monkeypatch.setattr(ring_mod, "DEFAULT_DIR", str(d))
    w = RingWriter(str(d / "r.bin"))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(w.path).st_mode) == 0o600


def test_close_flag_and_remove(path):
    w = RingWriter(path)
    r = RingReader(path)
    assert not r.closed and r.writer_pid == os.getpid()
    w.close()
    assert r.closed
    w2 = RingWriter(path + "2")
    w2.close(remove=True)
    assert not os.path.exists(path + "2")


def test_rejects_foreign_and_future_files(path):
    with open(path, "wb") as f:
        f.write(b"x" * 8192)
    with pytest.raises(RingError, match="bad magic"):
        RingReader(path)
    w = RingWriter(path + "v")
    struct.pack_into("<I", w._mm, ring_mod._OFF_VERSION, 99)
    with pytest.raises(RingError, match="v99"):
        RingReader(path + "v")
    with pytest.raises(RingError, match="cannot open"):
        RingReader(path + "missing")


def test_record_too_large(path):
    w = RingWriter(path, capacity=4096)
    with pytest.raises(ValueError):
        w.write({"pad": "x" * 5000})


def test_live_writers_are_the_other_open_rings_on_that_target(tmp_path):
    """Another session on the same target: its ring is open and its writer alive. A closed
    (kept) ring, a dead writer's, another target's and this process's own are not."""
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rings = []
    try:
        for name, writer, close in (("ring-41-a-1.bin", other.pid, False), ("ring-41-b-2.bin", dead.pid, False),
                                    ("ring-41-c-3.bin", other.pid, True), ("ring-43-d-4.bin", other.pid, False),
                                    ("ring-41-e-5.bin", None, False)):
            w = RingWriter(str(tmp_path / name))
            if writer:
                w._mm[48:52] = writer.to_bytes(4, "little")
            if close:
                w.close()
            rings.append(w)
        (tmp_path / "ring-41-f-6.bin").symlink_to(tmp_path / "ring-41-a-1.bin")   # never followed
        assert ring_mod.live_writers([41], str(tmp_path)) == {41: {other.pid}}
        assert ring_mod.live_writers([41, 43, 7], str(tmp_path)) == {41: {other.pid}, 43: {other.pid}}
        assert ring_mod.live_writers([4], str(tmp_path)) == {}            # ring-41 is not ring-4's
        assert ring_mod.live_writers([41], str(tmp_path / "none")) == {}
    finally:
        other.kill()
        other.wait()
