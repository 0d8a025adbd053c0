"""A session's figures: what the CPU and the GPU accounting add up to, as the plain data
of the summary document (docs/summary-schema.md). report/summary.py makes the document and
its table of them; the live screen's view model asks for them each refresh.

``None`` (vocab.NA) is the one "not available" value.
"""

from __future__ import annotations

import datetime as dt

from . import frameworks as FW
from . import operations as O
from . import processes as P
from .accounting import Accounting
from .gpu_figures import GpuView, agent_cost_ns, place_gpu
from ..ring.records import seconds as _s, target_ticks
from ..vocab import ALL_OP, CATEGORIES, NA, TRANSITIONS


def _figures(acct: Accounting, threads: list[dict], wall_s: float, ops: bool = False,
             call_threads: list[dict] | None = None, aside: frozenset[int] = frozenset()) -> dict:
    """Totals, calls and transitions for a set of threads, NA where nothing probed it.

    With ``ops``, also the per-operation rows, and Python time inside simulation
    operations moves to the simulator in the totals (operations.py has the rules).
    ``call_threads``: count calls over these instead (the whole job: a simulator stepped on
    its own C++ threads makes its calls there). ``aside``: processes the operations leave out
    (``processes.aside``).
    """
    b = acct.breakdown(threads)
    split = acct.corrected(b)
    # a category with time is shown even if its probes are gone (the totals must add up)
    have = acct.attached_categories() | {c for c in CATEGORIES if sum(b["split"][c])}
    rows = []
    if ops:
        main_pid = acct.meta.get("pid")
        m = acct.breakdown([th for th in acct.threads.values()          # before the estimates
                            if th["py"] and th.get("pid", main_pid) not in aside])
        rows = O.raw_rows(acct, {**m, "split": acct.corrected(m)})
        # the totals are the parts' sum: operations always add up to them, estimated or not
        split = {c: [sum(r["ns"][c][k] for r in rows) for k in (0, 1)] for c in CATEGORIES}
    sim_py = O.simulation_python_ns(rows)
    moved = [0.0, 0.0]
    if any(sim_py):
        have = have | {"simulator"}
        for k in (0, 1):
            moved[k] = min(sim_py[k], split["python"][k])     # never below zero (estimates took some)
            split["python"][k] -= moved[k]
            split["simulator"][k] += moved[k]
    totals = _totals(split, have, wall_s)
    raw = _totals(b["split"], have, wall_s)
    nc = acct.breakdown(call_threads)["calls"] if call_threads is not None else b["calls"]
    have = have | {c for i, c in enumerate(CATEGORIES) if nc[i]}
    calls = {c: (nc[i] if c in have else NA) for i, c in enumerate(CATEGORIES) if c != "python"}
    trans = {}
    for name, (a, z) in TRANSITIONS.items():
        trans[name] = b["trans"][a][z] if CATEGORIES[z] in have else NA
    on_off = {c: {"on_cpu_s": _s(split[c][0]), "off_cpu_s": _s(split[c][1])}
              for c in CATEGORIES if c in have}
    out = {"totals": totals, "raw": {k: v for k, v in raw.items() if k not in ("wall_s", "gpu_s")},
           "split": on_off, "calls": calls, "transitions": trans,
           "correction_s": {c: _s(b["oh"][c]) for c in CATEGORIES if c in have}}
    if any(sim_py):
        out["simulation_split"] = {"python_s": _s(sum(sim_py)), "native_s": _s(sum(split["simulator"]) - sum(sim_py))}
        out["_moved_on_s"] = _s(moved[0])      # for the job's CPU view; not in the document
    if ops:
        cat_total = sum(sum(v) for v in split.values())
        rows = rows if acct.ops else []
        out["operations"] = {r["name"]: O.figures(r, have, cat_total) for r in rows}
        O.inclusive_shares(rows, out["operations"])
    return out


def _totals(split: dict, have: set, wall_s: float) -> dict:
    totals = {"wall_s": round(wall_s, 6),
              "on_cpu_s": _s(sum(v[0] for v in split.values())),
              "off_cpu_s": _s(sum(v[1] for v in split.values()))}
    for c in CATEGORIES:
        totals[f"{c}_s"] = _s(sum(split[c])) if c in have else NA
    totals["gpu_s"] = NA
    return totals


def _shares(totals: dict) -> dict:
    vals = {c: totals.get(f"{c}_s") or 0.0 for c in CATEGORIES}
    tot = sum(vals.values())
    return {c: (round(v / tot, 6) if tot else NA) for c, v in vals.items()}


