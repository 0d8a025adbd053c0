"""The snapshot summary: a stable JSON document (docs/summary-schema.md) and its table."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import tempfile

from ..account import frameworks as FW
from ..account import processes as P
from . import gpu_summary
from .console import text_console
from ..account.accounting import Accounting
from ..account.gpu_figures import GpuView, ranges_stopped
from ..account.session_figures import coverage_text, figures, openmp_text, waiting_text
from ..ring.records import pid_label
from ..errors import UnsafePath
from ..safe_files import root_only_dir, write_output
from ..vocab import ALL_OP, CATEGORIES, NA, NA_TEXT, STEAL_SHOWN_PCT, fmt

SCHEMA = "rlscope-top.summary/1"
MAX_PROCESS_ROWS = 12     # the printed processes table; the rest of the exited ones fold into a row


def build(acct: Accounting, gpu: GpuView | None = None, *, ring_path: str = "", dropped: int = 0,
          detach_s: float | None = None) -> dict:
    """Build the summary document.

    Args:
        acct: the CPU accounting.
        gpu: its peer, the GPU accounting fed the same records (None: no GPU records).
        ring_path: the ring the records came from (kept with --keep-ring), or "".
        dropped: records the reader lost to a lapped ring.
        detach_s: how long the detach took, when it is over.
    """
    doc = {"schema": SCHEMA, **figures(acct, gpu)}
    doc["ring"] = {"path": ring_path, "dropped": dropped}
    if detach_s is not None:
        doc["overhead"]["detach_s"] = round(detach_s, 3)
    return doc


def default_path(pid: int) -> str:
    """rlscope-top-<pid>-<time>.json in the current directory (the temp directory when the
    current one is not writable)."""
    name = f"rlscope-top-{pid}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    return name if os.access(".", os.W_OK) else os.path.join(tempfile.gettempdir(), name)


def path_problem(path: str) -> str | None:
    """Why a summary cannot be written at ``path`` (None when it can)."""
    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a directory"
    if not os.path.isdir(d):
        return f"no directory {d}"
    try:                          # really create a file there: access() says yes to root on /proc
        fd, probe = tempfile.mkstemp(dir=d, prefix=".rlscope-top-probe-")
    except OSError as e:
        return f"{d} is not writable ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    if os.path.islink(path) and not root_only_dir(d):
        return "it is a symlink"
    if os.path.exists(path) and stat.S_ISBLK(os.stat(path).st_mode):
        return "it is a block device"
    return None


def table_console(path: str | None):
    """Where the printed summary goes: stderr when the JSON itself goes to our stdout
    (`--summary /dev/stdout | jq` reads one document), else stdout."""
    try:
        to_stdout = path is not None and os.path.samestat(os.stat(path), os.fstat(1))
    except OSError:
        to_stdout = False
    return text_console(stderr=to_stdout)


def incomplete(summary: dict) -> str | None:
    """What a summary lacks that every session has (its pid, its window), if anything."""
    w = summary.get("window") or {}
    if not summary.get("pid"):
        return "its pid"
    t0, t1 = w.get("t0_monotonic_ns"), w.get("t1_monotonic_ns")
    if not t0 or not t1 or t1 < t0:
        return "its window"
    return None


def write_safely(summary: dict, path: str, pid: int) -> tuple[str, str | None]:
    """Write the summary; if ``path`` fails (disk full, directory gone), write it to the
    temp directory instead, so a session's data is never lost.

    Returns:
        (the path written, why ``path`` failed or None).
    """
    try:
        write(summary, path)
        return path, None
    except (OSError, UnsafePath) as e:    # a fresh, unguessable name (mkstemp), never a fixed one in /tmp
        fd, alt = tempfile.mkstemp(prefix=f"rlscope-top-{pid}-", suffix=".json")
        os.close(fd)
        write(summary, alt)
        return alt, f"{path}: {getattr(e, 'strerror', None) or e}"


def write(summary: dict, path: str) -> None:
    """Write the summary atomically, 0600 (it holds the target's command line), through a
    random temp name: a crash never leaves half a file and a planted symlink is not followed."""
    write_output(path, json.dumps(summary, indent=2) + "\n")


def _fmt(v, unit: str = "s") -> str:
    return fmt(v, ",.3f", unit) if isinstance(v, float) else fmt(v, ",")


def render(summary: dict, console: Console | None = None) -> None:
    """Print the summary as rich tables."""
    from rich.table import Table  # noqa: PLC0415 - rich only when printing: off the attach's path

    console = console or text_console()
    t = summary["totals"]
    head = (f"rlscope-top summary  pid {summary['pid']}  {summary['duration_s']:.1f}s  "
            f"({summary['end_reason'] or 'running'})")
    table = Table(title=head, title_justify="left", show_edge=False)
    for col in ("category", "time", "share", "on-CPU", "off-CPU", "calls", "source"):
        table.add_column(col, justify="left" if col in ("category", "source") else "right")
    for c in CATEGORIES:
        v = t.get(f"{c}_s")
        sp = summary["split"].get(c, {})
        share = summary["shares"].get(c)
        table.add_row(c.replace("_", " "), _fmt(v),
                      NA_TEXT if share is None or v is None else f"{100 * share:5.1f}%",
                      _fmt(sp.get("on_cpu_s")), _fmt(sp.get("off_cpu_s")),
                      _calls_cell(summary, c) if c != "python" else "",
                      _source_cell(summary, c))
    table.add_row("gpu", _fmt(t["gpu_s"]), "", "", "", "", summary["sources"]["gpu_s"])
    console.print(table)
    gpu_summary.render(summary, console)
    tr = "  ".join(f"{k} {_fmt(v)}" for k, v in summary["transitions"].items())
    console.print(f"transitions  {tr}", soft_wrap=True)
    oh = summary["overhead"]
    pct = oh["estimated_pct"]
    console.print(f"probe hits {oh['probe_hits']:,}  estimated overhead {oh['estimated_s']:.3f}s"
                  f" ({'n/a' if pct is None else f'{pct:.2f}%'} of wall time){_over_budget(summary)}{_raised(oh)}  ring drops {summary['ring']['dropped']}",
                  soft_wrap=True)
    for line in coverage_text(summary) + openmp_text(summary) + waiting_text(summary):
        console.print(line, soft_wrap=True)
    if steal := steal_text(summary):
        console.print(steal, soft_wrap=True)
    _render_job(summary, console)
    fw_line = FW.render_line(summary)
    if fw_line:
        console.print(fw_line, soft_wrap=True)
    _render_operations(summary, console)
    _render_processes(summary, console)
    if summary["ranges"]:
        top = sorted(summary["ranges"].items(), key=lambda kv: -kv[1]["total_s"])[:5]
        stopped = ranges_stopped(summary)
        until = f"  (until {stopped:.1f} s: stopped by the budget)" if stopped is not None else ""
        lost = summary["probes"].get("dropped_events") or 0
        until += f"  ({lost:,} events lost: the monitor fell behind; counts are low)" if lost else ""
        console.print("ranges  " + "  ".join(f"{n} x{r['count']} {r['total_s']:.3f}s" for n, r in top) + until,
                      soft_wrap=True)


def steal_text(summary: dict) -> str | None:
    """One line when the hypervisor took a noticeable share of the CPUs (``machine.steal_pct``),
    or None."""
    pct = (summary.get("machine") or {}).get("steal_pct")
    if pct is None or pct < STEAL_SHOWN_PCT:
        return None
    return (f"host steal {pct:.1f}% of the CPUs' time: the hypervisor ran other guests while this VM had work; "
            "on-CPU times include what it took")


def _calls_cell(summary: dict, c: str) -> str:
    """A category's calls, with the bound of the part the budget estimated (as a share of
    all its calls) where there is one."""
    return calls_text(summary["calls"].get(c), (summary.get("estimates") or {}).get(c, {}))


def calls_text(calls, est: dict, whole=None) -> str:
    """``calls`` as shown, with ``±x%`` where the budget estimated some of the session's
    calls: the estimate's ``calls_bound`` over the session's calls; ``±?`` while fewer than
    two windows have measured them (a replayed window of 4 s had one: 75,921 calls where
    the session's rate said ~170k, and it read as exact).

    Args:
        calls: the calls shown (an int, or NA).
        est: the category's entry of the summary's ``estimates``.
        whole: the session's calls, where ``calls`` is a part (the screen's, since a reset).
    """
    whole = calls if whole is None else whole
    bound = est.get("calls_bound")
    if not isinstance(calls, int) or not whole or not est.get("calls_estimated"):
        return _fmt(calls)
    if bound is None:       # estimated from fewer than two windows: a number, but no bound yet
        return f"{_fmt(calls)} ±?"
    return f"{_fmt(calls)} ±{100 * bound / whole:.0f}%"


def _source_cell(summary: dict, c: str) -> str:
    src = summary["sources"].get(f"{c}_s", "")
    bound = (summary.get("estimates") or {}).get(c, {}).get("bound_pp")
    return f"{src} ±{bound:.1f}pp" if src == "estimated" and bound is not None else src


# what each of the self-report's parts is, for the line that says why the budget was not held
OVERHEAD_PARTS = {"probes": "probe traps", "scheduler": "scheduler tracepoints",
                  "bookkeeping": "the BPF program's work on the target's switches and clock ticks",
                  "tick": "the clock tick's interrupts on the target's threads",
                  "kernel_extra": "the target's extra kernel time",
                  "contention": "the monitor's own CPU on cores the job keeps busy",
                  "sampler": "the stack sampler", "gpu_agent": "the GPU agent", "cupti": "CUPTI"}
UNLEVERED = ("contention", "kernel_extra", "bookkeeping", "tick")   # parts no budget step turns off


def over_budget(summary: dict) -> str | None:
    """Why the self-report is over ``--max-overhead``, in words, or None where it is not.
    The budget turns probes off and spaces the windows, but the monitor's own CPU on a
    machine with no idle core (rl-zoo3's OpenMP worker spins on the second core) and the
    target's extra kernel time are no lever of it: on rl-zoo3 DQN with `--timeline --record`
    the monitor's CPU was 1.03 s of a 1.30 s self-report under a 5% budget."""
    oh, cap = summary["overhead"], (summary.get("budget") or {}).get("max_overhead_pct")
    pct, parts = oh.get("estimated_pct"), oh.get("by_source_s") or {}
    if pct is None or cap is None or pct <= cap or not parts:
        return None
    top = max(parts, key=lambda k: parts[k] or 0.0)
    why = f"most of it ({parts[top]:.2f} s) {OVERHEAD_PARTS.get(top, top)}"
    return f"over the {cap:g}% budget: {why}" + (", which no budget step turns off" if top in UNLEVERED else "")


def _over_budget(summary: dict) -> str:
    why = over_budget(summary)
    return f" ({why})" if why else ""


def _raised(oh: dict) -> str:
    """The probes whose calibrated price their measured traps raised (probe_prices.py)."""
    raised = (oh.get("measured_prices") or {}).get("raised") or {}
    if not raised:
        return ""
    top = sorted(raised.items(), key=lambda kv: -kv[1])[:3]
    return "  priced up from their traps: " + ", ".join(f"{k} x{v:.2f}" for k, v in top)


def _render_job(summary: dict, console: Console) -> None:
    job = summary.get("job") or {}
    crit, cpu = job.get("critical_path") or {}, job.get("cpu_s") or {}
    wall = sum(v for v in crit.values() if v)
    if not wall:
        return
    a = "  ".join(f"{k[:-2].replace('_', ' ')} {100 * v / wall:.1f}%" for k, v in crit.items() if v)
    b = "  ".join(f"{k.replace('_', ' ')} {v:.3f}s" for k, v in cpu.items() if v)
    console.print(f"job  Python threads' wall time: {a}", soft_wrap=True)
    console.print(f"     CPU over all {sum((job.get('threads') or {}).values())} threads: {b}", soft_wrap=True)


def _render_operations(summary: dict, console: Console) -> None:
    ops = {n: o for n, o in summary["operations"].items() if n != ALL_OP and "wall_s" in o}
    if not ops:
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="operations (src: a annotated, s sampled)", title_justify="left", show_edge=False,
                  pad_edge=False)
    gpu = summary["totals"].get("gpu_s") is not None
    table.add_column("operation", no_wrap=True, max_width=24)
    cols = ("src", "time", "share", "Py", "Be", "Sim", "CUDA", "py->be", "/s")
    for col in cols + (("GPU", "cpu+gpu", "gpu-only") if gpu else ()):
        table.add_column(col, justify="left" if col == "src" else "right", no_wrap=True)
    for name, o in sorted(ops.items(), key=lambda kv: -kv[1]["wall_s"]):
        sh = o["shares"]
        table.add_row(name, {"annotated": "a", "sampled": "s"}.get(o["source"], ""), f"{o['wall_s']:.2f}s",
                      _pct(o["share"]), *(_pct(sh.get(c)) for c in CATEGORIES),
                      _fmt(o["transitions"].get("python->backend")),
                      _rate(o["transitions_per_s"].get("python->backend")), *(_gpu_cells(o) if gpu else ()))
    console.print(table)


