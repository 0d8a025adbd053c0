"""The coverage check's rule on hand-made threads (the eBPF known answer is
tests/test_ebpf_coverage.py): ticks by TICK_PLACES against the timed on-CPU split."""

from __future__ import annotations

from rlscope_top.account.session_figures import (COVERAGE_MIN_TICKS, coverage, coverage_text, openmp_text,
                                                 waiting_text)


def _th(py=60, be=40, sim=0, other=0, kernel=0):
    return {"ticks": [py, be, sim, 0, other, kernel, 0]}


def _split(py_s, be_s, sim_s=0.0):
    return {"python": {"on_cpu_s": py_s}, "backend": {"on_cpu_s": be_s}, "simulator": {"on_cpu_s": sim_s}}


def test_ticks_far_past_the_timed_share_flag_the_category():
    threads = [_th(py=130, be=120), _th(py=60, be=50)]     # 360 ticks, 170 in torch: 47.2%
    c = coverage(threads, _split(0.97, 0.03))               # timed 3%
    assert c["backend"] == {"ticks_pct": 47.22, "timed_pct": 3.0, "under_timed": True}
    (line,) = coverage_text({"coverage": c})
    assert line.startswith("CHECK backend: 47.2% of the Python threads' CPU ticks") and "timed 3.0%" in line


def test_within_the_gap_few_ticks_or_no_window_yet_say_nothing():
    threads = [_th(py=150, be=110)]                         # 42.3% of 260 ticks
    assert not coverage(threads, _split(0.7, 0.3))["backend"]["under_timed"]      # 12.3 pp: inside the 15
    assert coverage(threads, _split(0.73, 0.27))["backend"]["under_timed"]        # 15.3 pp
    few = [_th(py=COVERAGE_MIN_TICKS // 2, be=COVERAGE_MIN_TICKS // 2 - 1)]
    assert not coverage(few, _split(1.0, 0.0))["backend"]["under_timed"]
    assert not coverage(threads, _split(1.0, 0.0), frozenset({"backend"}))["backend"]["under_timed"]
    assert coverage([_th(py=300, be=0)], _split(1.0, 0.0)) == {}                  # no ticks there: no row
    assert coverage([{"ticks": None}], _split(1.0, 0.0)) == {}
    assert coverage_text({}) == []


def test_time_over_the_ticks_is_never_flagged():
    """Simulator time includes the Python of `simulation` operations: more than its ticks."""
    c = coverage([_th(py=200, be=20, sim=80)], _split(0.3, 0.1, 0.6))
    assert not c["simulator"]["under_timed"] and not c["backend"]["under_timed"]


def test_openmp_line_speaks_for_a_spinning_pool_only():
    """skrl's PPO: 9.75 s of 19.9 s in libgomp (tests/test_ebpf_threads.py holds the figure itself)."""
    cpu = {"python": 2.84, "backend": 6.06, "simulator": 1.24, "cuda_api": 0.0, "openmp": 9.75, "native": 0.0,
           "kernel": 0.03}
    (line,) = openmp_text({"job": {"cpu_s": cpu}})
    assert line.startswith("OPENMP:") and "9.8s" in line and "49%" in line and "set_num_threads(1)" in line
    assert openmp_text({"job": {"cpu_s": {**cpu, "openmp": 0.4}}}) == []        # under half a second
    assert openmp_text({"job": {"cpu_s": {**cpu, "backend": 120.0}}}) == []     # under a tenth of the CPU
    assert openmp_text({}) == [] and openmp_text({"job": {"cpu_s": {}}}) == []
    # no idle core (the monitor's CPU came out of the job): the self-report is said to read low
    assert "reads low" not in line
    (busy,) = openmp_text({"job": {"cpu_s": cpu}, "overhead": {"by_source_s": {"contention": 0.3}}})
    assert busy.startswith(line) and "overhead above reads low" in busy


def test_waiting_line_speaks_when_blocked_threads_are_most_of_the_python():
    """tianshou's DQN with 4 SubprocVectorEnv workers (10 s): the table's Python 46.6 s, of which
    its workers' wait for the learner is most (docs/accuracy.md, "tianshou's vector env")."""
    workers = [{"pid": 2 + i, "role": "env worker", "in_totals": True, "waiting_s": w}
               for i, w in enumerate((9.4, 9.8, 9.9, 9.8))]
    procs = [{"pid": 1, "role": "main", "in_totals": True, "waiting_s": 0.0}, *workers,
             {"pid": 9, "role": "resource tracker", "in_totals": False, "waiting_s": 10.3}]
    s = {"totals": {"python_s": 46.64}, "processes": procs,
         "job": {"critical_path": {"python_s": 7.31, "waiting_s": 38.9}}}
    (line,) = waiting_text(s)
    assert line.startswith("WAITING: 38.9s of the Python above (83%)") and "4 env workers 38.9s" in line, line
    assert "resource tracker" not in line and "Python at work was 7.3s" in line
    # half or more of the Python, else nothing (a data-starved trainer's own off-CPU column says it);
    # no Python figure (n/a), nothing
    assert waiting_text({**s, "job": {"critical_path": {"python_s": 23.0, "waiting_s": 23.0}}}) == []
    assert waiting_text({**s, "totals": {"python_s": None}}) == [] and waiting_text({}) == []
