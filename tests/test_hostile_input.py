"""Hostile machines and bad input (issue 20): no symlink is followed, private directories
are checked, broken rings and summaries give typed errors, stale rings are swept, exited
threads keep the counters record bounded."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from support import load_summary
import numpy as np

import region_fuzz
from ring_fuzz import fuzz, fuzz_compare
from rlscope_top import errors as E
from rlscope_top.account import gpu_accounting as GA
from rlscope_top.ring import records as R
from rlscope_top.report import summary as S
from rlscope_top.collect.gpu_join import JOINED
from rlscope_top.ring.ring import RingError, RingReader, RingWriter, sweep_stale
from rlscope_top.safe_files import is_stream, private_dir, write_atomic, write_output
from rlscope_top.collect.thread_fold import FOLD_TID, ExitedThreads, add_counts, fold_all
from test_cli_errors import assert_clean_error, run_cli

# Fuzz cases a run: the suite's share of CI's 30 minutes (the three fuzzers took 134 s at 5x
# these counts); RLSCOPE_FUZZ_SCALE=5 runs the old counts, higher for a longer hunt.
FUZZ_SCALE = max(1, int(os.environ.get("RLSCOPE_FUZZ_SCALE", "1")))


def test_summary_replaces_a_planted_symlink_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    shared = tmp_path / "shared"            # as /tmp: anyone may plant a link there
    shared.mkdir()
    shared.chmod(0o1777)
    tmp_path = shared
    path = tmp_path / "s.json"
    path.symlink_to(victim)
    for pid in range(os.getpid() - 2, os.getpid() + 3):         # the old fixed temp names, too
        (tmp_path / f"s.json.tmp-{pid}").symlink_to(victim)
    S.write({"schema": "x"}, str(path))
    assert victim.read_text() == "precious\n"
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert json.loads(path.read_text()) == {"schema": "x"}


def test_a_device_is_written_to_never_replaced(tmp_path):
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))      # a /dev/null of our own
    S.write({"schema": "x"}, str(null))
    assert stat.S_ISCHR(os.lstat(null).st_mode)                # renamed over, /dev/null broke tmux
    blk = tmp_path / "blk"
    os.mknod(blk, 0o600 | stat.S_IFBLK, os.makedev(7, 250))   # a loop device no one set up
    with pytest.raises(E.UnsafePath, match="block device"):
        write_output(str(blk), "x")
    assert stat.S_ISBLK(os.lstat(blk).st_mode)
    assert "block device" in S.path_problem(str(blk))


def test_a_fifo_gets_one_summary_and_one_with_no_reader_falls_back(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert is_stream(str(fifo)) and not is_stream(str(tmp_path / "new.json"))
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    deadline = time.monotonic() + 10
    while True:              # its reader must have it open before a non-blocking writer may
        try:
            S.write({"schema": "x"}, str(fifo))
            break
        except E.UnsafePath:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    reader.join(10)
    assert json.loads(got[0]) == {"schema": "x"}
    theirs = tmp_path / "theirs.json"            # another user's FIFO where the summary goes: replaced
    os.mkfifo(theirs)
    os.chown(theirs, 65534, 65534)
    assert not is_stream(str(theirs))
    S.write({"schema": "z"}, str(theirs))
    assert stat.S_ISREG(os.lstat(theirs).st_mode) and json.loads(theirs.read_text()) == {"schema": "z"}
    from rlscope_top.report.view import ViewModel
    assert ViewModel.snapshot_path(str(fifo), 2) == "rlscope-top-snapshot2.json"     # not fifo.snapshot2.json
    assert ViewModel.snapshot_path(str(tmp_path / "run.json"), 2) == str(tmp_path / "run.snapshot2.json")
    path, failed = S.write_safely({"schema": "y"}, str(fifo), 4243)   # no reader now
    assert failed and "no one reads" in failed and path != str(fifo)
    assert json.loads(open(path).read()) == {"schema": "y"}
    os.unlink(path)


def test_a_link_root_made_in_a_root_only_directory_is_followed_one_hop_at_a_time(tmp_path):
    own = tmp_path / "own"                  # root's, 0700: only root can have made a link here
    own.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (own / "latest.json").symlink_to(own / "run7.json")
    S.write({"schema": "x"}, str(own / "latest.json"))
    assert os.path.islink(own / "latest.json") and json.loads((own / "run7.json").read_text()) == {"schema": "x"}
    (own / "out.json").symlink_to(shared / "planted.json")    # root's link into a shared place ...
    (shared / "planted.json").symlink_to(victim)              # ... where another user's link waits
    S.write({"schema": "x"}, str(own / "out.json"))
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(shared / "planted.json")        # that one was replaced, not followed
    assert S.path_problem(str(own / "latest.json")) is None
    assert S.path_problem(str(shared / "planted.json")) is None      # a file now
    (shared / "link.json").symlink_to(victim)
    assert S.path_problem(str(shared / "link.json")) == "it is a symlink"


def test_write_atomic_leaves_no_temp_file_when_it_fails(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(str(tmp_path / "a"), 12345)          # not bytes: fails after the temp file exists
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("how", ["symlink", "foreign", "mode", "file"])
def test_private_dir_refuses_what_is_not_ours(tmp_path, how):
    d = tmp_path / "priv"
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        d.symlink_to(tmp_path / "elsewhere")
    elif how == "foreign":
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
    elif how == "mode":
        d.mkdir()
        os.chmod(d, 0o755)
    else:
        d.write_text("")
    with pytest.raises(E.UnsafePath) as e:
        private_dir(str(d))
    assert e.value.hint and e.value.code == E.EXIT_USAGE


def test_private_dir_made_first_by_another_user_is_refused_and_untouched():
    """As the attack goes: another user (a throwaway uid, through setpriv) creates the
    directory first in a sticky, world-writable place like /dev/shm; it is refused, and
    neither its owner nor its mode changes."""
    pub = tempfile.mkdtemp(dir="/dev/shm")
    try:
        os.chmod(pub, 0o1777)
        d = os.path.join(pub, "rlscope-top")
        subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        "mkdir", "-m", "777", d], check=True)
        before = os.lstat(d)
        with pytest.raises(E.UnsafePath, match="65534|not ours|owned"):
            private_dir(d)
        after = os.lstat(d)
        assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode) == (65534, before.st_mode)
        assert stat.S_IMODE(after.st_mode) == 0o777
    finally:
        shutil.rmtree(pub)


def test_private_dir_is_created_0700(tmp_path):
    d = tmp_path / "a" / "b"
    private_dir(str(d))
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700


@pytest.mark.parametrize("planted", ["file", "symlink"])
def test_a_ring_is_always_a_new_file(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    p = tmp_path / "ring.bin"
    p.write_text("") if planted == "file" else p.symlink_to(victim)
    with pytest.raises(RingError, match="already exists"):
        RingWriter(str(p))
    assert victim.read_text() == "precious\n"


def test_a_ring_left_by_a_killed_monitor_is_swept_and_a_kept_one_stays(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = RingWriter(str(tmp_path / "ring-1-x-1.bin"))
    left._mm[48:52] = dead.pid.to_bytes(4, "little")        # as if that (now gone) monitor wrote it
    kept = RingWriter(str(tmp_path / "ring-2-x-2.bin"))
    kept._mm[48:52] = dead.pid.to_bytes(4, "little")
    kept.close()                                            # --keep-ring: closed on purpose
    live = RingWriter(str(tmp_path / "ring-3-x-3.bin"))     # ours, still open
    assert sweep_stale(str(tmp_path)) == [left.path]
    assert sorted(os.listdir(tmp_path)) == ["ring-2-x-2.bin", "ring-3-x-3.bin"]
    live.close(remove=True)


def test_ring_reader_fuzz_gives_only_typed_errors(tmp_path):
    """20,011 hostile variants of a real lapped ring (seeded): RingError or a clean read."""
    n = 20_011 * FUZZ_SCALE
    out = fuzz(str(tmp_path / "f.bin"), n, seed=23)
    assert out["untyped"] == 0, out["examples"]
    assert out["typed"] > n // 2 and out["read"] > n // 100     # the cases reach both outcomes


def test_gpu_region_fuzz_gives_only_typed_errors_and_bounded_tables(tmp_path):
    """20,011 hostile variants of a GPU agent region (seeded) read as a session reads it:
    RegionError/LayoutError or a clean read, and no table grows with a forged value (a kernel
    record ending at 2**63 ns used to hang the monitor binning busy time)."""
    n = 20_011 * FUZZ_SCALE
    out = region_fuzz.fuzz(str(tmp_path / "region.bin"), n, seed=29)
    assert out["untyped"] == 0, out["examples"]
    assert out["read"] > n // 10 and out["typed"] > n // 10, out      # both paths were exercised


def _acts(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    a = np.zeros(len(rows), JOINED)
    for i, (start, end, device, ptr) in enumerate(rows):
        a[i]["start"], a[i]["end"], a[i]["device"], a[i]["detail"] = start, end, device, ptr
    return a


def test_forged_gpu_records_are_counted_as_impossible_not_added():
    t0, now = 10**12, 10**12 + 10**10
    tot = GA.GpuTotals(t0=t0)
    tot.add(_acts([(t0 + 1000, t0 + 5000, 0, 1),             # the one real kernel: 4000 ns
                   (t0 + 2000, 2**62, 0, 1),                  # ends an age after "now"
                   (t0 + 9000, t0 + 3000, 0, 1),              # ends before it starts
                   (t0 + 1000, t0 + 2000, 999, 1)]),          # a device no machine has
            ["<all>"], {1: "k"}, now)
    tot.finish()
    assert tot.impossible == 3
    assert tot.all.kernels == 1 and tot.all.kernel_ns == 4000 and tot.all.busy.total() == 4000
    assert list(tot.devices) == [0]


def test_records_without_time_or_from_before_the_session_are_counted_not_added():
    """CUPTI 12.6u2-13.0 gives kernels zero timestamps with a timestamp callback; the session
    start used to drop them without a count (0 kernels, complete). A zero start with a real
    end must not become a kernel that runs from the session's start."""
    t0, now, off = 10**12, 10**12 + 10**10, 252
    tot = GA.GpuTotals(t0=t0)
    tot.add(_acts([(t0 + 1000, t0 + 5000, 0, 1),             # the one real kernel: 4000 ns
                   (-off, -off, 0, 1),                        # CUPTI's 0, less the clock offset
                   (0, t0 + 7000, 0, 1),                      # no start, a real end
                   (t0 - 9000, t0 - 5000, 0, 1),              # ended before the session
                   (t0 - 9000, t0 - 1000, 0, 1)]),
            ["<all>"], {1: "k"}, now)
    tot.finish()
    assert (tot.untimed, tot.before, tot.impossible) == (2, 2, 0)
    assert tot.all.kernels == 1 and tot.all.kernel_ns == 4000 and tot.all.busy.total() == 4000
    rec = tot.record(now)
    assert (rec["untimed"], rec["before"]) == (2, 2)


