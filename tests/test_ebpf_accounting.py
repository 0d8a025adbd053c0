"""Issue 3 on real eBPF: calibration, corrected shares, the budget, and the kernel's
accounting checked against the reference engine on the same events."""

from __future__ import annotations

import json
import statistics
import signal
import time

import pytest

from support import TO_999, load_summary, stated_bound_pp
from truth import truth_shares, unprobed_shares

pytestmark = pytest.mark.ebpf
CATS = ("python", "simulator", "backend")


def _run(target, monitor, tmp_path, simlib, workload, *extra, env=None, unprobed_s=0.0):
    truth_path = tmp_path / "truth.json"
    t = target("known_split.py", simlib, truth_path, *workload)
    before = time.monotonic_ns()
    time.sleep(unprobed_s)          # unprobed reference: before the monitor starts (its BPF compile
    before_end = time.monotonic_ns()  # competes for the CPUs) ...
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step", *extra, env=env)
    assert m.finish(timeout=90) == 0, m.stderr_text
    after = time.monotonic_ns()     # ... and after it has detached, so that drift cancels
    time.sleep(unprobed_s)
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    items = json.loads(truth_path.read_text())
    spans = [(before, before_end), (after, time.monotonic_ns())]
    truth = unprobed_shares(items, spans) if unprobed_s else truth_shares(items, s["window"])
    return s, truth, m


def _shares(figs: dict) -> dict:
    tot = sum(figs[f"{c}_s"] for c in CATS)
    return {c: figs[f"{c}_s"] / tot for c in CATS}


def test_calibrate_measures_emulated_cheaper_than_out_of_line(ebpf, calibration_file):
    data = json.loads(open(calibration_file).read())
    (entry,) = data["machines"].values()
    k = entry["kinds"]
    total = {kind: v["inside"] + v["outside"] for kind, v in k.items() if kind not in ("sched_switch", "tick")}
    # a clock tick's interrupt costs the loop it stops: 22-28 us here (an RL-shaped loop; bench/tick_cost.py)
    assert 500 < k["tick"]["per_tick"] < 200_000, k["tick"]
    # docs/probe-notes.md: out of line costs 10x as much per trap on an Intel VM, 2.8-3.9x on
    # an AMD EPYC one: at least twice (the extra single-step trap) everywhere we measured
    assert total["bracket_ool"] > 2 * total["bracket"] > 0
    # a pair's return trap is never out of line, so only one of its two traps gains the step:
    # 1.9-2.6x on the AMD EPYC VM on 2026-12-04 (pair ~4,000 ns, pair_ool 7,800-10,400), where
    # 2x failed once in CI
    assert total["pair_ool"] > 1.5 * total["pair"] > 0
    assert k["pair_ool"]["inside"] > k["pair_ool"]["outside"]   # the out-of-line step runs after the timestamp
    # the traps' kernel time: most of each kind's cost (75-98% seen); the out-of-line step is all kernel
    # (not torch's backward counter: most of its cost is the program's code after the trap,
    # tests/test_ebpf_backward_counter.py)
    assert all(0.3 < v["kernel_share"] <= 1.0 for kind, v in k.items() if kind not in ("sched_switch", "count_torch", "tick")), k
    # within the shares' resolution: system time comes in 10 ms clock ticks, 18 readings over ~0.6 s a kind
    # (CI once read pair_ool 0.946 against pair 0.963, both near all-kernel; on the Intel VM of
    # 2026-11-29, whose vCPUs change speed within seconds, 0.695 against 0.916): near the pair's
    # share, or at least mostly kernel
    assert k["pair_ool"]["kernel_share"] >= min(0.6, k["pair"]["kernel_share"] - 0.05), k
    assert entry["details"]["n_calls"] == 20011