def _sources(acct: Accounting) -> dict:
    have = acct.attached_categories()
    src = {"wall_s": "exact", "on_cpu_s": "exact", "off_cpu_s": "exact", "python_s": "exact",
           "gpu_s": "unavailable", "overhead.estimated_s": "estimated", "operations": "exact"}
    for c in CATEGORIES[1:]:
        state = "exact" if c in have else "unavailable"
        src[f"{c}_s"] = src[f"calls.{c}"] = state
    for name, (_, z) in TRANSITIONS.items():
        src[f"transitions.{name}"] = "exact" if CATEGORIES[z] in have else "unavailable"
    src["frameworks"] = FW.source(acct)
    for cat, info in acct.estimate_info().items():      # the budget made these cheaper
        state = "estimating" if info["unknown"] else "estimated"
        src[f"{cat}_s"] = src["python_s"] = state
        if info["extra_calls"]:
            src[f"calls.{cat}"] = "estimated"
            for name, (_, z) in TRANSITIONS.items():
                if CATEGORIES[z] == cat:
                    src[f"transitions.{name}"] = "estimated"
    return src


TICK_PLACES = ("python", "backend", "simulator", "cuda_api", "other", "kernel", "probe_trap")
KERNEL_PLACES = ("kernel", "probe_trap")
WORK_PLACES = (*CATEGORIES, "openmp")     # where a native thread's user-space ticks name what it did


def _where(th: dict) -> dict | None:
    """Shares of a thread's on-CPU ticks by where it ran (sampled at 250 Hz); ``python`` only where
    the kernel sampler read its frames (a tick elsewhere in user space at a Python call site);
    ``openmp`` in an OpenMP runtime (the thread record's ``omp``, taken out of ``backend``: the
    runtime is the ML backend's, and an intra-op worker there is mostly spinning for work)."""
    ticks = list(th.get("ticks") or ())
    n = sum(ticks)
    if not n:
        return NA
    be = TICK_PLACES.index("backend")
    omp = min(th.get("omp") or 0, ticks[be]) if len(ticks) > be else 0
    if omp:
        ticks[be] -= omp
    out = {p: round(v / n, 4) for p, v in zip(TICK_PLACES, ticks) if v}
    if omp:
        out["openmp"] = round(omp / n, 4)
    return out


COVERAGE_GAP = 0.15       # ticks in a category's libraries past its timed share by this: under-timed
COVERAGE_MIN_TICKS = 250  # one second of the Python threads' CPU at 250 Hz before the check speaks


def coverage(py_threads: list[dict], split: dict, estimating: frozenset = frozenset()) -> dict:
    """Each probed category's share of the Python threads' on-CPU time, as the probes timed it
    and as the 250 Hz ticks found the threads in its libraries. Ticks far past the timed share
    mean calls that enter it by a path the probes do not bracket: tests/targets/ops_path.py,
    `torch.ops.aten.mm.default` half the time by its own clock, read Backend 0.0% "exact"
    beside 56.7% of its ticks in torch (2026-12-04).

    Args:
        py_threads: the Python threads (their ``ticks`` by TICK_PLACES).
        split: the categories' on/off-CPU seconds over those threads.
        estimating: categories with no re-timing window yet (no time to check).

    Returns:
        ``{category: {ticks_pct, timed_pct, under_timed}}`` for each category with ticks.
    """
    rows = [th["ticks"] for th in py_threads if th.get("ticks")]
    ticks = [sum(col) for col in zip(*rows)] or [0] * len(TICK_PLACES)
    n = sum(ticks)
    on = sum((sp or {}).get("on_cpu_s") or 0.0 for sp in split.values())
    out = {}
    for i, cat in enumerate(CATEGORIES[1:], start=1):     # TICK_PLACES starts with the categories
        if not ticks[i] or not on:
            continue
        tp, timed = ticks[i] / n, ((split.get(cat) or {}).get("on_cpu_s") or 0.0) / on
        out[cat] = {"ticks_pct": round(100 * tp, 2), "timed_pct": round(100 * timed, 2),
                    "under_timed": n >= COVERAGE_MIN_TICKS and tp - timed >= COVERAGE_GAP and cat not in estimating}
    return out


def coverage_text(summary: dict) -> list[str]:
    """One line per under-timed category, for the printed summary and the screen."""
    return [f"CHECK {cat.replace('_', ' ')}: {c['ticks_pct']:.1f}% of the Python threads' CPU ticks were in its "
            f"libraries, its probes timed {c['timed_pct']:.1f}%: calls enter it by a path they do not bracket "
            f"(torch.ops, a C++ extension); read it as a lower bound"
            for cat, c in (summary.get("coverage") or {}).items() if c.get("under_timed")]