def test_the_kernel_name_table_stops_growing():
    t0 = 10**12
    tot = GA.GpuTotals(t0=t0)
    n = GA.MAX_KERNEL_NAMES + 1009
    tot.add(_acts([(t0 + i, t0 + i + 1, 0, i) for i in range(n)]), ["<all>"], {}, t0 + 10**9)
    assert len(tot.top) == GA.MAX_KERNEL_NAMES + 1
    assert tot.top[GA.OTHER_KERNELS][0] == 1009 and sum(c for c, _ in tot.top.values()) == n


def test_a_late_record_reopens_no_folded_bins():
    """A record that arrives after its hour was binned costs the kept bins only (~6000),
    not one Python step per 10 ms of the session."""
    u = GA.BusyUnion(reorder_ns=0)
    hour = 3600 * 10**9
    u.add(0, 10**6)
    u.finalize(hour)
    u.add(0, hour)                              # late: all of it before done_until
    assert len(u.bins) <= GA.KEEP_NS // GA.BIN_NS + 2 and u.late == 1


@pytest.mark.parametrize("lacks, change", [
    (None, {}),
    ("its pid", {"pid": None}),
    ("its window", {"window": {"t0_monotonic_ns": 5, "t1_monotonic_ns": None}}),
    ("its window", {"window": {"t0_monotonic_ns": 9, "t1_monotonic_ns": 5}}),
    ("its window", {"window": None}),
])
def test_a_summary_without_its_pid_or_window_is_incomplete(lacks, change):
    """The session writes such a summary all the same, then exits 11 with one line
    (session.py): finding 5's `pid: null`, `duration_s: 0` summaries no longer pass as good."""
    doc = {"pid": 23, "window": {"t0_monotonic_ns": 5, "t1_monotonic_ns": 9}} | change
    assert S.incomplete(doc) == lacks
    assert E.IncompleteSummary("x").code == E.EXIT_RING


