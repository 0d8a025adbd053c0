"""nvidia-smi (NVML) utilization against the CUPTI GPU-bound share, over kernel size x launch gap.

The sweep of the case study docs/case-studies/gpu-utilization.md.

Each cell runs bench/workloads/gpu_sweep.py (bursts of 3 float32 N x N matmuls, a
synchronize, then GAP ms of Python busy-waiting) and attaches

    rlscope-top attach PID --gpu-activity --headless --max-overhead 100 --summary FILE

before its loop starts; the session ends when the loop does. From each summary it reads
NVML's utilization.gpu (what nvidia-smi shows), GPM SM activity (Hopper and newer) and the
CUPTI GPU-bound % (the union of kernel, memcpy and memset time over wall time), and prints
one Markdown table. Without a GPU it says why in one line and exits 2.

usage: sudo .venv/bin/python bench/case_gpu_util.py [--full] [--write]
"""

from __future__ import annotations

import argparse
import ctypes.util
import dataclasses
import functools
import json
import os
import platform
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from docsection import replace_section

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
RLS = [PY, "-m", "rlscope_top.cli"]
WORKLOAD = os.path.join(HERE, "workloads", "gpu_sweep.py")
AGENT = os.path.join(REPO, "probes", "librlscope_gpu.so")
DOC = os.path.join(REPO, "docs", "case-studies", "gpu-utilization.md")
DATA = os.path.join(REPO, "docs", "case-studies", "data")
SWEEP_JSON = "gpu-util-sweep.json"
SECTION = "## Our numbers: the sweep"
DATA_RE = re.compile(r"^gpu-util-\d+-[0-9.]+ms\.json$")     # the per-cell summaries this script writes
READY_TIMEOUT_S = 180            # import torch, CUDA context, cuBLAS warm-up
ATTACH_TIMEOUT_S = 180           # the BPF program compiles first (tens of seconds on a small machine)
HOW = "docs/case-studies/gpu-utilization.md has the rows measured on an H100 by others"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One point of the sweep: matmul size, Python gap after each burst, loop length."""

    n: int
    gap_ms: float
    seconds: float


QUICK = {"sizes": (64, 512, 2048), "gaps_ms": (0.0, 0.1, 1.0, 2.0), "seconds": 4.0}
FULL = {"sizes": (16, 64, 256, 512, 1024, 2048, 4096), "gaps_ms": (0.0, 0.01, 0.1, 1.0, 2.0, 10.0),
        "seconds": 15.0}


class CellError(Exception):
    """A cell that could not be measured (the sweep goes on without it)."""


# -- the plan --------------------------------------------------------------------
def plan(full: bool = False, sizes=None, gaps_ms=None, seconds: float | None = None) -> list[Cell]:
    """The cells to run, every size with every gap.

    Args:
        full: the longer sweep (more sizes and gaps, 15 s a cell instead of 4 s).
        sizes: matmul sizes instead of the plan's.
        gaps_ms: gaps in ms instead of the plan's.
        seconds: loop length of a cell instead of the plan's.

    Returns:
        The cells, by size then gap.
    """
    p = FULL if full else QUICK
    secs = seconds or p["seconds"]
    return [Cell(n, float(g), secs) for n in (sizes or p["sizes"]) for g in (gaps_ms or p["gaps_ms"])]


def gap_label(gap_ms: float) -> str:
    """'0ms', '0.1ms', '2ms': the gap as file names and the table spell it."""
    return f"{gap_ms:g}ms"


def data_name(cell: Cell) -> str:
    """The file name of a cell's summary in docs/case-studies/data."""
    return f"gpu-util-{cell.n}-{gap_label(cell.gap_ms)}.json"


# -- can it run here? ------------------------------------------------------------
def driver_present() -> bool:
    """Whether an NVIDIA driver library (libcuda.so.1) is installed, as the GPU source checks it."""
    return ctypes.util.find_library("cuda") is not None


@functools.lru_cache(maxsize=None)
def torch_probe(py: str = PY) -> dict:
    """What torch in the workload's Python says: version, CUDA build, whether it sees a GPU.

    In a child process, so this script never holds a CUDA context itself.
    """
    code = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
            "'available': torch.cuda.is_available()}))")
    try:
        p = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": type(e).__name__}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def why_no_gpu(py: str = PY) -> str | None:
    """One line saying why this machine cannot run the sweep, or None when it can."""
    if not driver_present():
        return ("no NVIDIA driver on this machine (libcuda.so.1 not found): this study needs an NVIDIA GPU "
                f"with its driver and a CUDA build of torch; {HOW}")
    p = torch_probe(py)
    if "error" in p:
        return f"torch cannot be imported by {py} ({p['error']}): install torch with CUDA; {HOW}"
    if not p["available"]:
        build = f"CUDA {p['cuda']}" if p["cuda"] else "a CPU-only build"
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        hide = f", CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else ""
        return f"torch {p['torch']} ({build}{hide}) sees no CUDA GPU: this study needs one; {HOW}"
    return None