OPENMP_MIN_S = 0.5         # native threads' seconds in an OpenMP runtime before the summary speaks ...
OPENMP_MIN_SHARE = 0.10    # ... and their share of every thread's CPU


def openmp_text(summary: dict) -> list[str]:
    """One line when native threads spun in an OpenMP runtime for a tenth of the job's CPU or more
    (libgomp's workers spin for work between parallel ops: skrl's PPO on CartPole kept one at
    ~98% of a core, 9.8 s of the job's 19.9 s)."""
    cpu = (summary.get("job") or {}).get("cpu_s") or {}
    omp, every = cpu.get("openmp") or 0.0, sum(v or 0.0 for v in cpu.values())
    if omp < OPENMP_MIN_S or not every or omp / every < OPENMP_MIN_SHARE:
        return []
    busy = ((summary.get("overhead") or {}).get("by_source_s") or {}).get("contention")
    low = ("; no core was idle, and the overhead above reads low: rl-zoo3 PPO cost 7.2% against ~4% "
           "reported with the spinning worker, 3.2% with one thread (docs/overhead.md)") if busy else ""
    return [f"OPENMP: intra-op worker threads spent {omp:.1f}s ({100 * omp / every:.0f}% of the job's CPU) in the "
            f"OpenMP runtime, mostly spinning for work between parallel ops: a core the job holds and does not use; "
            f"torch.set_num_threads(1) or OMP_WAIT_POLICY=passive gives it back{low}"]


WAITING_MIN_SHARE = 0.5    # of the table's Python seconds, blocked, before the summary speaks


def waiting_text(summary: dict) -> list[str]:
    """One line when half or more of the table's Python seconds is the job's Python threads
    blocked outside probed calls. The table sums every process's Python, and an env worker waits
    for the learner most of the session: tianshou's DQN with 4 SubprocVectorEnv workers read
    Python 91%, of which 39 s of 47 was waiting (the job line: python 14.3%, waiting 75.8%)."""
    crit = (summary.get("job") or {}).get("critical_path") or {}
    waiting, py = crit.get("waiting_s") or 0.0, (summary.get("totals") or {}).get("python_s")
    if not isinstance(py, (int, float)) or py <= 0 or waiting < WAITING_MIN_SHARE * py:
        return []
    procs = [p for p in summary.get("processes") or [] if p.get("in_totals", True) and (p.get("waiting_s") or 0) > 0]
    by_role: dict[str, list[float]] = {}
    for p in procs:
        by_role.setdefault(p.get("role") or "process", []).append(p["waiting_s"])
    who = ", ".join(f"{len(v)} {r}{'s' if len(v) > 1 else ''} {sum(v):.1f}s"
                    for r, v in sorted(by_role.items(), key=lambda kv: -sum(kv[1])))
    return [f"WAITING: {waiting:.1f}s of the Python above ({100 * waiting / py:.0f}%) is its threads blocked "
            f"outside probed calls (on another process, a pipe, a queue, a lock){': ' + who if who else ''}; "
            f"Python at work was {crit.get('python_s') or 0.0:.1f}s (the job line splits them)"]


def _thread_row(acct: Accounting, th: dict, wall_s: float) -> dict:
    """One thread. A thread that never ran Python has no Python time: what the probes did not
    bracket is ``native_s``, with where the 250 Hz tick found it running (``where``) and the
    category that is most of its user-space ticks (``category``, sampled: its kernel time is
    spent for the code that called in, as an OpenMP worker's futex waits are torch's)."""
    f = _figures(acct, [th], wall_s)["totals"]
    row = {"tid": th["tid"], "pid": th.get("pid", acct.meta.get("pid")), "name": th["name"],
           "python_thread": th["py"], "exited": th["exited"],
           **{k: v for k, v in f.items() if k not in ("wall_s", "gpu_s")}, "where": _where(th)}
    if not th["py"]:
        row["native_s"], row["python_s"] = row["python_s"], NA
        where = row["where"] or {}
        user = sum(v for k, v in where.items() if k not in KERNEL_PLACES)
        w = {k: v / user for k, v in where.items() if k in WORK_PLACES} if user else {}
        row["category"] = max(w, key=w.get) if w and max(w.values()) >= 0.5 else "native"
    return row


