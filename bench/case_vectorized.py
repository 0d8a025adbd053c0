"""The data-collection case study (docs/case-studies/vectorized-simulation.md): collect CartPole
transitions four ways (bench/workloads/vec_collect.py: one gymnasium env, gymnasium's
SyncVectorEnv, EnvPool's C++ engine, gymnax's JAX CartPole under jit + vmap), each profiled by
attaching rlscope-top to the running process, and report the figures per environment step.

For each way and number of envs: one unprofiled run (its own wall time), then the same run with
`rlscope-top attach PID --headless --max-overhead 100` attached before the measured loop (every
probed call timed); the session ends when the workload exits.

usage: sudo .venv/bin/python bench/case_vectorized.py [--full] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from attached import PY, REPO, go_line, own_seconds, profiled, unprofiled
from docsection import generated_by, replace_section

HERE = os.path.dirname(os.path.abspath(__file__))
WL = os.path.join(HERE, "workloads", "vec_collect.py")
DOC = os.path.join(REPO, "docs", "case-studies", "vectorized-simulation.md")
DATA = os.path.join(REPO, "docs", "case-studies", "data")
WAYS = (("single", "one gymnasium env + torch"), ("gym-vec", "gymnasium SyncVectorEnv + torch"),
        ("envpool", "EnvPool (C++) + torch"), ("jax", "gymnax CartPole, jit + vmap (JAX)"))


def plan(full: bool) -> list[tuple[str, int, int]]:
    """(way, envs, transitions) cells: one env for `single`, 16 for the others (--full: 16, 64, 256)."""
    steps = 1_000_000 if full else 200_000
    sizes = (16, 64, 256) if full else (16,)
    return [(way, 1, steps // 4) if way == "single" else (way, n, steps) for way, _ in WAYS
            for n in ((1,) if way == "single" else sizes)]


def per_step(s: dict, steps: int, own_s: float) -> dict:
    """The study's figures from one summary, per environment step (us and counts)."""
    tot, tr, calls = s["totals"], s["transitions"], s["calls"]
    us = {c: 1e6 * (tot.get(f"{c}_s") or 0.0) / steps for c in ("python", "backend", "simulator")}
    return {"steps": steps, "profiled_us": 1e6 * own_s / steps, **{f"{c}_us": v for c, v in us.items()},
            "on_cpu_us": 1e6 * (tot.get("on_cpu_s") or 0.0) / steps,
            "off_cpu_us": 1e6 * (tot.get("off_cpu_s") or 0.0) / steps,
            "py_to_backend": (tr.get("python->backend") or 0) / steps, "backend_calls": (calls.get("backend") or 0) / steps,
            "simulator_source": s["sources"].get("simulator_s"),
            "native_cpu_us": 1e6 * sum(v or 0 for k, v in (s.get("job") or {}).get("cpu_s", {}).items()
                                       if k != "python") / steps}


def run(full: bool) -> list[dict]:
    """Every cell of the plan: unprofiled, then profiled; summaries go to docs/case-studies/data."""
    os.makedirs(DATA, exist_ok=True)
    rows = []
    for way, n, steps in plan(full):
        argv = [PY, WL, way, str(n), str(steps)]
        base = unprofiled(argv)
        with tempfile.TemporaryDirectory() as tmp:
            s, out = profiled(argv, go_line, os.path.join(tmp, "s.json"), ("--max-overhead", "100"))
        with open(os.path.join(DATA, f"vec-{way}-{n}.json"), "w") as f:
            json.dump(s, f, indent=1)
        done = int(out.split("steps")[1].split()[0])
        rows.append({"way": way, "envs": n, "unprofiled_us": 1e6 * base / done, **per_step(s, done, own_seconds(out))})
        print(f"{way} x{n}: {rows[-1]['unprofiled_us']:.1f} us/step unprofiled", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    """The results table, per environment step."""
    label = dict(WAYS)
    out = ["| way | envs | unprofiled us/step | profiled us/step | Python us | Backend us | Simulator us "
           "(source) | on-CPU us | off-CPU us | Python->Backend per step | backend calls per step | "
           "all threads' CPU outside Python us |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {label[r['way']]} | {r['envs']} | {r['unprofiled_us']:.2f} | {r['profiled_us']:.2f} | "
                   f"{r['python_us']:.2f} | {r['backend_us']:.2f} | {r['simulator_us']:.2f} ({r['simulator_source']}) | "
                   f"{r['on_cpu_us']:.2f} | {r['off_cpu_us']:.2f} | {r['py_to_backend']:.3f} | {r['backend_calls']:.3f} | "
                   f"{r['native_cpu_us']:.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="5x the transitions; 16, 64 and 256 envs")
    ap.add_argument("--write", action="store_true", help=f"write the table into {os.path.relpath(DOC, REPO)}")
    ap.add_argument("--from-json", action="store_true", help="no runs: the table of the last run (data/vec-runs.json)")
    args = ap.parse_args()
    if args.from_json:
        with open(os.path.join(DATA, "vec-runs.json")) as f:
            saved = json.load(f)
        args.full, rows = saved["full"], saved["rows"]
    else:
        rows = run(args.full)
    lines = table(rows)
    print("\n".join(lines))
    if not args.from_json:
        with open(os.path.join(DATA, "vec-runs.json"), "w") as f:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M"), "full": args.full, "rows": rows}, f, indent=1)
    if args.write:
        head = generated_by(f"bench/case_vectorized.py{' --full' if args.full else ''} --write",
                            "Exact mode (`--max-overhead 100`); figures per environment step.")
        replace_section(DOC, "## Results", [head, "", *lines])


if __name__ == "__main__":
    main()
