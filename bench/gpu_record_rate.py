"""How much the GPU agent costs the target per CUPTI record, at RL kernel rates, on a
machine without a GPU (issue: GPU kernel timing that keeps up with RL).

A stand-in libcupti (tests/native/fake_cupti.c) makes real CUpti_ActivityKernel13 and
CUpti_ActivityAPI records at a set rate inside a target process that has the real GPU
agent (probes/gpu_agent.c) loaded, and delivers full buffers from its own worker thread,
as CUPTI does. The real `rlscope-top attach` collects them: the agent's buffer callback
copies them into the shared region, the monitor decodes, joins and counts them. The
target-side cost is the time spent in the agent's callbacks per record (the agent
measures it); drops are every record that did not reach the totals.

usage: sudo .venv/bin/python bench/gpu_record_rate.py [--rate 200000] [--seconds 10] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "native"))

import standins  # noqa: E402

PY = sys.executable


def _wait_line(stream, needle: str, timeout: float, seen: list[str]) -> str:
    end = time.monotonic() + timeout
    for line in stream:
        seen.append(line)
        if needle in line:
            return line
        if time.monotonic() > end:
            break
    raise RuntimeError(f"{needle!r} not seen: {''.join(seen)[-1500:]}")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(rate: float, seconds: float, tmp: str, max_overhead: float = 100.0, tail_s: float = 1.0) -> dict:
    """One run at ``rate`` records/s for ``seconds``; returns the figures. With the default
    budget of 100% every record is traced; a lower one may turn tracing into windows. The
    monitor stops ``tail_s`` after the last kernel (windows estimate per second here, as
    the stand-in has no launch calls to count, so they should stop with the kernels)."""
    g = standins.build(tmp)
    go, summary = os.path.join(tmp, "go"), os.path.join(tmp, "rate.json")
    t = subprocess.Popen([PY, os.path.join(HERE, "workloads", "gpu_rate.py"), g["cuda"], g["cupti"], g["agent"],
                          str(rate), str(seconds), go], stdout=subprocess.PIPE, text=True)
    m = None
    try:
        pid = int(t.stdout.readline().split()[1])
        m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--summary", summary,
                              "--sample-hz", "0", "--max-overhead", str(max_overhead)], stderr=subprocess.PIPE, text=True, cwd=tmp,
                             env={**os.environ, "RLSCOPE_CUPTI_LIB": g["cupti"]})
        seen: list[str] = []
        _wait_line(m.stderr, "CUPTI activity on", 120, seen)
        cpu0 = _cpu_s(m.pid)
        open(go, "w").close()
        made = json.loads(t.stdout.readline())
        time.sleep(tail_s)                                 # one flush period and a tick
        cpu1 = _cpu_s(m.pid)
        m.send_signal(signal.SIGINT)
        m.communicate(timeout=120)
    finally:
        for p in (t, m):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    with open(summary) as f:
        s = json.load(f)
    gpu, agent = s["gpu"], s["gpu"]["agent"] or {}
    records = agent.get("records", 0)
    return {"summary": s, "rate_asked": rate, "rate_made": round(made["records"] / made["seconds"]), "seconds": made["seconds"],
            "records_made": made["records"], "kernels_made": made["kernels"], "kernels_counted": gpu["kernels"],
            "joined": s["operations"]["<all>"]["gpu"]["joined"], "records_in_ring": records,
            "agent_us_per_record": round(agent.get("callback_ns", 0) / records / 1e3, 4) if records else None,
            "lost": gpu["lost"], "complete": gpu["complete"],
            "monitor_cpu_pct": round(100 * (cpu1 - cpu0) / (made["seconds"] + tail_s), 1)}


def table(rows: list[dict]) -> list[str]:
    out = ["| records/s asked | made | records | kernels made / counted / joined | agent cost (us per record) "
           "| lost (ring full, CUPTI, undecodable, late) | monitor CPU (% of a core) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        lost = r["lost"] or {}
        out.append(f"| {r['rate_asked']:,.0f} | {r['rate_made']:,} | {r['records_made']:,} | "
                   f"{r['kernels_made']:,} / {r['kernels_counted']:,} / {r['joined']:,} | "
                   f"{r['agent_us_per_record']} | {lost.get('dropped_ring_full', 0)}, {lost.get('dropped_by_cupti', 0)}, "
                   f"{lost.get('undecodable', 0)}, {lost.get('late', 0)} | {r['monitor_cpu_pct']} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, action="append", help="records/s (repeatable; default 100k, 200k, 400k)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--write", action="store_true", help="write the table to docs/overhead.md")
    a = ap.parse_args()
    rows = []
    for rate in a.rate or [100_000, 200_000, 400_000]:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure(rate, a.seconds, tmp))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "summary"}), flush=True)
    lines = table(rows)
    print("\n".join(lines))
    if a.write:
        from docsection import replace_section  # noqa: PLC0415

        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## GPU agent: cost per CUPTI record", [
            "`sudo .venv/bin/python bench/gpu_record_rate.py --write` (no GPU needed): a stand-in libcupti makes "
            "real `CUpti_ActivityKernel13` and `CUpti_ActivityAPI` records at a set rate in a process with the real "
            "GPU agent, and delivers full 2 MB buffers from its own thread as CUPTI does; the real `rlscope-top "
            "attach` collects them. *Agent cost* is the time in the agent's buffer callback per record (it walks the "
            "buffer, interns kernel names, copies the records into the shared region); CUPTI's own cost per kernel "
            "(about 2 us on an H100) is not in it and needs a GPU to measure.", "", *lines])


if __name__ == "__main__":
    main()