def _job(acct: Accounting, all_threads: list[dict], main: dict, moved_on_s: float = 0.0) -> dict:
    """The whole job two ways. ``critical_path``: the Python threads' wall time (RL-Scope's
    view), with their off-CPU time outside probed calls as ``waiting_s`` (blocked on a worker,
    a queue, a lock, I/O), not Python, and ``runnable_s``: their off-CPU time, in any category,
    while runnable (waiting for a CPU the machine did not have: a busy machine, not the job). ``cpu_s``: on-CPU seconds of every thread by category:
    probed time exactly, the rest of native threads by where the tick found them (sampled), with
    ``openmp`` their time in an OpenMP runtime apart from Backend (an intra-op worker that spins
    while the Python thread works read as Backend: skrl's PPO, 15 s of 23.4)."""
    py_split = main["split"].get("python") or {}
    py_threads = [th for th in all_threads if th["py"]]
    off = sum(sum(ns[1] for ns in th["ns"]) for th in py_threads)
    runnable = min(off, sum(th.get("pre", 0) for th in py_threads))
    waiting = py_split.get("off_cpu_s")
    if waiting is not None and off:      # the share of Python's off-CPU time that was not blocked
        waiting = _s(waiting * 1e9 * (1 - runnable / off))
    crit = {"python_s": py_split.get("on_cpu_s"), "waiting_s": waiting, "runnable_s": _s(runnable)}
    for c in CATEGORIES[1:]:
        crit[f"{c}_s"] = main["totals"].get(f"{c}_s")
    cpu = dict.fromkeys((*CATEGORIES, "openmp", "native", "kernel"), 0.0)
    for th in all_threads:
        on = [x[0] for x in _corrected_ns(acct, th)]
        for i, c in enumerate(CATEGORIES[1:], start=1):
            cpu[c] += on[i]
        if th["py"]:
            cpu["python"] += on[0]
            continue
        w = _where(th) or {}
        for c in WORK_PLACES:                    # python: frames read there
            cpu[c] += on[0] * w.get(c, 0.0)
        cpu["kernel"] += on[0] * sum(w.get(c, 0.0) for c in KERNEL_PLACES)    # a probe's trap is kernel time
        cpu["native"] += on[0] * (w.get("other", 0.0) if w else 1.0)
    n_py = sum(1 for th in all_threads if th["py"])
    cpu_s = {k: _s(v) for k, v in cpu.items()}
    P.shift_seconds(cpu_s, "python", "simulator", moved_on_s)    # the simulation rule, as in the totals
    return {"critical_path": crit, "cpu_s": cpu_s,
            "threads": {"python": n_py, "native": len(all_threads) - n_py}}


def _processes(acct: Accounting, all_threads: list[dict], wall_s: float, sim_python_s: float = 0.0,
               aside: frozenset[int] = frozenset()) -> list[dict]:
    """Per process of the job: its command, role, totals, calls, transitions and the time its
    Python threads waited off-CPU outside probed calls (on a worker, a pipe, a queue, a lock),
    with what its main thread waited for (``waits_for``: sampled, collect/waits.py).
    The job's totals are the sum of those ``in_totals`` (all but ``aside``); operations are the
    main process's (its annotations and stack samples)."""
    main_pid = acct.meta.get("pid")
    procs = acct.procs or ([{"pid": main_pid, "ppid": 0, "cmd": acct.meta.get("cmd", ""), "python": True,
                             "exited": False, "role": None, "ops": list(acct.ops.values())}] if main_pid else [])
    cmd_of = {p["pid"]: p["cmd"] for p in procs}
    launcher = P.launchers(procs, main_pid)
    ops_of = [P.op_seconds(p.get("ops"), acct.ops) for p in procs]
    counted = sum(sum(O.simulation_python_ns(list(ops.values()))) for ops in ops_of)
    scale = sim_python_s / counted if counted else 0.0     # the job's move, net of its estimates
    out = []
    for p, ops in zip(procs, ops_of):
        mine = P.threads_of(all_threads, p["pid"], main_pid)
        f = _figures(acct, [th for th in mine if th["py"]], wall_s, call_threads=mine)
        job = _job(acct, mine, f)
        totals = {k: v for k, v in f["totals"].items() if k != "gpu_s"}
        totals["wall_s"] = _watched_s(mine, wall_s)
        moved = P.move_simulation_python(totals, ops, scale)
        P.shift_seconds(job["cpu_s"], "python", "simulator", moved[0])
        waiting = job["critical_path"]["waiting_s"]
        op_s = {n: _s(sum(sum(x) for x in o["ns"].values()) * 1e9) for n, o in ops.items()}
        out.append({"pid": p["pid"], "ppid": p["ppid"], "command": p["cmd"],
                    "role": P.guess_role(p, main_pid, f["calls"], moved[0] + moved[1], op_s,
                                         cmd_of.get(p["ppid"], ""), p["ppid"] in launcher),
                    "role_source": "user" if p.get("role") else "guessed",
                    "python": p["python"], "exited": p["exited"], "in_totals": p["pid"] not in aside,
                    "threads": len(mine), "totals": totals,
                    "waiting_s": None if waiting is None else _s(max(0.0, waiting - moved[1]) * 1e9),
                    "simulation_python_s": _s(sum(moved) * 1e9),
                    "operations": op_s, "waits": p.get("waits"),
                    "cpu_s": job["cpu_s"], "calls": f["calls"], "transitions": f["transitions"]})
        if p.get("folded"):              # the "(N exited processes)" record (collect/processes.py)
            out[-1]["folded"] = p["folded"]
    role_of = {q["pid"]: q["role"] for q in out}
    for q in out:
        q["waits_for"] = P.waits_for(q.pop("waits"), q["waiting_s"], role_of)
    return out


