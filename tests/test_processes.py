"""Issue 13 (2): job-level figures on a recorded three-process ring: per-process entries that
add up to the job, guessed and given roles, an exited process that keeps its figures; the
screen's processes table, its details and the categories of one process; the per-process
Prometheus series."""

from __future__ import annotations

import pytest

from rlscope_top.account.accounting import Accounting
from rlscope_top.account.processes import aside, guess_role, launchers, shown_role, waits_for
from rlscope_top.report import summary as S
from rlscope_top.ring.ring import RingReader
from rlscope_top.tui.app import RlscopeApp
from streams import stream, tree_stream, write_ring

FROZEN = lambda: 1000.0  # noqa: E731


def _summary(records) -> dict:
    acct = Accounting()
    acct.feed(records)
    return S.build(acct)


def test_processes_add_up_to_the_job():
    s = _summary(tree_stream())
    procs = {p["pid"]: p for p in s["processes"]}
    assert set(procs) == {42, 50, 60}
    assert s["calls"]["simulator"] == 23 + 1009 == sum(p["calls"]["simulator"] for p in procs.values())
    assert s["transitions"]["python->backend"] == 1009 + 23
    assert procs[50]["calls"]["simulator"] == 1009 and procs[50]["totals"]["simulator_s"] == pytest.approx(0.7)
    assert procs[50]["exited"] and procs[50]["role"] == "env worker" and procs[50]["role_source"] == "guessed"
    assert procs[60]["role"] == "learner" and procs[60]["role_source"] == "user"
    assert procs[42]["role"] == "main"
    for c in ("python", "backend", "simulator"):
        assert s["totals"][f"{c}_s"] == pytest.approx(sum(p["totals"][f"{c}_s"] for p in procs.values()), abs=1e-5)
    # worker 50 blocked 0.3 s off-CPU in Python outside any probed call: waiting
    assert procs[50]["waiting_s"] == pytest.approx(0.3)
    assert {th["pid"] for th in s["threads"]} == {42, 50, 60}


def test_a_single_process_ring_has_one_entry():
    s = _summary(stream())          # no `procs` in its records (one process, or an older writer)
    assert [(p["pid"], p["role"]) for p in s["processes"]] == [(42, "main")]
    assert s["processes"][0]["calls"] == s["calls"]


FS = "python -c from multiprocessing.forkserver import main"


@pytest.mark.parametrize("cmd, python, calls, want", [
    (FS, True, {"simulator": 0, "backend": 0}, "forkserver"),
    (FS, True, {"simulator": 1009, "backend": 5}, "env worker"),      # forked by the forkserver
    (FS, True, {"simulator": 0, "backend": 23}, "worker"),
    ("python -c from multiprocessing.resource_tracker import main", True, {}, "resource tracker"),
    ("/bin/sh -c make", False, {"simulator": None}, "native"),
    ("python worker.py", True, {"simulator": 5}, "env worker"),
    ("python worker.py", True, {"simulator": 0, "cuda_api": None}, "worker"),
])
def test_role_guesses(cmd, python, calls, want):
    assert guess_role({"pid": 7, "cmd": cmd, "python": python, "role": None}, 1, calls) == want


def test_role_guesses_from_operations_and_parent():
    proc = {"pid": 7, "cmd": FS, "python": True, "role": None}
    assert guess_role(proc, 1, {}, parent_cmd=FS) == "worker"      # an idle child of the forkserver
    assert guess_role(proc, 1, {"backend": 101}, ops_s={"data_loading": 0.5}) == "dataloader"
    assert guess_role({**proc, "role": "actor"}, 1, {}, ops_s={"data_loading": 0.5}) == "actor"


