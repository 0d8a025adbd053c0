"""Accounting and the summary on hand-built record streams with exact answers."""

from __future__ import annotations

import json

import pytest

from rlscope_top.ring import records as R
from rlscope_top.report import summary as S
from rlscope_top.account import session_figures as F
from rlscope_top.account.accounting import Accounting

from streams import MS, stream as _stream, windows_then_off_stream


def test_totals_sum_python_threads_only():
    a = Accounting()
    a.feed(_stream())
    s = S.build(a)
    t = s["totals"]
    assert t["wall_s"] == 2.0 and s["duration_s"] == 2.0
    assert s["raw"]["python_s"] == 0.9      # 0.8 main + 0.1 worker; the pool thread is excluded
    assert t["python_s"] == 0.8             # minus the 0.1 s of probe cost charged to Python
    assert s["raw"]["backend_s"] == 0.4 and t["backend_s"] == 0.36
    assert t["simulator_s"] == 0.4
    assert t["cuda_api_s"] is None and t["gpu_s"] is None
    assert s["raw"]["on_cpu_s"] == 1.4 and t["on_cpu_s"] == 1.26 and t["off_cpu_s"] == 0.3
    assert s["split"]["simulator"] == {"on_cpu_s": 0.3, "off_cpu_s": 0.1}
    assert s["calls"] == {"backend": 1009, "simulator": 23, "cuda_api": None}
    assert s["transitions"]["python->backend"] == 1009 and s["transitions"]["python->simulator"] == 23
    assert s["transitions"]["backend->cuda_api"] is None
    assert abs(sum(s["shares"].values()) - 1) < 1e-6


def test_per_thread_rows_include_native_threads():
    a = Accounting()
    a.feed(_stream())
    rows = {r["tid"]: r for r in S.build(a)["threads"]}
    assert rows[44]["python_thread"] is False and rows[44]["off_cpu_s"] == 1.5
    assert rows[43]["exited"] is True


def test_ranges_overhead_sources_and_end():
    a = Accounting()
    a.feed(_stream())
    s = S.build(a, ring_path="/dev/shm/x", dropped=3)
    assert s["ranges"]["Optimizer.step#SGD.step"] == {"count": 2, "total_s": 0.08}
    assert s["overhead"]["probe_hits"] == 2223
    assert s["overhead"]["estimated_s"] == 0.145   # every thread's charged cost, the pool's too
    assert s["overhead"]["by_category_s"] == {"python": 0.1, "backend": 0.04, "simulator": 0.0}
    assert s["overhead"]["estimated_pct"] == 7.25
    assert s["sources"]["backend_s"] == "exact" and s["sources"]["cuda_api_s"] == "unavailable"
    assert s["sources"]["gpu_s"] == "unavailable" and s["sources"]["overhead.estimated_s"] == "estimated"
    assert s["end_reason"] == "target exited" and s["notes"] == ["hello"]
    assert s["ring"] == {"path": "/dev/shm/x", "dropped": 3}
    assert s["probes"]["attached"]["mujoco"]["probes"] == 2
    assert s["operations"]["<all>"]["calls"]["backend"] == 1009


def test_summary_schema_keys_and_json(tmp_path):
    a = Accounting()
    a.feed(_stream())
    s = S.build(a)
    for key in ("schema", "pid", "command", "duration_s", "totals", "calls", "transitions", "operations",
                "overhead", "sources"):
        assert key in s
    assert s["schema"] == "rlscope-top.summary/1"
    assert set(s["totals"]) == {"wall_s", "on_cpu_s", "off_cpu_s", "python_s", "simulator_s", "backend_s",
                                "cuda_api_s", "gpu_s", "overlap_s"}
    assert s["totals"]["gpu_s"] is None and s["totals"]["overlap_s"] is None     # no GPU activity: n/a
    assert set(s["transitions"]) == {"python->backend", "python->simulator", "backend->cuda_api",
                                     "python->cuda_api"}
    p = tmp_path / "s.json"
    S.write(s, str(p))
    assert json.loads(p.read_text()) == s


def test_render_prints_categories_and_na(capsys):
    from rich.console import Console
    a = Accounting()
    a.feed(_stream())
    S.render(S.build(a), Console(width=120, force_terminal=False))
    out = capsys.readouterr().out
    assert "simulator" in out and "n/a" in out and "1,009" in out and "Optimizer.step#SGD.step" in out