def test_kernel_accounting_matches_reference_engine(ebpf, target, monitor, tmp_path, simlib):
    s, _, _ = _run(target, monitor, tmp_path, simlib, ("--threads", 2, "--py-us", 2000, "--sim-us", 1500,
                   "--ops", 20), "--duration", "4", "--timeline", "--max-overhead", "100")
    tl = s["timeline"]
    assert tl["late_events"] == 0
    for c in ("python", "backend", "simulator"):
        for k in ("on_cpu_s", "off_cpu_s"):
            assert abs(tl["split"][c][k] - _raw_split(s, c, k)) <= 2e-6, (c, k, tl["split"][c], s)
    assert tl["overlap_s"]["gpu_only"] == 0 and tl["overlap_s"]["cpu_only"] > 0


def _raw_split(s, c, k):
    """Uncorrected per-category on/off seconds: corrected + what the correction took."""
    v = s["split"][c][k]
    return v + (s["overhead"]["by_category_s"][c] if k == "on_cpu_s" else 0.0)


@pytest.mark.quiet
def test_corrected_shares_within_4pp(ebpf, target, monitor, tmp_path, simlib, calibration_file):
    """A Python / simulator / torch mix at ~11k torch calls/s (bench row "mix backend-heavy").
    Within 2 pp on the Intel VMs; 3.2 pp in CI on an AMD EPYC VM, whose own calibration moves
    by up to 60% between runs minutes apart (docs/accuracy.md, "A noisy machine"): 4 pp.
    Needs a quiet machine: the truth is the target's unprobed cycles, timed before and after
    the session; a busy loop beside it changes their speed (it failed in
    scripts/test-under-load.sh)."""
    s, truth, _ = _run(target, monitor, tmp_path, simlib,
                       ("--py-iters", 15000, "--sim-us", 1000, "--ops", 40, "--op-size", 128),
                       "--duration", "6", "--max-overhead", "100", env={"RLSCOPE_CALIBRATION": calibration_file},
                       unprobed_s=2.0)
    assert s["overhead"]["calibrated"] is True
    ours = _shares(s["totals"])
    for c in CATS:
        assert abs(ours[c] - truth[c]) <= 0.04, (c, ours, truth, _shares(s["raw"]))
    assert s["calls"]["backend"] > 20_000


@pytest.mark.quiet
def test_correction_removes_most_of_the_error_on_many_small_ops(ebpf, target, monitor, tmp_path, simlib,
                                                                calibration_file):
    """~39k tiny torch calls/s: raw shares are off by ~6 pp; corrected ones by ~1 in the median
    of three sessions (docs/accuracy.md). One session alone was seen off by 4.5 and 5.6 pp (the
    per-hit cost moves with the machine's state, both ways), so no single one decides; none
    may be made worse by more than 1 pp.
    Needs a quiet machine: with one busy loop per core (scripts/test-under-load.sh) the median
    went 7.0 -> 5.3 pp, not half: a target preempted between its calls pays a per-hit cost the
    quiet calibration does not describe, and its unprobed reference slows unevenly."""
    errs, raws = [], []
    for i in range(3):
        (tmp_path / str(i)).mkdir()
        s, truth, _ = _run(target, monitor, tmp_path / str(i), simlib,
                           ("--py-iters", 400, "--sim-us", 200, "--ops", 10, "--op-size", 16),
                           "--duration", "5", "--max-overhead", "100", env={"RLSCOPE_CALIBRATION": calibration_file},
                           unprobed_s=1.5)
        raw, ours = _shares(s["raw"]), _shares(s["totals"])
        raws.append(max(abs(raw[c] - truth[c]) for c in CATS))
        errs.append(max(abs(ours[c] - truth[c]) for c in CATS))
        assert s["calls"]["backend"] > 80_000
    assert statistics.median(raws) > 0.03, (raws, errs)              # the probes' cost is visible ...
    # ... the correction takes most of it out on the Intel VMs (~6 -> ~1 pp), a third on the noisy
    # AMD EPYC VM (12.3 -> 8.0 pp in CI): at least a quarter
    assert statistics.median(errs) < statistics.median(raws) * 0.75, (raws, errs)
    # Each session but one: not made worse by more than 1 pp. On the AMD EPYC VM a session whose
    # raw error was small (the machine in its fast state: the probes cost less than calibrated)
    # came out over-corrected, 4.19 -> 4.27 and 4.67 -> 5.30 pp, in two whole-suite runs; the
    # median above still fell by 2.5x in both. On the Intel VM (CI, 2026-11-28) one session read
    # 1.5 -> 6.1 pp beside 6.7 -> 1.8 and 5.3 -> 2.0 (and failed its rerun too): the correction
    # took out about the usual ~4.7 pp, which points to the unprobed reference having moved (its
    # spans run before and after the session) more than the probes' cost. Like the median, this
    # lets one session of three be the yardstick's.
    worse = [(r, e) for e, r in zip(errs, raws) if e >= r + 0.01]
    assert len(worse) <= 1, (raws, errs)


