"""The live screen, driven the way a user drives it: Pilot key presses on a recorded
ring, and snapshots at 80x24 and 160x48."""

from __future__ import annotations

import json

import pytest

from rlscope_top.tui.app import HelpScreen, RlscopeApp, spark, stacked_bar
from streams import ops_stream, stream, windows_then_off_stream, write_ring

FROZEN = lambda: 1000.0  # noqa: E731 - a clock that never moves: no rates, no drift


@pytest.fixture
def ring(tmp_path):
    """A recorded session: meta, counters, ranges, notes and the target exiting."""
    return write_ring(str(tmp_path / "ring.bin"), stream())


@pytest.fixture
def running_ring(tmp_path):
    """The same session, still running (no end record)."""
    return write_ring(str(tmp_path / "ring-running.bin"), stream()[:-1], close=False)


@pytest.fixture
def ops_ring(tmp_path):
    """The recorded session with an annotated and a sampled operation."""
    return write_ring(str(tmp_path / "ring-ops.bin"), ops_stream())


def _app(ring, tmp_path, **kw):
    return RlscopeApp(ring, str(tmp_path / "summary.json"), clock=FROZEN, **kw)


def _cells(app, table_id):
    t = app.query_one(table_id)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


@pytest.mark.anyio
async def test_rows_show_the_recorded_breakdown(ring, tmp_path):
    app = _app(ring, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Python"][1] == "0.80s" and cats["Python"][2].strip() == "51.3%"   # 0.8 / (0.8 + 0.36 + 0.4)
        assert cats["Backend"][1] == "0.36s" and cats["Simulator"][1] == "0.40s"
        assert cats["CUDA API"][1] == "n/a" and cats["CUDA API"][5] == "unavailable"
        assert cats["Python"][3] == "" and cats["Backend"][3] == "1,009" and "±" not in cats["Backend"][3]
        ops = _cells(app, "#ops")
        assert ops[0][0] == "<all>" and ops[0][2] == "100%"
        assert [r[0] for r in _cells(app, "#threads")] == ["42", "44", "43"]   # on-CPU: 1.16 s, 0.495 s, 0.1 s
        header = str(app.query_one("#header").render())
        assert "pid 42" in header and "python train.py" in header
        assert "n/a, no GPU activity" in str(app.query_one("#gpu").render())


@pytest.mark.anyio
async def test_estimated_calls_show_their_bound_and_a_reset_keeps_it_the_sessions(tmp_path):
    """The budget estimated backend's calls between two windows: the calls cell reads "N ±x%",
    x the summary's bound over the session's calls; after a reset the count restarts and the
    bound stays the session's calls' (the same ±x of a smaller count would overstate it)."""
    from rlscope_top.account.accounting import Accounting
    from rlscope_top.report import summary as S
    a = Accounting()
    a.feed(windows_then_off_stream())
    s = S.build(a)
    whole, bound = s["calls"]["backend"], s["estimates"]["backend"]["calls_bound"]
    app = _app(write_ring(str(tmp_path / "est.bin"), windows_then_off_stream()), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Backend"][3] == f"{whole:,} ±{100 * bound / whole:.0f}%"
        assert cats["Backend"][5].startswith("estimated ±")
        await pilot.press("r")
        await pilot.pause()
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Backend"][3] == f"0 ±{100 * bound / whole:.0f}%"


@pytest.mark.anyio
async def test_header_names_probes_priced_from_their_traps(tmp_path):
    recs = stream()
    last = [r for r in recs if r["t"] == "ctr"][-1]
    last["prices"] = {"trap_ticks": 97, "ns_per_tick": 4_000_000, "raised": {"sim_work": 2.5, "op begin": 1.2},
                      "measured_ns": {}}
    app = _app(write_ring(str(tmp_path / "ring-prices.bin"), recs), tmp_path)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        assert "(2 probes priced from traps)" in str(app.query_one("#header").render())


@pytest.mark.anyio
@pytest.mark.parametrize("steal, all_cpu, shown", [(0.5, 10.0, "steal 5.0%"), (0.05, 10.0, None)])
async def test_header_shows_hypervisor_steal_from_one_percent(tmp_path, steal, all_cpu, shown):
    recs = stream()
    for r in recs:              # the cost meter's readings grow from the first counters to the last
        if r["t"] == "ctr":
            r["cost"] = {"target_sys_s": 0.0, "target_cpu_s": 0.0, "base_sys_per_s": 0.0, "monitor_cpu_s": 0.0,
                         "idle_cpu_s": 0.0, "busy_cpu_s": 0.0, "steal_cpu_s": steal, "all_cpu_s": all_cpu}
    app = _app(write_ring(str(tmp_path / "ring-steal.bin"), recs), tmp_path)
    async with app.run_test(size=(220, 40)) as pilot:
        await pilot.pause()
        header = str(app.query_one("#header").render())
        assert (shown in header) if shown else ("steal" not in header), header


@pytest.mark.anyio
async def test_sort_key_cycles_the_threads_table(ring, tmp_path):
    app = _app(ring, tmp_path)
    order = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.query_one("#threads").focus()
        for _ in range(6):
            order.append([r[0] for r in _cells(app, "#threads")])
            await pilot.press("o")
            await pilot.pause()
    assert order[0] == ["42", "44", "43"]          # on-CPU
    assert order[1] == ["44", "42", "43"]          # off-CPU: 1.5 s, 0.3 s, 0
    assert order[2] == ["42", "43", "44"]          # Python: the pool thread never ran Python (n/a)
    assert order[3][0] == "44"                     # native: the pool thread's time outside probes
    assert order[4][0] == "42"                     # Backend
    assert order[5] == ["42", "43", "44"]          # TID ascending


@pytest.mark.anyio
async def test_sort_follows_focus_and_enter_shows_details(ring, tmp_path):
    app = _app(ring, tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        app.query_one("#cats").focus()
        await pilot.press("o")                          # categories by time
        await pilot.pause()
        assert [r[0][2:] for r in _cells(app, "#cats")] == ["Python", "Simulator", "Backend", "CUDA API"]
        assert [r[0] for r in _cells(app, "#threads")] == ["42", "44", "43"]   # untouched: not focused
        app.query_one("#ops").focus()
        await pilot.press("enter")
        await pilot.pause()
        notes = app.notices()
        assert any("<all>: Python 51.3%" in n and "1,032 calls" in n for n in notes), notes
        assert any("CUDA API n/a" in n for n in notes), notes      # n/a as in every table, not 0.0%


@pytest.mark.anyio
async def test_exit_banner_and_quit_writes_the_summary(ring, tmp_path):
    app = _app(ring, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        b = app.query_one("#banner")
        assert b.has_class("show") and "target exited" in str(b.render())
        await pilot.press("q")
    assert app.return_value == str(tmp_path / "summary.json")
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["schema"] == "rlscope-top.summary/1" and s["calls"]["backend"] == 1009


@pytest.mark.anyio
async def test_no_banner_while_running_and_snapshot_key(running_ring, tmp_path):
    app = _app(running_ring, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.query_one("#banner").has_class("show") is False
        await pilot.press("s")
        await pilot.pause()
    snap = json.loads((tmp_path / "summary.snapshot1.json").read_text())
    assert snap["end_reason"] is None and snap["totals"]["python_s"] == 0.8


@pytest.mark.anyio
async def test_another_session_on_the_target_shows_in_the_banner(tmp_path):
    from rlscope_top.ring import records as R

    said = "another rlscope-top (PID 77) is attached to PID 42: its probes' cost is in this session's times"
    recs = stream()[:-1]
    recs.insert(2, R.note(recs[1]["ts"], "warn", said))
    app = _app(write_ring(str(tmp_path / "ring-two.bin"), recs, close=False), tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        b = app.query_one("#banner")
        assert b.has_class("show") and "another rlscope-top (PID 77)" in str(b.render())


@pytest.mark.anyio
async def test_pause_reset_and_help(ring, tmp_path):
    app = _app(ring, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        assert app.paused and "[paused]" in str(app.query_one("#header").render())
        await pilot.press("p")
        await pilot.press("r")
        await pilot.pause()
        after_reset = {row[0][2:]: row[1] for row in _cells(app, "#cats")}
        assert after_reset["Python"] == "0.00s" and after_reset["Backend"] == "0.00s"
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.anyio
async def test_threads_and_processes_count_from_a_reset_as_the_categories_do(tmp_path):
    """`r` at 1.5 s of tree_stream(): after it, a thread's and a process's rows read what came
    since, as the categories beside them do (they read lifetime totals before); a thread born
    since reads all of its own."""
    from rlscope_top.ring.ring import RingWriter
    from streams import tree_stream
    recs, path = tree_stream(), str(tmp_path / "live.bin")
    w = RingWriter(path, capacity=1 << 16)
    for r in recs[:2]:
        w.write(r)
    app = _app(path, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        for r in recs[2:4]:
            w.write(r)
        app.refresh_view()
        await pilot.pause()
        threads = {row[0]: row for row in _cells(app, "#threads")}
        # thread 42 at the reset: 0.6 s on CPU, 0.1 s off, Python 0.4 s, Backend 0.2 s, Sim 0.1 s;
        # at 3 s (its probes' cost taken out): 1.16 s, 0.3 s, 0.7 s, 0.36 s, 0.4 s
        assert threads["42"][3:9] == ["0.56s", "0.20s", "0.30s", "n/a", "0.16s", "0.30s"]
        assert threads["44"][3:5] == ["0.49s", "1.50s"]                          # born since: all its own
        procs = {row[0]: row for row in _cells(app, "#procs")}
        assert procs["42"][3] == "0.66s" and procs["42"][8] == f"{986 + 16:,}"   # threads 42 and 43; calls
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Backend"][3] == f"{986 + 23:,}"                             # 42's since, 60's all
        # CPU since the reset over its 1.5 s: Python (500 + 100 + 200 + 100 - 300) ms, Sim (300 + 700
        # - 100) ms, Backend (360 + 250 - 200) ms, the native pool's 495 ms (lifetime: over 2 s)
        assert "Python 0.40  Sim 0.60  Backend 0.27  native 0.33" in str(app.query_one("#job").render())
    w.close()


def test_bar_and_sparkline_read_without_colour():
    bar = stacked_bar({"python": 0.5, "simulator": 0.25, "backend": 0.25, "cuda_api": 0.0}, 8)
    assert bar.plain == "████▒▒▓▓"
    assert stacked_bar({"python": 0.0}, 4).plain == "····"
    assert spark([0, 50, 100]) == "▁▄█"


def test_bar_keeps_its_width_whatever_the_shares():
    """After a reset, estimated figures can come out slightly negative or above 100%:
    the bar must not spill over the table (it did, pushing the rate columns off screen)."""
    assert stacked_bar({"python": -0.2, "backend": 1.1}, 10).plain == "▓" * 10
    assert stacked_bar({"python": 0.7, "simulator": 0.7}, 10).plain == "███████▒▒▒"
    assert stacked_bar({"python": None, "backend": 0.5}, 4).plain == "▓▓··"


def test_operation_rows_since_a_reset_are_never_negative():
    from rlscope_top.report.view import ViewModel
    now = {"wall_s": 1.0, "python_s": 0.3, "backend_s": 0.7, "simulator_s": 0.0, "cuda_api_s": None,
           "transitions": {"python->backend": 10}, "calls": {"backend": 10}, "source": "sampled"}
    base = {**now, "wall_s": 1.05, "python_s": 0.4, "backend_s": 0.65}     # re-estimated since the reset
    row = ViewModel._op_row("train", now, base)
    assert row["_wall"] == 0.0 and all(v >= 0 for v in row["shares"].values())
    assert row["calls_per_s"] is None                          # no rate over (almost) no time: "-" on screen


def test_unreadable_ring_is_a_clear_error(tmp_path):
    from rlscope_top.ring.ring import RingError
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"\0" * 8192)
    with pytest.raises(RingError, match="not an rlscope-top ring"):
        RlscopeApp(str(bad), str(tmp_path / "s.json"))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_snapshot(snap_compare, ring, tmp_path, size):
    assert snap_compare(_app(ring, tmp_path), terminal_size=size)


def test_snapshot_operations(snap_compare, ops_ring, tmp_path):
    assert snap_compare(_app(ops_ring, tmp_path), terminal_size=(120, 36))


def test_snapshot_help_and_sorted(snap_compare, ring, tmp_path):
    assert snap_compare(_app(ring, tmp_path), press=["tab", "tab", "o", "question_mark"], terminal_size=(80, 24))


@pytest.mark.anyio
async def test_operations_table_shows_each_operation_with_its_source(ops_ring, tmp_path):
    app = _app(ops_ring, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        ops = _cells(app, "#ops")
        rows = {r[0]: r for r in ops}
        assert [r[0] for r in ops] == ["<all>", "<none>", "env", "inference"]   # by wall time
        assert rows["env"][1] == "sampled" and rows["inference"][1] == "annotated" and rows["<none>"][1] == ""
        assert rows["inference"][2] == "30%" and rows["env"][2] == "32%" and rows["<none>"][2] == "38%"
        assert rows["inference"][4] == f"{700 / 0.47:,.0f}"          # transitions per second of the operation
        app.query_one("#ops").focus()
        await pilot.press("down", "enter")        # details of the biggest operation
        await pilot.pause()
        assert any(n.startswith("<none>") for n in app.notices()), app.notices()


@pytest.mark.anyio
async def test_the_screen_opens_at_once_and_says_it_is_attaching(tmp_path):
    """The screen is up while the probes load (or compile): it says so, then shows data once they land."""
    from rlscope_top.ring import records as R
    from rlscope_top.ring.ring import RingWriter
    from rlscope_top.collect.session import ATTACHING
    from streams import stream

    path = str(tmp_path / "live.bin")
    w = RingWriter(path, capacity=1 << 16)
    w.write(R.note(1, "status", ATTACHING))
    app = RlscopeApp(path, str(tmp_path / "s.json"), clock=lambda: 1000.0, write_on_quit=False, pid=42)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        before = str(app.query_one("#header").render())
        assert "pid 42" in before and "attaching: loading the eBPF probes" in before
        for r in stream():
            w.write(r)
        app.refresh_view()
        await pilot.pause()
        after = str(app.query_one("#header").render())
        assert "python train.py" in after and "attaching" not in after
    w.close()
