"""`rlscope-top compare A.json B.json`: two summaries side by side.

Why is implementation A slower than B? The table puts each category's time, its share,
the Python->Backend transitions and the Backend calls of the two runs next to each other,
per step when the steps are known, with the ratio B/A.

Category rows are corrected (the probes' calibrated cost taken out); the wall row is not.
A *step* is one environment step of the training loop (what the RL code counts as a
timestep). A summary does not know it, so it comes from ``--steps-a``/``--steps-b`` (or
``--steps`` for both), or from a top-level ``"steps"`` key a script added to the summary.
Without steps the figures are per second of wall time, so runs of different lengths
still compare.
"""

from __future__ import annotations

import json
import math
import os

from rich.console import Console
from rich.table import Table

from .console import text_console
from ..errors import UsageError
from .summary import SCHEMA
from ..vocab import CATEGORIES, NA_TEXT

CATS = (*CATEGORIES, "gpu")


def load(path: str) -> dict:
    """Read and check one summary file.

    Raises:
        UsageError: missing, unreadable, not JSON, or not an rlscope-top summary.
    """
    hint = "pass summary files written by `rlscope-top attach PID --summary FILE`"
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"no such summary file: {path}", hint) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}", hint) from None
    except ValueError as e:
        raise UsageError(f"{path} is not JSON ({str(e).splitlines()[0]})", hint) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(f"{path} is not an rlscope-top summary (schema {found!r}, expected {SCHEMA!r})", hint)
    bad = _bad_field(doc)
    if bad:
        raise UsageError(f"{path}: {bad}", "the file was edited or damaged; use the summary rlscope-top wrote")
    if not doc["duration_s"]:
        raise UsageError(f"{path} has no measured window (duration_s is 0)",
                         "the session ended before the first counters; run it longer")
    return doc


def _num(v, none_ok: bool = True) -> bool:
    if v is None:
        return none_ok
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _bad_field(doc: dict) -> str | None:
    """The first field compare reads whose type is wrong (None when all are right)."""
    if not _num(doc.get("duration_s"), none_ok=False):
        return f"duration_s is {doc.get('duration_s')!r}, not a number of seconds"
    for key in ("totals", "shares", "transitions", "calls"):
        sec = doc.get(key, {} if key != "totals" else None)
        if sec is None and key != "totals":
            continue
        if not isinstance(sec, dict):
            return f"{key} is a {type(sec).__name__}, not an object"
        for k, v in sec.items():
            if not _num(v):
                return f"{key}.{k} is {v!r}, not a number"
    fws = doc.get("frameworks") or {}
    if not isinstance(fws, dict) or not all(isinstance(v, dict) for v in fws.values()):
        return "frameworks is not an object of objects"
    for name, fw in fws.items():
        for k in ("calls", "backend_s", "python->backend"):
            if not _num(fw.get(k)):
                return f"frameworks.{name}.{k} is {fw.get(k)!r}, not a number"
        if fw.get("calls") and (fw.get("backend_s") is None or fw.get("python->backend") is None):
            return f"frameworks.{name} has calls but no backend_s or python->backend"
    return None


def steps_of(doc: dict, given: int | None) -> int | None:
    """The run's step count: the option, else the summary's own ``steps``, else None."""
    if given is not None:
        return given
    v = doc.get("steps")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def figures(doc: dict, steps: int | None) -> dict:
    """Per-step (or per-second) figures of one summary: {row: value or None}."""
    per = steps or doc["duration_s"]
    t = doc["totals"]
    out = {"wall": doc["duration_s"] / per}
    for c in CATS:
        v = t.get(f"{c}_s")
        out[c] = None if v is None else v / per
    trans = (doc.get("transitions") or {}).get("python->backend")
    calls = (doc.get("calls") or {}).get("backend")
    out["python->backend"] = None if trans is None else trans / per
    out["backend calls"] = None if calls is None else calls / per
    for name, fw in sorted((doc.get("frameworks") or {}).items()):
        if fw.get("calls"):
            out[f"backend: {name}"] = fw["backend_s"] / per
            out[f"python->backend: {name}"] = fw["python->backend"] / per
    return out


def _share(doc: dict, c: str) -> str:
    """A category's share, with its bound where the budget estimated its time."""
    v = (doc.get("shares") or {}).get(c)
    if v is None:
        return ""
    bound = _estimate(doc, c).get("bound_pp")
    est = (doc.get("sources") or {}).get(f"{c}_s") == "estimated" and isinstance(bound, (int, float))
    return f"{100 * v:.1f}% ±{bound:.1f}pp" if est else f"{100 * v:.1f}%"