def test_a_huge_head_is_refused_at_once(tmp_path):
    w = RingWriter(str(tmp_path / "r.bin"))
    w.write(R.note(1, "info", "x"))
    w._mm[24:32] = (2**31).to_bytes(8, "little")
    with pytest.raises(RingError, match="corrupt"):
        RingReader(w.path)


def test_compare_fuzz_gives_only_usage_errors(tmp_path):
    """2,003 summaries with one field of the wrong type (seeded): UsageError or a table."""
    n = 2_003 * FUZZ_SCALE
    out = fuzz_compare(str(tmp_path), n, seed=1009)
    assert out["untyped"] == 0, out["examples"]
    assert out["typed"] > n // 10 and out["read"] > n // 10


def test_exited_threads_fold_and_keep_every_total():
    ex = ExitedThreads(keep=2)
    rows = [R.thread(tid=100 + i, name=f"w{i}", python=i % 2 == 0, exited=True,
                     ns=[[i, 1], [2, 0], [0, 0], [0, 0]], trans=[[0, i, 0, 0]] + [[0] * 4] * 3,
                     calls=[0, i, 0, 0], oh=[0, 0, 0, 0], ticks=[0, 1, 0, 0, 0, 0]) for i in range(1009)]
    for r in rows:
        ex.add(r)
    out = ex.rows()
    assert len(out) == 4 and len(ex) == 1009
    assert sum(r["calls"][1] for r in out) == sum(range(1009))
    assert sum(r["ns"][0][0] for r in out) == sum(range(1009))
    py = next(r for r in out if r["tid"] == FOLD_TID[True])
    assert py["folded"] == 504 and py["name"] == "(504 exited Python threads)" and py["py"] is True
    assert add_counts({"a": [1, 2]}, {"a": [3], "b": 4}) == {"a": [4, 2], "b": 4}
    main = R.thread(tid=7, name="main", python=True, exited=False, ns=[[1, 0]] * 4, trans=[[0] * 4] * 4,
                    calls=[0] * 4, oh=[0] * 4)
    assert [r["tid"] for r in fold_all([main, *rows[:10]], 7)] == [7, -1, -2]