def test_a_chain_of_launchers_leads_to_the_main_process():
    """`bash run.sh` -> `timeout 3600 python train.py`: every native process on the way down from
    the attached PID is a launcher, so the python is `main` (it read `worker` behind the second
    wrapper); a native process off that path, or below a Python one, is not."""
    procs = [{"pid": 1, "ppid": 0, "python": False}, {"pid": 2, "ppid": 1, "python": False},
             {"pid": 3, "ppid": 2, "python": True}, {"pid": 4, "ppid": 3, "python": False},
             {"pid": 5, "ppid": 3, "python": True}]
    assert launchers(procs, 1) == {1, 2}
    assert launchers(procs, 3) == set()                      # a Python root: no launcher
    main = {"pid": 3, "cmd": "python train.py", "python": True, "role": None}
    assert guess_role(main, 1, {}, under_launcher=True) == "main"
    assert guess_role({"pid": 1, "cmd": "bash run.sh", "python": False, "role": None}, 1, {}) == "launcher"


def test_waits_for_names_the_peer_and_apportions_waiting():
    waits = [["socket", 12, 67], ["a sleep", 0, 23], ["pipe", 0, 10]]
    got = waits_for(waits, 2.0, {12: "env worker"})
    assert [w["what"] for w in got] == ["PID 12 (env worker) via socket", "a sleep", "a pipe to outside the job"]
    assert [w["share"] for w in got] == [0.67, 0.23, 0.1]
    assert waits_for([["pipe", -1, 5]], 1.0, {})[0]["what"] == "a pipe several of the job's processes hold"
    assert sum(w["seconds"] for w in got) == pytest.approx(2.0)
    assert waits_for(None, 1.0, {}) == [] and waits_for(waits, None, {})[0]["seconds"] is None


def _cells(app, table_id):
    t = app.query_one(table_id)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


@pytest.mark.anyio
async def test_processes_table_details_and_one_process_categories(tmp_path):
    ring = write_ring(str(tmp_path / "tree.bin"), tree_stream())
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN)
    async with app.run_test(size=(140, 48), notifications=True) as pilot:
        await pilot.pause()
        t = app.query_one("#procs")
        assert t.has_class("show")
        rows = _cells(app, "#procs")
        assert [r[0] for r in rows] == ["42", "50", "60"]              # on-CPU: 1.2+, 0.9, 0.35
        assert rows[1][1] == "env worker" and rows[1][9] == "exited" and rows[2][1] == "learner"
        assert "+2 processes" in str(app.query_one("#header").render())
        t.focus()
        await pilot.press("o")                                          # by simulator time
        await pilot.pause()
        assert _cells(app, "#procs")[0][0] == "50"
        await pilot.press("up")                                         # the cursor stayed on 42
        await pilot.press("enter")
        await pilot.pause()
        assert any("PID 50 (env worker)" in n and "1,009 calls" in n for n in app.notices()), app.notices()
        assert any("waiting 0.30s (on PID 42 (main) via socket 75%, a lock or the GIL (futex) 25%)" in n
                   for n in app.notices()), app.notices()
        await pilot.press("f")                                          # its categories alone
        await pilot.pause()
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Simulator"][1] == "0.70s" and cats["Backend"][1] == "0.00s", cats
        assert "categories: PID 50" in str(app.query_one("#header").render())
        await pilot.press("f")                                          # the whole job again
        await pilot.pause()
        cats = {row[0][2:]: row for row in _cells(app, "#cats")}
        assert cats["Simulator"][1] == "1.10s", cats


@pytest.mark.anyio
async def test_one_process_hides_the_processes_table(tmp_path):
    ring = write_ring(str(tmp_path / "one.bin"), stream())
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.query_one("#procs").has_class("show")
        await pilot.press("f")                      # nothing to choose: the job stays
        await pilot.pause()
        assert app.vm.scope is None


def test_prometheus_has_per_process_series(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415
    from rlscope_top.report.prometheus import SessionMetrics  # noqa: PLC0415

    m = SessionMetrics()
    m.publish(_summary(tree_stream()))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)
    text = generate_latest(reg).decode()
    assert 'rlscope_process_calls_total{category="simulator",host=' in text
    line = next(x for x in text.splitlines() if x.startswith("rlscope_process_calls_total")
                and 'process="50"' in x and 'category="simulator"' in x)
    assert line.endswith(" 1009.0") and 'process_role="env worker"' in line
    assert RingReader  # the ring module stays importable beside prometheus_client