def test_budget_switches_the_hot_set_and_sources_say_so(ebpf, target, monitor, tmp_path, simlib):
    s, _, m = _run(target, monitor, tmp_path, simlib, ("--py-us", 100, "--sim-us", 0, "--ops", 20, "--op-size", 4),
                   "--duration", "5", "--max-overhead", "1")
    assert s["budget"]["modes"].get("backend") in ("count", "off"), s["budget"]
    assert s["sources"]["backend_s"] == "estimated" and s["sources"]["python_s"] == "estimated"
    assert s["sources"]["simulator_s"] == "exact"
    assert "> budget 1%: backend" in m.stderr_text
    assert s["totals"]["backend_s"] > 0
    first = s["budget"]["steps"][0]       # priced in a 50 ms window right after attach, not at the
    assert first["category"] == "backend" and first["at_s"] < 0.6, s["budget"]   # first 0.5 s tick (>= 0.75 s)


def test_a_costly_set_is_priced_from_its_entries_before_its_exits_go_in(ebpf, target, monitor, tmp_path, simlib):
    """Every category starts counting, entries only (ProbeSet.count_first); the first window
    prices each entry hit at its whole bracket and steps the Backend straight to off. Over a
    session that ends before the first re-timing window (>= 1 s after the step), the torch exit
    probe never fires: the set never ran at full cost (it ran ~0.2 s so before)."""
    s, _, m = _run(target, monitor, tmp_path, simlib, ("--py-us", 100, "--sim-us", 0, "--ops", 20, "--op-size", 4),
                   "--duration", "0.7", "--max-overhead", "1")
    assert s["budget"]["modes"]["backend"] == "off", s["budget"]
    assert [x["mode"] for x in s["budget"]["steps"] if x["category"] == "backend"] == ["off"], s["budget"]
    assert s["budget"]["samples"]["backend"] == 0, s["budget"]
    hits = s["probes"]["hits"]
    assert hits["op begin"] > 100 and hits.get("op end", 0) == 0, hits
    assert "> budget 1%: backend" in m.stderr_text


@pytest.mark.quiet
def test_a_category_the_first_window_keeps_timed_is_timed_from_its_first_calls(ebpf, target, monitor, tmp_path,
                                                                               simlib):
    """The first window counts entries only; a category it keeps timed gets its exit probes
    then. Their programs are verified before t0 (ProbeSet._load_exits): verified at that point,
    ~85 ms each here, the calls until then had their time booked as Python, ~0.17 s of every
    default session (a SubprocVecEnv worker's Simulator read 2-4 pp low). A loop that is ~96%
    Simulator, over 2.5 s from attach: its Simulator share within 2.5 pp of its own timing (the
    first window itself, <= 30 ms, is still Python: ~1.2 pp; with the old loader, -3.0 and -3.1 pp)."""
    s, truth, _ = _run(target, monitor, tmp_path, simlib, ("--py-us", 200, "--sim-us", 5000, "--ops", 0),
                       "--duration", "2.5")
    assert not s["budget"]["modes"] and not s["estimates"], (s["budget"], s["estimates"])
    got = _shares(s["totals"])
    print(f"simulator share {100 * got['simulator']:.2f}% against {100 * truth['simulator']:.2f}%")
    assert abs(got["simulator"] - truth["simulator"]) <= 0.025, (got, truth, s["probes"]["program"])