def _render_processes(summary: dict, console: Console) -> None:
    procs = summary.get("processes") or []
    if len(procs) < 2:
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="processes", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("pid", "role", "Sim", "Python at work", "Backend", "waiting", "calls", "waits on (main thread)"):
        table.add_column(col, justify="left" if col in ("role", "waits on (main thread)") else "right")
    shown, folded = _fold_processes(procs)
    for p in shown:
        waits = ", ".join(f"{_wait_short(w)} {100 * w['share']:.0f}%" for w in (p.get("waits_for") or [])[:2])
        role = P.shown_role(p) + (" (exited)" if p["exited"] else "")
        table.add_row(pid_label(p["pid"]), role, *_process_cells([p]), waits)
    if folded:
        table.add_row("...", f"{len(folded)} more (exited)", *_process_cells(folded), "")
    console.print(table)


def _fold_processes(procs: list[dict]) -> tuple[list[dict], list[dict]]:
    """The rows the printed table lists: every live process, then the busiest exited ones up to
    MAX_PROCESS_ROWS; the rest fold into one row (a job that churns workers makes thousands;
    the JSON keeps each)."""
    gone = sorted((p for p in procs if p["exited"]), key=_busy_s, reverse=True)
    room = max(0, MAX_PROCESS_ROWS - (len(procs) - len(gone)))
    keep = {id(p) for p in gone[:room]}
    return [p for p in procs if not p["exited"] or id(p) in keep], gone[room:]


