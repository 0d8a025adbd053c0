"""bench/estimate_vs_ticks.py: which thread a session is read on, and how its misses are counted."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from estimate_vs_ticks import session_row, table  # noqa: E402


def _summary(backend_s: float, tick_share: float, closed: int = 0) -> dict:
    return {"threads": [{"tid": 7, "python_thread": False, "on_cpu_s": 30.0, "backend_s": 0.0, "where": {"backend": 1.0}},
                        {"tid": 5, "python_thread": True, "on_cpu_s": 20.0, "off_cpu_s": 0.25, "backend_s": backend_s,
                         "where": {"python": 1 - tick_share, "backend": tick_share}},
                        {"tid": 6, "python_thread": True, "on_cpu_s": 1.0, "backend_s": 1.0, "where": {"backend": 0.0}}],
            "probes": {"closed_at_step": closed, "missed_switch_ins": 23}, "budget": {"modes": {"backend": "off"}}}


def test_the_busiest_python_thread_is_read_not_a_native_one():
    r = session_row(_summary(13.0, 0.64))
    assert r["tid"] == 5 and abs(r["diff_pp"] - 1.0) < 1e-9, r


def test_a_session_past_5_pp_is_counted_and_named():
    rows = [session_row(_summary(b, 0.64, c)) for b, c in ((13.0, 0), (14.6, 1), (12.6, 0))]
    line = table("zoo", rows)[-1]
    assert "| 3 | -1.0 / +1.0 / +9.0 | 1 (+9.0 (off-CPU 0.25 s)) | 0.25 | 1 | 23 (median) |" in line, line