def test_the_printed_table_folds_exited_processes_past_its_rows():
    """A job that churns workers: every live process and the busiest exited ones are rows; the
    rest fold into one row whose figures are their sums (the JSON keeps each)."""
    from rich.console import Console  # noqa: PLC0415

    s = _summary(tree_stream())
    w50 = next(p for p in s["processes"] if p["pid"] == 50)
    churn = [{**w50, "pid": 1000 + i, "waits_for": [], "waiting_s": 0.0,
              "calls": {**w50["calls"], "simulator": i + 1},
              "totals": {**w50["totals"], "simulator_s": 0.001 * (i + 1), "python_s": 0.0, "backend_s": 0.0}}
             for i in range(37)]
    s["processes"] = s["processes"] + churn
    con = Console(record=True, width=160)
    S.render(s, con)
    rows = [ln for ln in con.export_text().splitlines() if "(exited)" in ln]
    kept = S.MAX_PROCESS_ROWS - 2                     # 42 and 60 are live; 50 (0.7 s) is the busiest
    shown = {int(r.split()[0]) for r in rows[:-1]}
    assert shown == {50, *range(1037 - (kept - 1), 1037)}, shown
    folded = range(1, 37 - (kept - 1) + 1)            # the least busy: pids 1000.. with i + 1 calls
    last = rows[-1]
    assert last.split()[0] == "..." and f"{len(folded)} more (exited)" in last, last
    assert f"{0.001 * sum(folded):.3f}s" in last and f"{sum(folded):,}" in last, last


def test_a_child_gone_before_it_is_read_keeps_its_parents_program():
    """A fork that exits before the monitor reads it (a zombie: no executable, no maps) runs
    its parent's program: it is not said to run no Python, and counts as Python. Past
    FOLLOW_NOTES children, one note says the rest are not named one by one."""
    import os  # noqa: PLC0415
    import time  # noqa: PLC0415

    from rlscope_top.collect.processes import FOLLOW_NOTES, Processes  # noqa: PLC0415

    def fork(live_s: float) -> int:
        pid = os.fork()
        if pid == 0:
            time.sleep(live_s)
            os._exit(0)
        return pid

    notes = []
    procs = Processes((os.getpid(),), note=lambda level, msg: notes.append(msg))
    zombies = [fork(0) for _ in range(3)]
    live = [fork(5) for _ in range(FOLLOW_NOTES + 5)]
    try:
        time.sleep(0.3)                                 # the first three are zombies now
        procs.refresh([os.getpid(), *zombies, *live])
        assert all(procs.known[k]["python"] for k in zombies + live), procs.known
        assert not [n for n in notes if "does not run Python" in n], notes
        follows = [n for n in notes if n.startswith("following")]
        assert len(follows) == FOLLOW_NOTES + 1, follows
        assert "not noted one by one" in follows[-1]
    finally:
        for k in live:
            os.kill(k, 9)
        for k in zombies + live:
            os.waitpid(k, 0)


def test_a_live_target_whose_program_cannot_be_read_is_not_python(monkeypatch):
    """`attach 1` on a VM whose init guards its executable and maps even from root: a live
    target that cannot be told to run Python is not counted as Python (its main thread read
    Python 100%), and one note says why. A child that cannot be read still runs its parent's."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from rlscope_top.collect import processes as PR  # noqa: PLC0415

    monkeypatch.setattr(PR, "_runs_python", lambda pid, linked_in=False: None)     # Permission denied
    kid = subprocess.Popen(["sleep", "5"])
    try:
        notes = []
        procs = PR.Processes((os.getpid(),), note=lambda level, msg: notes.append(msg))
        procs.refresh([os.getpid(), kid.pid])
        assert procs.known[os.getpid()]["python"] is False, procs.known
        assert procs.known[kid.pid]["python"] is False       # its parent's program, as the root reads
        said = [n for n in notes if "cannot be read" in n]
        assert len(said) == 1 and said[0].startswith(f"PID {os.getpid()} (") and "not known to run Python" in said[0]
    finally:
        kid.kill()
        kid.wait()


def test_native_children_are_noted_a_few_times_then_once():
    """A training loop that runs a native command each step (`nvidia-smi`, `git`): the first
    FOLLOW_NOTES children that do not run Python are named, then one note covers the rest."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from rlscope_top.collect.processes import FOLLOW_NOTES, Processes  # noqa: PLC0415

    notes = []
    procs = Processes((os.getpid(),), note=lambda level, msg: notes.append(msg))
    kids = [subprocess.Popen(["sleep", "5"]) for _ in range(FOLLOW_NOTES + 5)]
    try:
        procs.refresh([os.getpid(), *(k.pid for k in kids)])
        assert not any(procs.known[k.pid]["python"] for k in kids)
        native = [n for n in notes if "not run Python" in n]
        assert len(native) == FOLLOW_NOTES + 1, native
        assert "not noted one by one" in native[-1]
    finally:
        for k in kids:
            k.kill()
            k.wait()