def _aside(acct: Accounting, threads: list[dict]) -> frozenset[int]:
    """The processes the job's figures leave out (``processes.aside``)."""
    main_pid = acct.meta.get("pid")
    if not acct.procs:
        return frozenset()
    return frozenset(P.aside(acct.procs, main_pid,
                             lambda pid: acct.breakdown(P.threads_of(threads, pid, main_pid))["calls"]))


def _watched_s(threads: list[dict], wall_s: float) -> float:
    """How long the session watched a process: its longest-tracked thread's time (every
    thread's on- and off-CPU time is tracked from when it is first seen), at most the session's
    wall time; the session's wall time where none of its threads was seen."""
    seen = max((sum(sum(x) for x in th["ns"]) for th in threads), default=0) / 1e9
    return round(min(wall_s, seen), 6) if seen > 0 else round(wall_s, 6)


def _corrected_ns(acct: Accounting, th: dict) -> list[list[float]]:
    split = acct.corrected(acct.breakdown([th]))
    return [split[c] for c in CATEGORIES]


def _estimates(acct: Accounting, totals: dict) -> dict:
    """Per category the budget estimated: how (``mode``), from how many timed windows
    (``windows``, ``window_s``), over how much of the session (``estimated_s``), and its 95%
    bound, in seconds and in percentage points of the category's share (None while fewer than
    two windows show how they spread); the calls it estimated (``off``) and their 95% bound.
    ``state`` is ``estimating`` while some of it has calls but no window to time them yet: its
    figures then read n/a."""
    whole = sum(totals.get(f"{c}_s") or 0.0 for c in CATEGORIES)
    out = {}
    for cat, info in acct.estimate_info().items():
        b = info["bound_ns"]
        out[cat] = {"mode": info["mode"], "windows": info["windows"], "window_s": round(info["window_s"], 3),
                    "estimated_s": round(info["estimated_s"], 3),
                    "bound_s": _s(b) if b is not None else NA,
                    "bound_pp": round(100 * b / 1e9 / whole, 2) if b is not None and whole else NA,
                    "state": "estimating" if info["unknown"] else "ok",
                    "calls_estimated": round(info["extra_calls"]),
                    "calls_bound": round(info["calls_bound"]) if info.get("calls_bound") is not None else NA,
                    "window_ms_per_tick": round(info["ns_per_tick"] / 1e6, 3) if info.get("ns_per_tick") else NA}
    return out


def _sampled_simulator(doc: dict) -> None:
    """Simulator time that is only the Python time of simulation operations (no simulator
    probe) has no count of calls into it: n/a, not 0 calls beside its seconds."""
    rows = [doc, *doc["operations"].values(), *doc.get("processes", [])]
    for r in rows:
        if isinstance(r.get("calls"), dict) and not r["calls"].get("simulator"):
            r["calls"]["simulator"] = NA
        if isinstance(r.get("transitions"), dict) and not r["transitions"].get("python->simulator"):
            r["transitions"]["python->simulator"] = NA


def _hide_unknown(doc: dict) -> None:
    """A category still estimating reads n/a, and so does Python, whose time it would take."""
    for cat, e in doc["estimates"].items():
        if e["state"] != "estimating":
            continue
        for key in (f"{cat}_s", "python_s"):
            doc["totals"][key] = NA
            doc["shares"][key[:-2]] = NA