def test_measured_prices_reach_the_summary_and_its_overhead_line(capsys):
    from rich.console import Console
    stream = _stream()
    last = [r for r in stream if r["t"] == "ctr"][-1]
    last["prices"] = {"trap_ticks": 211, "ns_per_tick": 4_000_000, "raised": {"sim_work": 2.47},
                      "measured_ns": {"sim_work:enter": [880, 5625]}}
    a = Accounting()
    a.feed(stream)
    s = S.build(a)
    assert s["overhead"]["measured_prices"]["measured_ns"]["sim_work:enter"] == [880, 5625]
    S.render(s, Console(width=200, force_terminal=False))
    assert "priced up from their traps: sim_work x2.47" in capsys.readouterr().out
    a = Accounting()
    a.feed(_stream())                      # no trap seen: n/a, and no word of it on screen
    assert S.build(a)["overhead"]["measured_prices"] is None


def test_later_counters_replace_earlier_ones_so_drops_lose_no_totals():
    full, lossy = Accounting(), Accounting()
    stream = _stream()
    full.feed(stream)
    lossy.feed([r for r in stream if not (r["t"] == "ctr" and r["ts"] == 1500 * MS)])
    assert S.build(full)["totals"] == S.build(lossy)["totals"]


def test_estimated_calls_state_their_bound_in_the_summary_and_its_table(capsys):
    """The two windows ran 1 and 0.5 calls a ms: the calls estimated between them carry a 95%
    bound from that spread (Student's t for 2 windows: wide), in the JSON and beside the
    calls on the printed table; exact calls carry none."""
    from rich.console import Console
    a = Accounting()
    a.feed(windows_then_off_stream())
    s = S.build(a)
    est = s["estimates"]["backend"]
    assert est["calls_estimated"] == s["calls"]["backend"] - 1500 > 0
    assert est["calls_bound"] > 0.5 * est["calls_estimated"]      # 2 windows that disagree by 2x
    S.render(s, Console(width=160, force_terminal=False))
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("backend"))
    assert f"{s['calls']['backend']:,} ±{100 * est['calls_bound'] / s['calls']['backend']:.0f}%" in row
    a = Accounting()
    a.feed(_stream())                      # nothing estimated: the calls alone
    S.render(S.build(a), Console(width=160, force_terminal=False))
    assert "±" not in capsys.readouterr().out


def test_calls_estimated_from_one_window_say_their_bound_is_not_known_yet(capsys):
    """One window, then off: the calls between are a number with no spread to bound it. They
    read ``±?``, not as if exact (a replayed 4 s window of rl-zoo3 DQN had one window: 75,921
    calls where the session's rate said ~170k)."""
    from rich.console import Console
    a = Accounting()
    a.feed(windows_then_off_stream()[:4])           # timed 1 s, then off 2 s
    s = S.build(a)
    est = s["estimates"]["backend"]
    assert est["calls_estimated"] > 0 and est["calls_bound"] is None
    S.render(s, Console(width=160, force_terminal=False))
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("backend"))
    assert f"{s['calls']['backend']:,} ±?" in row


def test_budget_estimates_follow_each_segment():
    """timed 1 s (1000 calls, 1 ms each) -> off 2 s -> timed 1 s (500 calls) -> off 1 s: a
    closed off segment keeps the estimate its windows gave (window 1 alone: all backend),
    the next one uses both windows, the older one decayed (rlscope_top/account/estimates.py), and
    an estimate never leaks into another segment."""
    from rlscope_top.account.estimates import HALF_LIFE_S
    a = Accounting()
    a.feed(windows_then_off_stream())
    (th,) = a.python_threads()
    f = 0.5 ** (3.0 / HALF_LIFE_S)                 # window 1 (ends at 1 s) seen from window 2 (ends at 4 s)
    share = (1000 * f + 500) / (1000 * f + 1000)   # backend's share of the thread in the pooled windows
    assert th["calls"][1] == 1000 + 2000 + 500 + round(1000 * share)      # per ms of thread time
    assert th["ns"][1][0] == pytest.approx((1000 + 2000 + 500 + 1000 * share) * MS, rel=1e-6)
    assert th["ns"][0][0] == pytest.approx((3500 - 2000 - 1000 * share) * MS, rel=1e-6)   # window 2: real Python
    assert th["ns"][0][0] >= 0 and sum(sum(x) for x in th["ns"]) == 5000 * MS    # nothing leaks
    assert a.samples("backend") == 1