def test_a_pid_in_other_digits_is_not_a_pid():
    for args in (["attach", "\u0661\u0662\u0663"], ["\u0661\u0662\u0663"], ["attach", "0"]):
        p = run_cli(*args)
        assert p.returncode == E.EXIT_USAGE and "is not a PID" in p.stderr.splitlines()[-1], p.stderr
        assert "Traceback" not in p.stderr


def test_view_of_a_directory_is_a_ring_error():
    assert_clean_error(run_cli("view", "/tmp"), E.EXIT_RING, "not a regular file")


def test_run_of_a_file_that_is_not_a_program(tmp_path):
    assert_clean_error(run_cli("run", "--", "/etc/hostname"), E.EXIT_COMMAND_NOT_FOUND, "cannot execute")
    script = tmp_path / "noshebang"
    script.write_text("\x7fELF garbage\n")
    script.chmod(0o755)
    assert_clean_error(run_cli("run", "--", str(script)), E.EXIT_COMMAND_NOT_FOUND, "cannot execute")


@pytest.mark.parametrize("where", ["/proc/x.json", "/sys/x.json"])
def test_summary_in_an_unwritable_place_is_refused_up_front(where):
    p = run_cli("attach", str(os.getppid()), "--summary", where)
    assert_clean_error(p, E.EXIT_USAGE, "not writable")


def test_ring_path_taken_is_one_line(ebpf, tmp_path):
    taken = tmp_path / "taken.bin"
    taken.write_text("")
    t = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        p = run_cli("attach", str(t.pid), "--ring", str(taken), "--headless", "--duration", "1")
    finally:
        t.kill()
        t.wait()
    assert_clean_error(p, E.EXIT_RING, "already exists")
    assert taken.read_text() == ""


def test_timeline_on_a_hot_loop_keeps_its_duration_and_its_summary(ebpf, target, monitor, tmp_path):
    """--timeline on a loop of tiny torch calls (hundreds of thousands of events a second):
    the monitor drains at most 0.1 s per tick, so --duration holds, and the summary has its
    pid and window; events the kernel's buffer could not hold are counted, not lost silently."""
    go = tmp_path / "go"
    t = target("torch_errors.py", tmp_path / "caught", 600, go)
    m, summary = monitor(t.pid, "--timeline", "--duration", "4", "--max-overhead", "100")
    go.touch()
    started = time.monotonic()
    assert m.finish(timeout=120) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["pid"] == t.pid and s["window"]["t1_monotonic_ns"] > s["window"]["t0_monotonic_ns"]
    assert 3.5 <= s["duration_s"] <= 5.0, s["duration_s"]
    assert time.monotonic() - started < 30          # it was 52 s for --duration 6 before
    assert s["calls"]["backend"] > 10_000
    assert isinstance(s["timeline"]["dropped_events"], int)