def test_folded_processes_operations_add_into_the_folds_and_the_job_keeps_them():
    """Folding exited processes moves their operation counters into the fold's (FOLD_PID) and
    out of the kernel's table; the job's sums do not move."""
    from rlscope_top.collect.record_builder import _fold_ops_into, _job_ops  # noqa: PLC0415
    from rlscope_top.probes.maps import OpCounters  # noqa: PLC0415
    from rlscope_top.ring.records import FOLD_PID  # noqa: PLC0415

    def oc(pid, op, k):
        return OpCounters(op=op, pid=pid, ns=[[k, 2 * k]] * 4, trans=[[k] * 4] * 4, calls=[k] * 4, oh=[1] * 4,
                          ticks=[k, k])

    per = {(p, op): oc(p, op, 10 * p + op) for p in (42, 50, 60) for op in (1, 2)}
    before = _job_ops(dict(per))
    into: dict = {}
    left = _fold_ops_into(per, {50}, into)
    assert sorted(left) == [(50, 1), (50, 2)]
    left = _fold_ops_into(per, {60}, into)                # a second fold adds to the first
    assert sorted(per) == [(42, 1), (42, 2), (FOLD_PID, 1), (FOLD_PID, 2)]
    assert per[(FOLD_PID, 1)].calls == [501 + 601] * 4 and per[(FOLD_PID, 1)].pid == FOLD_PID
    after = _job_ops(dict(per))
    for op in (1, 2):
        assert (after[op].ns, after[op].calls, after[op].trans, after[op].oh, after[op].ticks) == \
            (before[op].ns, before[op].calls, before[op].trans, before[op].oh, before[op].ticks)


def test_each_process_is_watched_for_as_long_as_its_threads_were_seen():
    s = _summary(tree_stream())
    wall = {p["pid"]: p["totals"]["wall_s"] for p in s["processes"]}
    # worker 50 exited after 1.2 s of its thread's time; 60 was seen for 0.35 s; the main process's
    # longest thread (its pool, 2.0 s) was seen the whole session
    assert wall == {42: pytest.approx(2.0), 50: pytest.approx(1.2), 60: pytest.approx(0.35)}
    assert s["totals"]["wall_s"] == pytest.approx(2.0)


def test_multiprocessing_helpers_are_set_aside_unless_named_or_calling():
    """The resource tracker and the forkserver (not its children) are left out of the job's
    figures; one the user named, or one that made a probed call, stays in."""
    rt = "python -c from multiprocessing.resource_tracker import main;main(7)"
    procs = [{"pid": 1, "ppid": 0, "cmd": "python train.py"},
             {"pid": 2, "ppid": 1, "cmd": rt},
             {"pid": 3, "ppid": 1, "cmd": FS},
             {"pid": 4, "ppid": 3, "cmd": FS},                     # a worker the forkserver forked
             {"pid": 5, "ppid": 1, "cmd": rt, "role": "tracker"},
             {"pid": 6, "ppid": 1, "cmd": rt}]
    calls = {6: [0, 23, 0, 0]}
    assert aside(procs, 1, lambda pid: calls.get(pid, [0, 0, 0, 0])) == {2, 3}
    assert aside(procs, 2, lambda pid: [0, 0, 0, 0]) == {3, 6}      # the attached PID is never aside
    assert shown_role({"role": "resource tracker", "in_totals": False}) == "resource tracker (not in totals)"
    assert shown_role({"role": "main"}) == "main"                   # older summaries have no in_totals