def test_a_summary_that_cannot_be_written_goes_to_the_temp_directory(tmp_path, monkeypatch):
    """Data is never lost: a failing summary path (directory removed during the session,
    disk full) falls back to the temp directory and says why."""
    monkeypatch.setattr(S.tempfile, "gettempdir", lambda: str(tmp_path))
    doc = {"schema": "rlscope-top.summary/1", "pid": 42}
    path, why = S.write_safely(doc, str(tmp_path / "gone" / "s.json"), 42)
    assert why and "No such file or directory" in why and "gone/s.json" in why
    assert path.startswith(str(tmp_path)) and "rlscope-top-42-" in path
    assert json.loads(open(path).read()) == doc
    assert S.write_safely(doc, str(tmp_path / "ok.json"), 42) == (str(tmp_path / "ok.json"), None)


def test_churned_threads_count_once_and_the_accounting_stays_bounded():
    """1009 native threads, each seen alive once (1 ms on CPU) and then exited (3 ms in all),
    folded by the collector's own ExitedThreads: their time counts once (a thread's last live
    record used to stay beside its folded final figures: 1009 x 1 ms too much), and the
    accounting holds the rows of one record, not one per thread ever seen."""
    from streams import _thread, _trans, meta_record
    from rlscope_top.ring import records as R
    from rlscope_top.collect.thread_fold import ExitedThreads
    main = _thread(1, True, [[10 * MS, 0], [0, 0], [0, 0], [0, 0]], [0, 0, 0, 0], _trans())
    ex, recs, ts = ExitedThreads(), [meta_record({"torch": ["/x"]})], 1000 * MS
    for i in range(1009):
        tid = 1000 + i
        alive = _thread(tid, False, [[0, 0], [1 * MS, 0], [0, 0], [0, 0]], [0, 1, 0, 0], _trans())
        ts += MS
        recs.append(R.counters(ts, [main, alive, *ex.rows()], [0]))
        ex.add(_thread(tid, False, [[0, 0], [3 * MS, 0], [0, 0], [0, 0]], [0, 1, 0, 0], _trans(), exited=True))
    ts += MS
    recs.append(R.counters(ts, [main, *ex.rows()], [0]))
    a = Accounting()
    a.feed(recs)
    native = sum(th["ns"][1][0] for th in a.threads.values() if not th["py"])
    assert native == 1009 * 3 * MS
    assert len(a.threads) <= 1 + 16 + 2


@pytest.mark.parametrize("cost, kernel, contention", [
    # busy machine: 0.5 s of system time, 0.06 s of it the pre-attach rate (0.03/s x 2 s), 0.145 s
    # explained by the calibrated probes; the monitor's 0.3 s CPU, 0.1 s of idle CPU to take it from;
    # the target is all the rest of the busy CPU (a job using every core)
    ({"target_sys_s": 0.5, "target_cpu_s": 3.7, "base_sys_per_s": 0.03, "monitor_cpu_s": 0.3, "idle_cpu_s": 0.1,
      "busy_cpu_s": 4.0}, 0.295, 0.2),
    # the same beside a neighbour that used as much CPU as the target: half the monitor's take was the target's
    ({"target_sys_s": 0.5, "target_cpu_s": 1.85, "base_sys_per_s": 0.03, "monitor_cpu_s": 0.3, "idle_cpu_s": 0.1,
      "busy_cpu_s": 4.0}, 0.295, 0.1),
    # a program with much system time of its own (0.2 s/s before attach): its rise is not the probes'
    ({"target_sys_s": 0.9, "target_cpu_s": 1.85, "base_sys_per_s": 0.2, "monitor_cpu_s": 0.0, "idle_cpu_s": 0.1,
      "busy_cpu_s": 4.0}, 0.0, 0.0),
    # idle machine, no pre-attach rate (compile under 0.5 s): nothing is added
    ({"target_sys_s": 0.5, "target_cpu_s": 1.0, "base_sys_per_s": None, "monitor_cpu_s": 0.3, "idle_cpu_s": 3.0,
      "busy_cpu_s": 1.3}, 0.0, 0.0),
    # less system time than the calibration explains: never negative
    ({"target_sys_s": 0.1, "target_cpu_s": 2.0, "base_sys_per_s": 0.0, "monitor_cpu_s": 0.0, "idle_cpu_s": 0.0,
      "busy_cpu_s": 4.0}, 0.0, 0.0),
])
def test_measured_kernel_time_and_monitor_contention_count_in_the_self_report(cost, kernel, contention):
    recs = _stream()
    recs[3]["cost"] = cost                                   # the last counters record
    a = Accounting()
    a.feed(recs)
    s = S.build(a)
    src = s["overhead"]["by_source_s"]
    assert src["kernel_extra"] == pytest.approx(kernel) and src["contention"] == pytest.approx(contention)
    assert s["overhead"]["estimated_s"] == pytest.approx(0.145 + kernel + contention)
    assert s["overhead"]["estimated_pct"] == pytest.approx(100 * (0.145 + kernel + contention) / 2.0, abs=1e-3)