@pytest.mark.quiet
def test_default_mode_gives_torch_the_time_it_blocks_in(ebpf, target, monitor, tmp_path, simlib, calibration_file,
                                                       monkeypatch):
    """torch with 4 intra-op threads on this 2-core VM and OpenMP's passive wait: the calling
    thread blocks in the barrier inside each op (~60% of Backend's time off CPU). With torch's
    probes off between windows that time was charged to Python and the estimate gave back too
    little of it: Python read 14.1% against a true 5.0% (waiting 0.79 s of 10), as rl-games'
    PPO read 8.4-9.0% waiting. Blocked time now goes by the category's share of the windows'
    off-CPU time (rlscope_top/account/estimates.py `_off_cpu`): 5.7 / 6.1% against 4.8 / 4.9%.
    Needs a quiet machine, as the off-mode test below: its truth is the unprobed cycles."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")       # read by libgomp as torch loads
    s, truth, m = _run(target, monitor, tmp_path, simlib,
                       ("--py-iters", 3000, "--sim-us", 200, "--ops", 20, "--op-size", 128, "--torch-threads", 4),
                       "--duration", "10", "--max-overhead", "1", env={"RLSCOPE_CALIBRATION": calibration_file},
                       unprobed_s=2.0)
    assert s["budget"]["modes"].get("backend") == "off", s["budget"]
    split = s["split"]["backend"]
    assert split["off_cpu_s"] > split["on_cpu_s"], split          # the op blocks more than it runs
    ours = _shares(s["totals"])
    print({c: (round(100 * ours[c], 1), round(100 * truth[c], 1)) for c in CATS}, s["job"]["critical_path"])
    bound = stated_bound_pp(s)
    for c in CATS:
        assert abs(ours[c] - truth[c]) <= max(0.03, (bound * TO_999 + 2) / 100), (c, ours, truth, s["estimates"])
    # the job line's waiting: the thread blocked outside every probed call, which this target never is
    assert s["job"]["critical_path"]["waiting_s"] < 0.02 * s["totals"]["wall_s"], s["job"]


@pytest.mark.quiet
def test_budget_off_mode_samples_and_estimates_stay_close(ebpf, target, monitor, tmp_path, simlib, calibration_file):
    """Needs a quiet machine, for two reasons seen in scripts/test-under-load.sh: at the 3% budget
    a target slowed by a busy loop per core makes calls slowly enough to stay timed (no off mode
    to test); at 1% it went off, and the estimate was 6.0 pp from a truth timed unprobed beside
    the same busy loops (the truth itself moves with them)."""
    s, truth, m = _run(target, monitor, tmp_path, simlib,
                       ("--py-iters", 400, "--sim-us", 200, "--ops", 10, "--op-size", 16),
                       "--duration", "14", "--max-overhead", "3", env={"RLSCOPE_CALIBRATION": calibration_file},
                       unprobed_s=2.0)
    assert s["budget"]["modes"]["backend"] == "off" and s["budget"]["samples"]["backend"] >= 1, s["budget"]
    assert s["sources"]["calls.backend"] == "estimated"
    ours = _shares(s["totals"])
    # estimated: the stated bound taken to 99.9% plus 2 pp for the boundary between torch's binding
    # and the Python around it (tests/test_ebpf_phased.py allows it 2 pp), at least 3 pp. Off by
    # 0.6-1.4 pp in 8 sessions on the AMD EPYC VM (bounds 0.7-0.8 pp). Before the tick's period
    # was drawn at random (probes/tick_jitter.py) 8 sessions read 0.6-8.0 pp: this loop (~236 us,
    # its simulator spinning for a fixed time) locked onto the 4 ms tick, whose ticks then met it
    # at one phase (docs/accuracy.md, "A tick in step with the loop"); it failed CI twice that way
    bound = stated_bound_pp(s)
    for c in CATS:
        assert abs(ours[c] - truth[c]) <= max(0.03, (bound * TO_999 + 2) / 100), (c, ours, truth, s["estimates"])
    print("overhead", s["overhead"], "budget", s["budget"], "sampler", s.get("sampler"))
    assert s["overhead"]["estimated_pct"] < 5, (s["overhead"], s["budget"])