def why_not_runnable(py: str = PY) -> str | None:
    """The first thing missing for the sweep (GPU, GPU agent, root), as one line; None if nothing."""
    why = why_no_gpu(py)
    if why:
        return why
    if not os.path.isfile(AGENT):
        return "the GPU agent is not built (probes/librlscope_gpu.so): run `sudo bash scripts/setup.sh`"
    if os.geteuid() != 0:
        return "rlscope-top attaches eBPF probes, which needs root: run with sudo"
    return None


# -- one cell --------------------------------------------------------------------
def _stop(p: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """End a child we started: ``sig`` first (rlscope-top detaches cleanly on SIGINT), then kill."""
    if p.poll() is not None:
        return
    p.send_signal(sig)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _last_line(path: str) -> str:
    with open(path, errors="replace") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _wait_ready(wl: subprocess.Popen, log: str) -> None:
    """Until the workload has warmed up and printed `ready PID`."""
    end, fd, buf = time.monotonic() + READY_TIMEOUT_S, wl.stdout.fileno(), b""
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.5)[0]:      # raw reads: a text buffer would hide a waiting line
            chunk = os.read(fd, 4096)
            if not chunk:
                raise CellError(f"the workload exited before its loop: {_last_line(log)}")
            buf += chunk
            if b"ready" in buf:
                return
    raise CellError(f"the workload was not ready in {READY_TIMEOUT_S} s")


def _wait_attached(mon: subprocess.Popen, log: str) -> None:
    """Until rlscope-top says it is attached (its probes are in, the GPU agent traces)."""
    end = time.monotonic() + ATTACH_TIMEOUT_S
    while time.monotonic() < end:
        with open(log, errors="replace") as f:
            if "attached to PID" in f.read():
                return
        if mon.poll() is not None:
            raise CellError(f"rlscope-top exited {mon.returncode} before attaching: {_last_line(log)}")
        time.sleep(0.05)
    raise CellError(f"rlscope-top did not attach in {ATTACH_TIMEOUT_S} s")


def run_cell(cell: Cell, summary: str, tmp: str) -> dict:
    """Run one cell: the workload, rlscope-top attached before its loop, the session ending with it.

    Args:
        cell: what to run.
        summary: where rlscope-top writes the session's summary JSON.
        tmp: a scratch directory.

    Returns:
        The workload's own JSON line (its matmul count and loop time).

    Raises:
        CellError: the workload or rlscope-top failed; the message says how.
    """
    go, wlog, mlog = (os.path.join(tmp, f) for f in ("go", "workload.log", "monitor.log"))
    if os.path.exists(go):
        os.remove(go)
    with open(wlog, "w") as werr:
        wl = subprocess.Popen([PY, WORKLOAD, str(cell.n), str(cell.gap_ms), str(cell.seconds), "--go", go],
                              cwd=tmp, stdout=subprocess.PIPE, stderr=werr, text=True)
    mon = None
    try:
        _wait_ready(wl, wlog)
        with open(mlog, "w") as merr:
            mon = subprocess.Popen([*RLS, "attach", str(wl.pid), "--gpu-activity", "--headless",
                                    "--max-overhead", "100", "--summary", summary], cwd=REPO,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=merr)
        _wait_attached(mon, mlog)
        open(go, "w").close()
        out, _ = wl.communicate(timeout=cell.seconds + 120)
        if mon.wait(timeout=120):
            raise CellError(f"rlscope-top exited {mon.returncode}: {_last_line(mlog)}")
    finally:   # the workload on SIGTERM: a child started from a background shell ignores SIGINT (30 s wait)
        _stop(wl, signal.SIGTERM)
        if mon is not None:
            _stop(mon)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise CellError(f"the workload printed no result: {_last_line(wlog)}")
    return json.loads(lines[-1])


# -- figures from a summary -------------------------------------------------------
def ratio(util: float | None, bound: float | None) -> float | None:
    """NVML utilization over GPU-bound %, as the summary's contrast computes it (None when unknown)."""
    return round(util / bound, 2) if util is not None and bound else None


def _device(gpu: dict) -> dict | None:
    """The NVML device our kernels ran on: the most GPU-bound one (others of the machine are idle)."""
    devs = list(((gpu.get("nvml") or {}).get("devices") or {}).values())
    if not devs:
        return None
    return max(devs, key=lambda d: (d.get("gpu_bound_pct") or -1.0, d.get("util_pct") or -1.0))