@pytest.mark.parametrize("probes_s, sys_s, want", [
    (0.2, 0.15, 0.1),      # their kernel part 1.5x the calibrated 0.1 s: the whole 0.2 s x 1.5
    (0.2, 0.08, 0.0),      # less than the calibrated kernel part: never lowered
    (0.001, 1.0, 1.0005),  # a rise that is not the probes' (3x at most, the rest as is)
])
def test_a_kernel_part_above_calibration_scales_the_probes_whole_cost(probes_s, sys_s, want):
    cost = {"target_sys_s": sys_s, "target_cpu_s": 2.0, "base_sys_per_s": 0.0, "monitor_cpu_s": 0.0,
            "idle_cpu_s": 0.0, "busy_cpu_s": 2.0}
    kernel, _ = F._measured_extra_s(cost, 2.0, probes_s, 0.0, kernel_share=0.5)
    assert kernel == pytest.approx(want)


@pytest.mark.parametrize("cost, own_s, want", [
    ({"base_sys_per_s": 0.0, "base_read": False, "life_sys_per_s": 0.06}, 0.45, 0.03),   # rl-games: its kernel ticks
    ({"base_sys_per_s": 0.0, "base_read": False, "life_sys_per_s": 0.01}, 0.45, 0.01),   # never above its life
    ({"base_sys_per_s": 0.0, "base_read": False, "life_sys_per_s": None}, 0.45, 0.03),
    ({"base_sys_per_s": 0.0, "base_read": True, "life_sys_per_s": 0.06}, 0.45, 0.0),     # a stretch that read it
    ({"base_sys_per_s": 0.02}, 0.45, 0.02),                                               # a meter from before
])
def test_a_pre_attach_rate_the_stretch_could_not_read_is_bounded_by_the_session(cost, own_s, want):
    assert F._with_base(cost, own_s, 15.0)["base_sys_per_s"] == pytest.approx(want)


def test_the_targets_own_kernel_time_is_its_kernel_ticks_share_of_its_cpu_time():
    a = Accounting()
    on = [[2_000_000_000, 0], [1_000_000_000, 5], [0, 0], [0, 0]]     # 3 s on CPU
    a.threads = {1: {"ns": on, "ticks": [500, 200, 0, 0, 0, 50, 0]},  # kernel: 50 of 750 ticks
                 2: {"ns": on, "ticks": []}}                           # no ticks: none counted
    assert F._own_kernel_s(a) == pytest.approx(3.0 * 50 / 750)


def test_the_kernel_share_is_weighted_by_each_probe_cost():
    a = Accounting()
    a.meta = {"labels": ["op begin", "sim"],
              "probes": [{"label": "op begin", "cost_ns": 1000, "kernel_share": 0.6},
                         {"label": "sim", "cost_ns": 10000, "kernel_share": 0.9}]}
    a.hits = [90, 1]
    assert F._kernel_share(a) == pytest.approx((90 * 1000 * 0.6 + 10000 * 0.9) / (90 * 1000 + 10000))
    a.meta["probes"] = [{"label": "op begin", "cost_ns": 1000, "kernel_share": None}]
    assert F._kernel_share(a) is None