def figures(acct: Accounting, gpu: GpuView | None = None) -> dict:
    """What a session's records add up to: the figures of the summary document
    (docs/summary-schema.md) but its schema, ring and detach fields.

    Args:
        acct: the CPU accounting.
        gpu: its peer, the GPU accounting fed the same records (None: no GPU records).
    """
    gpu = gpu if gpu is not None else GpuView()
    meta = acct.meta
    wall_s = acct.duration_s
    every_thread = acct.all_threads()         # the budget's estimates, computed once
    set_aside = _aside(acct, every_thread)
    all_threads = [th for th in every_thread if th.get("pid", meta.get("pid")) not in set_aside]
    main = _figures(acct, [th for th in all_threads if th["py"]], wall_s, ops=True, call_threads=all_threads,
                    aside=set_aside)
    correction = main.pop("correction_s")
    moved_on_s = main.pop("_moved_on_s", 0.0)
    per_op = main.pop("operations")
    threads = [_thread_row(acct, th, wall_s) for th in sorted(every_thread, key=lambda t: t["tid"])]
    processes = _processes(acct, every_thread, wall_s, (main.get("simulation_split") or {}).get("python_s") or 0.0,
                           set_aside)
    for p in processes:       # a thread's row moves what its process's totals moved
        if p["simulation_python_s"]:
            P.spread_simulation_python(P.threads_of(threads, p["pid"], meta.get("pid")), p["simulation_python_s"])
    started = dt.datetime.fromtimestamp(meta.get("wall0", 0), dt.timezone.utc).isoformat(timespec="seconds")
    doc = {
        "pid": meta.get("pid"),
        "command": meta.get("cmd", ""),
        "started_at": started,
        "duration_s": round(wall_s, 6),
        "end_reason": acct.end_reason,
        "window": {"t0_monotonic_ns": meta.get("t0"), "t1_monotonic_ns": acct.last_ts or None},
        **main,
        "shares": _shares(main["totals"]),
        "estimates": _estimates(acct, main["totals"]),
        "job": _job(acct, all_threads, main, moved_on_s),
        "operations": {ALL_OP: {**main["totals"], "calls": main["calls"], "transitions": main["transitions"]},
                       **per_op},
        "frameworks": FW.summarize(acct, [th for th in all_threads if th["py"]], main["totals"], main["calls"]),
        "threads": threads,
        "processes": processes,
        "ranges": {n: {"count": r.count, "total_s": _s(r.total_ns)} for n, r in sorted(acct.ranges.items())},
        "probes": _probes(acct),
        "overhead": _overhead(acct, gpu, wall_s, correction),
        "machine": machine(acct.cost),
        "budget": _budget(acct),
        "sampler": _sampler(acct, wall_s),
        "timeline": _timeline(acct),
        "sources": _sources(acct),
        "notes": [n["msg"] for n in acct.notes],
    }
    estimating = frozenset(c for c, e in doc["estimates"].items() if e["state"] == "estimating")
    doc["coverage"] = coverage([th for th in all_threads if th["py"]], main["split"], estimating)
    for cat, c in doc["coverage"].items():
        if c["under_timed"] and doc["sources"].get(f"{cat}_s") == "exact":
            doc["sources"][f"{cat}_s"] = "lower bound"
    # Python time in simulation operations, and no probed simulator call (none probed, or a
    # MuJoCo that a classic-control program imported but never stepped: "0 calls, exact" read wrong)
    if "simulation_split" in main and (doc["sources"]["simulator_s"] == "unavailable"
                                       or not main["calls"].get("simulator")):
        doc["sources"]["simulator_s"] = "operations"
        _sampled_simulator(doc)
    place_gpu(doc, gpu, acct.python_busy() if gpu.raw is not None else None)   # gpu_s, overlap_s, `gpu`
    _hide_unknown(doc)
    return doc


def machine(cost: dict | None) -> dict:
    """The summary's ``machine``: the share of all CPUs' time over the window that the
    hypervisor gave to another guest while this VM had work there (``steal`` in /proc/stat).
    A thread's on-CPU time includes what was stolen from it: the kernel sees it as running.

    Args:
        cost: the cost meter's figures (rlscope_top/collect/cost_meter.py), or None.
    """
    whole = (cost or {}).get("all_cpu_s")
    if not whole:
        return {"steal_pct": NA, "steal_cpu_s": NA}
    steal = cost.get("steal_cpu_s") or 0.0
    return {"steal_pct": round(100 * steal / whole, 3), "steal_cpu_s": round(steal, 4)}


def _probes(acct: Accounting) -> dict:
    """The summary's ``probes``: what attached where, what is missing, hits, the program."""
    meta = acct.meta
    mine = lambda g: [p for p in meta.get("probes", []) if p["group"] == g]   # noqa: E731
    return {"attached": {g: {"libs": libs, "probes": sum(2 if p["kind"] == "pair" else 1 for p in mine(g)),
                             "out_of_line": sorted({p["label"] for p in mine(g) if not p.get("emulated", True)})}
                         for g, libs in meta.get("groups", {}).items()},
            "missing": meta.get("missing", {}), "hits": acct.probe_hits(), "dropped_events": acct.event_drops,
            "missed_switch_ins": acct.run_fixes, "closed_at_step": acct.closed_calls,
            "program": meta.get("program") or NA}