def _share(part: float | None, whole: float | None) -> float | None:
    return round(100 * part / whole, 3) if part is not None and whole else None


def excess_us(util: float | None, bound: float | None, wall_s: float | None, kernels: int | None) -> float | None:
    """NVML's utilization beyond the GPU-bound share, as microseconds per kernel (negative: below it).

    Roughly constant over the sweep would mean NVML counts a fixed time per kernel that CUPTI's
    start-to-end interval does not; see the case study.
    """
    if util is None or bound is None or not wall_s or not kernels:
        return None
    return round((util - bound) / 100 * wall_s / kernels * 1e6, 3)


def figures(summary: dict) -> dict:
    """The figures of one cell, read from an rlscope-top summary (docs/summary-schema.md).

    Args:
        summary: the summary document of the cell's session.

    Returns:
        NVML utilization (`gpu.nvml.devices[id].util_pct`), GPM SM activity (`sm_active_pct`),
        the CUPTI GPU-bound % of that device (`gpu_bound_pct`, else `gpu.busy_pct`), their ratio,
        kernel rate and mean duration (`operations["<all>"].gpu`), and what qualifies them
        (tracing mode, completeness, notices, CPU-side shares). None where the summary has none.
    """
    g = summary.get("gpu") or {}
    dev = _device(g) or {}
    util = dev.get("util_pct") if dev else (g.get("contrast") or {}).get("nvml_util_pct")
    bound = dev.get("gpu_bound_pct")
    bound = g.get("busy_pct") if bound is None else bound
    op = ((summary.get("operations") or {}).get("<all>") or {}).get("gpu") or {}
    tot = summary.get("totals") or {}
    return {"kernels": g.get("kernels"), "kernels_per_s": op.get("launches_per_s"),
            "mean_kernel_us": op.get("mean_kernel_us"), "nvml_util_pct": util,
            "sm_active_pct": dev.get("sm_active_pct"), "gpu_bound_pct": bound, "ratio": ratio(util, bound),
            "gpu_mode": g.get("mode"), "gpu_complete": g.get("complete"), "gpu_name": dev.get("name"),
            "nvml_samples": dev.get("samples"), "nvml_period_ms": dev.get("period_ms"),
            "sync_blocked_pct": (g.get("cuda_api") or {}).get("sync_blocked_pct"),
            "python_pct": _share(tot.get("python_s"), tot.get("wall_s")),
            "cuda_api_pct": _share(tot.get("cuda_api_s"), tot.get("wall_s")), "wall_s": tot.get("wall_s"),
            "excess_us_per_kernel": excess_us(util, bound, tot.get("wall_s"), g.get("kernels")),
            "notices": [n for n in (g.get("notice"), (g.get("nvml") or {}).get("notice")) if n]}


# -- the table -------------------------------------------------------------------
HEADER = ["| matmul N | gap | kernels/s | mean kernel | NVML util | GPM SM active | GPU-bound (CUPTI) "
          "| NVML / GPU-bound | NVML excess per kernel |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if v is None else format(v, spec) + suffix


def _row(r: dict) -> str:
    bound = _fmt(r.get("gpu_bound_pct"), ".2f", "%")
    if r.get("gpu_mode") == "windowed" and r.get("gpu_bound_pct") is not None:
        bound += " (est.)"                      # the budget windowed the tracing: estimates between windows
    cols = [str(r["n"]), f"{r['gap_ms']:g} ms", _fmt(r.get("kernels_per_s"), ",.0f"),
            _fmt(r.get("mean_kernel_us"), ".1f", " us"), _fmt(r.get("nvml_util_pct"), ".2f", "%"),
            _fmt(r.get("sm_active_pct"), ".2f", "%"), bound, _fmt(r.get("ratio"), ".2f", "x"),
            _fmt(r.get("excess_us_per_kernel"), ".2f", " us")]
    return "| " + " | ".join(cols) + " |"


def _notes(rows: list[dict]) -> list[str]:
    """What qualifies the table: failed cells, kernels CUPTI missed, what was unavailable."""
    out: list[str] = []
    for r in rows:
        where = f"N={r['n']}, gap {r['gap_ms']:g} ms"
        if r.get("error"):
            out.append(f"- {where}: not measured: {r['error']}")
        made = (r.get("workload") or {}).get("matmuls")
        if r.get("kernels") is not None and made and r["kernels"] < made:
            out.append(f"- {where}: CUPTI counted {r['kernels']} kernels for {made} matmuls: kernels were missed, "
                       "so its GPU-bound % is too low")
        out += [f"- {n}" for n in r.get("notices") or () if f"- {n}" not in out]
    return out


def render(rows: list[dict]) -> list[str]:
    """The Markdown table of the sweep, then notes; `n/a` where a figure is not available.

    Args:
        rows: one dict a cell: `n`, `gap_ms` and the keys of :func:`figures` (or `error`).

    Returns:
        The lines of the table (and of the notes, when there are any).
    """
    notes = _notes(rows)
    return [*HEADER, *(_row(r) for r in rows), *([""] + notes if notes else [])]


# -- the sweep and what it writes ----------------------------------------------------
def _sh(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode:
        return None
    return "; ".join(ln.strip() for ln in p.stdout.splitlines() if ln.strip()) or None


def versions() -> dict:
    """GPU and driver (nvidia-smi), torch and its CUDA, Python, and the project's commit."""
    t = torch_probe(PY)
    return {"gpu_driver": _sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]),
            "torch": t.get("torch"), "cuda": t.get("cuda"), "python": platform.python_version(),
            "rlscope_top_commit": _sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
            "date": time.strftime("%Y-%m-%d")}