def _estimate(doc: dict, c: str) -> dict:
    e = (doc.get("estimates") or {}).get(c)
    return e if isinstance(e, dict) else {}


def _calls_bound(doc: dict, row: str) -> str:
    """`` ±x%`` on a row of Backend calls or transitions the budget partly estimated (as the
    printed summary marks them), ``±?`` before two windows gave a bound; else nothing. Two
    sessions of one rl-zoo3 SAC read 46k and 27k calls a second, each ±20%: without the
    bound the 0.57x read as a measured change."""
    if not row.startswith(("python->backend", "backend calls")):
        return ""
    e, calls = _estimate(doc, "backend"), (doc.get("calls") or {}).get("backend")
    if not e.get("calls_estimated") or not calls:
        return ""
    bound = e.get("calls_bound")
    fws = [n for n, fw in (doc.get("frameworks") or {}).items() if fw.get("calls")]
    if ":" in row and len(fws) > 1:      # the bound is the category's; a framework's share of it is not known
        return " ±?"
    return " ±?" if not isinstance(bound, (int, float)) else f" ±{100 * bound / calls:.0f}%"


def _fmt(v: float | None, row: str, per_step: bool) -> str:
    if v is None:
        return NA_TEXT
    if row.startswith(("python->backend", "backend calls")):
        return f"{v:,.1f}"
    return f"{1e3 * v:,.3f} ms" if per_step else f"{v:,.3f} s"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return NA_TEXT
    if a == 0:
        return "-" if b == 0 else "new in B"
    return f"{b / a:.2f}x"


def table(a: dict, b: dict, steps_a: int | None, steps_b: int | None, names: tuple[str, str]) -> Table:
    """The side-by-side rich table."""
    per_step = bool(steps_a and steps_b)
    fa, fb = figures(a, steps_a if per_step else None), figures(b, steps_b if per_step else None)
    unit = "per step" if per_step else "per second of wall time"
    t = Table(title=f"rlscope-top compare ({unit}; ratio = B/A)", title_justify="left", show_edge=False)
    t.add_column("figure")
    for n in names:
        t.add_column(n, justify="right")
        t.add_column("share", justify="right")
    t.add_column("B/A", justify="right")
    rows = list(dict.fromkeys([*fa, *fb]))
    for row in rows:
        va, vb = fa.get(row), fb.get(row)
        label = "wall (with probes)" if row == "wall" else row.replace("_", " ")
        sa = _share(a, row) if row in CATS and va is not None else ""
        sb = _share(b, row) if row in CATS and vb is not None else ""
        ca = _calls_bound(a, row) if va is not None else ""
        cb = _calls_bound(b, row) if vb is not None else ""
        t.add_row(label, _fmt(va, row, per_step) + ca, sa, _fmt(vb, row, per_step) + cb, sb, _ratio(va, vb))
    return t


def run(path_a: str, path_b: str, steps_a: int | None = None, steps_b: int | None = None,
        names: tuple[str, str] | None = None, console: Console | None = None) -> None:
    """Print the comparison of two summary files.

    Args:
        path_a, path_b: summary JSON files (``rlscope-top attach ... --summary FILE``).
        steps_a, steps_b: environment steps each run made inside its window (optional).
        names: column titles (default: the file names).
        console: where to print (stdout by default).

    Raises:
        UsageError: a file that is not a readable summary, or steps given for one run only.
    """
    a, b = load(path_a), load(path_b)
    sa, sb = steps_of(a, steps_a), steps_of(b, steps_b)
    if (steps_a is None) != (steps_b is None) and not (sa and sb):
        raise UsageError("steps given for one run only", "pass both --steps-a and --steps-b (or --steps for both)")
    names = names or (os.path.basename(path_a), os.path.basename(path_b))
    console = console or text_console()
    for n, doc in zip(names, (a, b)):
        console.print(f"{n}: pid {doc.get('pid')}  {doc['duration_s']:.1f}s  {doc.get('command', '')[:90]}",
                      soft_wrap=True)
    console.print(table(a, b, sa, sb, names))
    if not (sa and sb):
        console.print("no steps: figures are per second of wall time; pass --steps-a N --steps-b M "
                      "(environment steps inside each window) for per-step figures", style="dim")