def _overhead(acct: Accounting, gpu: GpuView, wall_s: float, correction: dict) -> dict:
    """The summary's ``overhead``: the self-report, by category and by source (detach_s is
    filled in after the detach)."""
    by_source = _overhead_by_source(acct, gpu)
    overhead_s = sum(by_source.values())
    return {"probe_hits": sum(acct.hits), "estimated_s": round(overhead_s, 6),
            "estimated_pct": round(100 * overhead_s / wall_s, 3) if wall_s else NA,
            "by_category_s": correction, "by_source_s": {k: round(v, 6) for k, v in by_source.items()},
            "calibrated": bool(acct.meta.get("calibrated")), "measured_prices": acct.prices or NA, "detach_s": NA}


def _budget(acct: Accounting) -> dict:
    """The summary's ``budget``: each category's mode, its timed samples and the steps taken."""
    t0 = acct.meta.get("t0")
    return {"max_overhead_pct": acct.meta.get("max_overhead_pct"),
            "modes": {**{c: e["mode"] for c, e in acct.estimate_info().items()}, **acct.source_modes},
            "samples": {c: acct.samples(c) for c in acct.modes},
            "steps": [{"at_s": round((r["ts"] - (t0 or r["ts"])) / 1e9, 3), "category": r["category"],
                       "mode": r["mode"], "overhead_pct": round(r["overhead_pct"], 2)} for r in acct.budget_steps]}


def _overhead_by_source(acct: Accounting, gpu: GpuView) -> dict[str, float]:
    """What profiling costs the target, in seconds, by where it comes from: the probes'
    calibrated cost; the scheduler probe (calibrated cost per context switch of the target's
    threads); the BPF program's own work on the target's switches and clock ticks (measured in
    the kernel: ``bookkeeping``); the interrupts around the clock ticks that found a target
    thread on a CPU (calibrated cost per tick: ``tick``); measured kernel time and monitor CPU beyond those
    (`_measured_extra_s`); the stack sampler (the kernel sampler's stack reads, austin's CPU
    time: a core the machine does not have for the job); the GPU agent's buffer callbacks; and
    CUPTI's own cost per traced activity (gpu_source.CUPTI_NS_PER_ACTIVITY)."""
    cb, total = agent_cost_ns(gpu)
    switches = sum(th.get("sw", 0) for th in acct.threads.values())
    smp = acct.sampler or {}
    sampler = smp.get("cpu_s") or 0.0
    probes, sched = acct.estimated_overhead_s(), switches * acct.meta.get("switch_ns", 0) / 1e9
    tick = target_ticks(acct.threads.values()) * acct.meta.get("tick_ns", 0) / 1e9
    books = acct.bookkeeping_s
    # the target's own kernel time that measured sources explain: the kernel sampler's reads run there too
    known = sched + books + (sampler if smp.get("tool") == "kernel" else 0.0)
    cost = _with_base(acct.cost, _own_kernel_s(acct), acct.duration_s)
    kernel, contention = _measured_extra_s(cost, acct.duration_s, probes, known, _kernel_share(acct))
    return {"probes": probes, "scheduler": sched, "bookkeeping": books, "tick": tick, "kernel_extra": kernel,
            "contention": contention, "sampler": sampler, "gpu_agent": cb / 1e9, "cupti": max(0, total - cb) / 1e9}


# The target's own system time moves by more than the probes add when it is large: the demo's
# (0.15-0.22 s/s between stretches, unattached) read 13% of "extra" against a 2-3 s baseline.
# Below this pre-attach rate (compute-bound programs: rl-zoo3 PPO 0.003-0.007) the rise is the probes'.
QUIET_SYS_PER_S = 0.05


# A program's probes may cost more than calibrated (the traps in a large code base); their kernel
# part shows it, and the rest of their cost (the code after each trap) is taken to scale with it,
# up to this many times the calibrated cost. Beyond that a rise is not the probes': counted as is.
MAX_PRICE_RATIO = 3.0


def _own_kernel_s(acct: Accounting) -> float:
    """The target's kernel time outside the probes' traps, by its threads' CPU-clock ticks
    (their on-CPU time times the ticks' share in place ``kernel``): its own system calls and faults."""
    k = TICK_PLACES.index("kernel")
    own = 0.0
    for th in acct.threads.values():
        ticks = th.get("ticks") or ()
        n = sum(ticks)
        if n and len(ticks) > k:
            own += sum(x[0] for x in th["ns"]) / 1e9 * ticks[k] / n
    return own