@pytest.mark.parametrize("ticks, want", [
    ([0, 21, 0, 0, 0, 79, 0], "backend"),    # an OpenMP worker: mostly futex waits, its user code torch's
    ([0, 30, 0, 0, 40, 30, 0], "native"),     # mostly user code in no probed library
    ([0, 0, 0, 0, 0, 100, 0], "native"),      # kernel only: nothing to name it by
])
def test_a_native_thread_is_named_by_its_user_space_ticks(ticks, want):
    recs = _stream()
    pool = next(t for t in recs[3]["threads"] if t["tid"] == 44)
    pool["ticks"] = ticks
    a = Accounting()
    a.feed(recs)
    (row,) = [r for r in S.build(a)["threads"] if r["tid"] == 44]
    assert row["category"] == want, row


def test_ranges_summed_in_the_kernel_stand_over_any_intervals():
    """Counters that carry the kernel's range totals (cumulative) are the ranges; intervals of
    kind range (a recording from before, or --timeline's stream) do not add to them."""
    out = _stream()
    ctr = out[3]
    out[3] = {**ctr, "ranges": {"Optimizer.step#SGD.step": [1009, 23 * MS], "zero_grad": [7, 2 * MS]}}
    a = Accounting()
    a.feed(out + [R.intervals([R.interval(42, "range", "zero_grad", 3100 * MS, 3200 * MS)])])
    s = S.build(a, ring_path="/dev/shm/x", dropped=0)
    assert s["ranges"] == {"Optimizer.step#SGD.step": {"count": 1009, "total_s": 0.023},
                           "zero_grad": {"count": 7, "total_s": 0.002}}


def test_ranges_stopped_by_the_budget_count_no_training_steps():
    from rlscope_top.account.gpu_figures import ranges_stopped
    step = {"at_s": 1.25, "category": "torch ranges", "mode": "stopped", "overhead_pct": 7.1}
    assert ranges_stopped({"budget": {"steps": [step], "modes": {"torch ranges": "stopped"}}}) == 1.25
    assert ranges_stopped({"budget": {"steps": [], "modes": {"torch ranges": "stopped"}}}) == 0.0   # a replayed window
    assert ranges_stopped({"budget": {"steps": [{**step, "category": "backend", "mode": "off"}],
                                      "modes": {"backend": "off"}}}) is None
    assert ranges_stopped({}) is None


def test_a_native_threads_openmp_ticks_are_openmp_not_backend_and_fold_with_it():
    """The thread record's `omp` ticks (a subset of its backend ticks) come out of Backend in its
    `where`, its category and the job's CPU view; a Python thread's stay inside its torch calls;
    exited workers fold with their `omp` summed (the same figures either way)."""
    from streams import _thread, _trans, meta_record
    from rlscope_top.collect.thread_fold import ExitedThreads
    main = _thread(1, True, [[6 * MS, 0], [4 * MS, 0], [0, 0], [0, 0]], [0, 5, 0, 0], _trans(py_be=5))
    main["ticks"], main["omp"] = [3, 2, 0, 0, 0, 0, 0], 1

    def worker(tid, exited=False):
        w = _thread(tid, False, [[10 * MS, 0], [0, 0], [0, 0], [0, 0]], [0, 0, 0, 0], _trans(), exited=exited)
        w["ticks"], w["omp"] = [0, 9, 0, 0, 0, 1, 0], 7      # 7 of its 9 "backend" ticks in libgomp
        return w

    a = Accounting()
    a.feed([meta_record({"torch": ["/x"]}), R.counters(20 * MS, [main, worker(2)], [0])])
    s = S.build(a)
    rows = {r["tid"]: r for r in s["threads"]}
    assert rows[2]["where"] == {"backend": 0.2, "kernel": 0.1, "openmp": 0.7} and rows[2]["category"] == "openmp"
    assert rows[1]["where"] == {"python": 0.6, "backend": 0.2, "openmp": 0.2} and rows[1]["python_thread"]
    cpu = s["job"]["cpu_s"]
    assert cpu["openmp"] == pytest.approx(0.007) and cpu["backend"] == pytest.approx(0.004 + 0.002)
    assert cpu["kernel"] == pytest.approx(0.001) and cpu["native"] == 0.0

    ex = ExitedThreads(keep=0)
    for tid in (3, 4):
        ex.add(worker(tid, exited=True))
    (folded,) = ex.rows()
    assert folded["omp"] == 14 and folded["ticks"][1] == 18