def measure(cell: Cell, tmp: str) -> dict:
    """One row of the table: the cell, its figures, the workload's own counts (or the error)."""
    row: dict = {"n": cell.n, "gap_ms": cell.gap_ms, "seconds": cell.seconds, "summary": data_name(cell)}
    path = os.path.join(tmp, data_name(cell))
    try:
        row["workload"] = run_cell(cell, path, tmp)
        with open(path) as f:
            row.update(figures(json.load(f)))
    except (CellError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    return row


def write(rows: list[dict], vers: dict, cells: list[Cell], tmp: str, full: bool) -> None:
    """The summaries and the rows into docs/case-studies/data, the table into the document."""
    os.makedirs(DATA, exist_ok=True)
    for name in os.listdir(DATA):              # stale cells of an earlier sweep would not match the table
        if DATA_RE.match(name):
            os.remove(os.path.join(DATA, name))
    for r in rows:
        src = os.path.join(tmp, r["summary"])
        if os.path.exists(src) and not r.get("error"):
            shutil.copyfile(src, os.path.join(DATA, r["summary"]))
    with open(os.path.join(DATA, SWEEP_JSON), "w") as f:
        json.dump({"versions": vers, "full": full, "cells": [dataclasses.asdict(c) for c in cells], "rows": rows},
                  f, indent=2)
    replace_section(DOC, SECTION, section_lines(rows, vers, full))


def section_lines(rows: list[dict], vers: dict, full: bool) -> list[str]:
    """The document's sweep section: how and where it was measured, then the table."""
    cmd = vers.get("command") or ("sudo .venv/bin/python bench/case_gpu_util.py" + (" --full" if full else "")
                                  + " --write")
    secs = rows[0]["seconds"] if rows else 0
    return [f"Measured with `{cmd}` on {vers.get('date')}: {vers.get('gpu_driver') or 'GPU unknown'} "
            f"(name, driver), torch {vers.get('torch')} (CUDA {vers.get('cuda')}), Python {vers.get('python')}, "
            f"rlscope-top at {vers.get('rlscope_top_commit')}; {secs:g} s a cell, 3 matmuls a burst.", "",
            *render(rows), "",
            f"Every cell's summary is `docs/case-studies/data/gpu-util-N-GAPms.json`; "
            f"`docs/case-studies/data/{SWEEP_JSON}` has the rows with the workload's own counts."]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="7 sizes x 6 gaps, 15 s a cell (about 20 minutes, estimated)")
    ap.add_argument("--write", action="store_true",
                    help="write the table into docs/case-studies/gpu-utilization.md and the summaries "
                         "into docs/case-studies/data")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="matmul sizes, e.g. 64,2048")
    ap.add_argument("--gaps", type=lambda s: [float(x) for x in s.split(",")], help="gaps in ms, e.g. 0,2")
    ap.add_argument("--seconds", type=float, help="loop length of a cell")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print its table; 2 (and one line) when this machine cannot run it."""
    a = _parse(argv)
    why = why_not_runnable()
    if why:
        print(f"case_gpu_util: cannot run: {why}", file=sys.stderr)
        return 2
    cells = plan(a.full, a.sizes, a.gaps, a.seconds)
    vers = versions()
    args = sys.argv[1:] if argv is None else argv
    vers["command"] = " ".join(["sudo .venv/bin/python bench/case_gpu_util.py", *args])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in cells:
            rows.append(measure(c, tmp))
            print(_row(rows[-1]), file=sys.stderr, flush=True)
        print("\n".join(render(rows)))
        if a.write:
            write(rows, vers, cells, tmp, a.full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