def _with_base(cost: dict | None, own_kernel_s: float, wall_s: float) -> dict | None:
    """The cost meter's reading with its pre-attach rate bounded where the stretch could not
    read it (no clock tick in a short stretch: cost_meter ``base_read``): the target's own kernel
    ticks in the session show at least that rate, and its lifetime average at most (start-up
    included). rl-games' PPO (~0.045 s/s of its own) read 0 or 0.06 before attach, session by
    session, and its self-report 6.4% or 1.7% with it; its kernel ticks read 0.024-0.032 s/s."""
    if not cost or cost.get("base_read", True) or not wall_s:
        return cost
    base, life = cost.get("base_sys_per_s") or 0.0, cost.get("life_sys_per_s")
    seen = max(base, own_kernel_s / wall_s)
    return {**cost, "base_sys_per_s": seen if life is None else min(life, seen)}


def _kernel_share(acct: Accounting) -> float | None:
    """The calibrated kernel part of the probe hits' cost (calibrate's `kernel_share`, weighted
    by each probe's hits times its price), or None where it is not known."""
    per_label: dict[str, tuple[float, float]] = {}
    for p in acct.meta.get("probes", ()):
        if p.get("kernel_share") is not None:
            per_label.setdefault(p["label"], (p["cost_ns"], p["kernel_share"]))
    hits = acct.probe_hits()
    cost = sum(hits.get(lb, 0) * c for lb, (c, _) in per_label.items())
    kern = sum(hits.get(lb, 0) * c * f for lb, (c, f) in per_label.items())
    return kern / cost if cost > 0 else None


def _measured_extra_s(cost: dict | None, wall_s: float, probes_s: float, known_s: float,
                      kernel_share: float | None = None) -> tuple[float, float]:
    """What rlscope_top/collect/cost_meter.py measured beyond the calibrated figures, in seconds.

    Kernel: the target's extra system time (over its pre-attach rate, when that rate is low
    enough to tell the probes' part: QUIET_SYS_PER_S), less the kernel time measured sources
    explain (the scheduler probe, the program's bookkeeping, the kernel sampler's reads). Where
    the calibrated kernel share of the probes' cost is known, a rise above the probes' own
    kernel part means they cost this program more than calibrated, and their whole cost (the
    user-side part too) is scaled by it, up to MAX_PRICE_RATIO; otherwise what the probes'
    calibrated cost does not explain. Contention: the monitor's CPU that the machine's idle CPU
    could not have given it (a busy machine), times the target's share of the rest of the
    machine's busy CPU time (the part that came out of the job).

    Args:
        cost: the cost meter's figures, or None.
        wall_s: the session's wall time.
        probes_s: the probes' calibrated cost.
        known_s: the target's kernel time that other sources explain (the scheduler probe's
            calibrated cost, the program's measured bookkeeping and stack reads).
        kernel_share: the calibrated kernel share of the probes' cost, or None.
    """
    if not cost:
        return 0.0, 0.0
    base = cost.get("base_sys_per_s")
    kernel = 0.0
    if base is not None and base <= QUIET_SYS_PER_S:
        rise = cost["target_sys_s"] - base * wall_s - known_s
        if kernel_share and probes_s > 0:
            expected = kernel_share * probes_s
            ratio = min(MAX_PRICE_RATIO, rise / expected)
            kernel = max(0.0, probes_s * (ratio - 1)) + max(0.0, rise - MAX_PRICE_RATIO * expected)
        else:
            kernel = max(0.0, rise - probes_s)
    taken = max(0.0, cost["monitor_cpu_s"] - cost["idle_cpu_s"])
    others = cost["busy_cpu_s"] - cost["monitor_cpu_s"]     # what the monitor may have displaced
    share = min(1.0, cost["target_cpu_s"] / others) if others > 0 else 1.0
    return kernel, taken * share


def _sampler(acct: Accounting, wall_s: float) -> dict | None:
    """The stack sampler (zero-change operations): rate, samples, and its own CPU cost."""
    smp = acct.sampler
    if smp is None:
        return NA
    cpu = smp.get("cpu_s")
    return {"tool": smp.get("tool", "austin"), "hz": smp["hz"], "samples": smp["samples"], "invalid": smp["invalid"],
            "cpu_s": cpu, "cpu_pct_of_one_core": round(100 * cpu / wall_s, 3) if cpu is not None and wall_s else NA,
            "error": smp.get("error"), "site_ticks": smp.get("site_ticks", 0)}


def _timeline(acct: Accounting) -> dict | None:
    tl = acct.timeline()
    if tl is None:
        return NA
    return {"totals": {f"{c}_s": _s(sum(v)) for c, v in tl["split"].items()},
            "split": {c: {"on_cpu_s": _s(v[0]), "off_cpu_s": _s(v[1])} for c, v in tl["split"].items()},
            "late_events": tl["late_events"],
            "dropped_events": acct.event_drops,
            "overlap_s": {k: _s(v) for k, v in tl["overlap"].items()}}
