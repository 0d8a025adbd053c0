"""The on-policy vs off-policy case study (docs/case-studies/on-off-policy.md): SB3 PPO, SAC and
TD3 on the same MuJoCo task, each profiled by attaching rlscope-top to the running process.

For each algorithm, in interleaved rounds: one unprofiled run of a fixed number of environment
steps (its own wall time), then the same run with `rlscope-top attach PID --headless` attached
before the measured `learn()` starts; the session ends when the process exits. The workload is
bench/workloads/sb3_train.py: plain stable-baselines3, no annotation; the operations come from
the stack sampler's built-in rules. Figures are per environment step.

usage: sudo .venv/bin/python bench/case_onoff_policy.py [--full] [--repeats 1] [--mode exact|default]
                                                        [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from attached import PY, REPO, go_line, own_seconds, profiled, unprofiled
from docsection import generated_by, replace_section

HERE = os.path.dirname(os.path.abspath(__file__))
WL = os.path.join(HERE, "workloads", "sb3_train.py")
DOC = os.path.join(REPO, "docs", "case-studies", "on-off-policy.md")
DATA = os.path.join(REPO, "docs", "case-studies", "data")
ENV = "InvertedPendulum-v5"
STEPS = {"ppo": (8192, 65536), "sac": (1500, 12000), "td3": (1500, 12000)}     # (short, --full)
ON_POLICY = ("ppo",)
CATS = ("python", "backend", "simulator")


def figures(s: dict, steps: int) -> dict:
    """What the study reports from one summary: shares, per-step times and transitions,
    on/off-CPU, and the sampled operations' shares."""
    tot = s["totals"]
    cat_s = {c: tot.get(f"{c}_s") or 0.0 for c in CATS}
    whole = sum(cat_s.values())
    ops = {n: o["share"] for n, o in s["operations"].items() if n != "<all>"}
    return {"steps": steps, "wall_s": tot["wall_s"],
            "shares": {c: cat_s[c] / whole for c in CATS},
            "ms_per_step": {c: 1e3 * cat_s[c] / steps for c in CATS},
            "on_cpu_s": tot.get("on_cpu_s"), "off_cpu_s": tot.get("off_cpu_s"),
            "py_to_backend_per_step": (s["transitions"].get("python->backend") or 0) / steps,
            "py_to_sim_per_step": (s["transitions"].get("python->simulator") or 0) / steps,
            "operations": ops, "sources": {c: s["sources"].get(f"{c}_s") for c in CATS},
            "overhead_pct": s["overhead"]["estimated_pct"], "modes": s["budget"]["modes"]}


def run(full: bool, repeats: int, mode: str) -> dict:
    """Every algorithm, ``repeats`` interleaved rounds; the median profiled run's summary is kept."""
    extra = ("--max-overhead", "100") if mode == "exact" else ()
    res: dict = {a: {"unprofiled_s": [], "profiled_s": [], "runs": []} for a in STEPS}
    os.makedirs(DATA, exist_ok=True)
    for k in range(repeats):
        for algo, (short, long_) in STEPS.items():
            steps = long_ if full else short
            argv = [PY, WL, algo, ENV, str(steps)]
            res[algo]["unprofiled_s"].append(unprofiled(argv))
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "s.json")
                s, out = profiled(argv, go_line, path, extra)
            res[algo]["profiled_s"].append(own_seconds(out))
            res[algo]["runs"].append((s, figures(s, steps)))
            print(f"round {k} {algo}: {steps} steps, unprofiled {res[algo]['unprofiled_s'][-1]:.2f} s, "
                  f"profiled {res[algo]['profiled_s'][-1]:.2f} s", file=sys.stderr, flush=True)
    for algo, r in res.items():
        i = sorted(range(repeats), key=lambda j: r["profiled_s"][j])[repeats // 2]
        summary, r["figures"] = r.pop("runs")[i]
        with open(os.path.join(DATA, f"onoff-{algo}.json"), "w") as f:
            json.dump(summary, f, indent=1)
        r["median_unprofiled_s"] = statistics.median(r["unprofiled_s"])
    return res


def table(res: dict) -> list[str]:
    """The results table, a row per algorithm, and the on/off-policy simulation ratio."""
    rows = ["| algorithm | kind | env steps | unprofiled s | Python % | Backend % | Simulator % | "
            "Simulator ms/step | Backend ms/step | Python->Backend per step | Python->Simulator per step | "
            "off-CPU s | top sampled operations |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for algo, r in res.items():
        f = r["figures"]
        sh, ms = f["shares"], f["ms_per_step"]
        ops = ", ".join(f"{n} {100 * v:.0f}%" for n, v in sorted(f["operations"].items(), key=lambda x: -x[1])[:3])
        rows.append(f"| {algo.upper()} | {'on-policy' if algo in ON_POLICY else 'off-policy'} | {f['steps']:,} | "
                    f"{r['median_unprofiled_s']:.2f} | {100 * sh['python']:.1f} | {100 * sh['backend']:.1f} | "
                    f"{100 * sh['simulator']:.1f} | {ms['simulator']:.3f} | {ms['backend']:.3f} | "
                    f"{f['py_to_backend_per_step']:.0f} | {f['py_to_sim_per_step']:.2f} | {f['off_cpu_s']:.2f} | {ops} |")
    on = statistics.mean(res[a]["figures"]["shares"]["simulator"] for a in res if a in ON_POLICY)
    off = [res[a]["figures"]["shares"]["simulator"] for a in res if a not in ON_POLICY]
    ratios = ", ".join(f"{a.upper()} {on / res[a]['figures']['shares']['simulator']:.1f}x"
                       for a in res if a not in ON_POLICY and res[a]["figures"]["shares"]["simulator"])
    rows += ["", f"Simulator share, on-policy over off-policy: {ratios} (mean off-policy share "
                 f"{100 * statistics.mean(off):.1f}%, PPO {100 * on:.1f}%). RL-Scope: at least 3.5x."]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="8x the environment steps")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds; the median is kept")
    ap.add_argument("--mode", choices=("exact", "default"), default="exact",
                    help="exact: --max-overhead 100, every call timed; default: the 5%% budget")
    ap.add_argument("--write", action="store_true", help=f"write the table into {os.path.relpath(DOC, REPO)}")
    args = ap.parse_args()
    res = run(args.full, args.repeats, args.mode)
    rows = table(res)
    print("\n".join(rows))
    with open(os.path.join(DATA, "onoff-runs.json"), "w") as f:
        json.dump({"when": time.strftime("%Y-%m-%d %H:%M"), "mode": args.mode, "full": args.full,
                   "env": ENV, "results": res}, f, indent=1)
    if args.write:
        head = generated_by(f"bench/case_onoff_policy.py{' --full' if args.full else ''} --repeats {args.repeats} "
                            f"--mode {args.mode} --write")
        replace_section(DOC, "## Results", [head, "", *rows])


if __name__ == "__main__":
    main()