def _busy_s(p: dict) -> float:
    return sum(v or 0.0 for k, v in p["totals"].items() if k in ("python_s", "backend_s", "simulator_s", "cuda_api_s"))


def _process_cells(procs: list[dict]) -> tuple[str, ...]:
    """Sim, Python at work, Backend, waiting and calls, summed over ``procs`` (n/a where none has it)."""
    def total(get):
        vals = [v for v in map(get, procs) if v is not None]
        return sum(vals) if vals else None
    return (_fmt(total(lambda p: p["totals"].get("simulator_s"))),
            _fmt(total(lambda p: P.python_at_work(p["totals"].get("python_s"), p.get("waiting_s")))),
            _fmt(total(lambda p: p["totals"].get("backend_s"))), _fmt(total(lambda p: p.get("waiting_s"))),
            _fmt(sum(v or 0 for p in procs for v in p["calls"].values())))


def _wait_short(w: dict) -> str:
    return f"PID {w['pid']} ({w['kind']})" if w["pid"] else w["what"]


def _gpu_cells(o: dict) -> tuple[str, str, str]:
    """GPU time launched from the operation; shares of its wall time with the GPU busy."""
    ov = o.get("overlap_s") or {}
    whole = sum(ov.values())
    share = (lambda k: _pct(ov[k] / whole)) if whole else (lambda k: NA_TEXT)
    gs = o.get("gpu_s")
    return (fmt(gs, ".3f", "s"), share("both"), share("gpu_only"))


def _pct(v) -> str:
    return fmt(NA if v is None else 100 * v, ".0f", "%")


def _rate(v) -> str:
    return fmt(v, ",.0f")
