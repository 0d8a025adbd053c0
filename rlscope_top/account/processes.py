"""The job's processes: which threads are whose, their operations, a guess at their role."""

from __future__ import annotations

from ..ring.records import SHARED
from ..vocab import CATEGORIES
from .operations import simulation_python_ns

ROLE_MAIN = "main"
ROLE_LAUNCHER = "launcher"          # the attached PID, when it runs no Python (a shell, tini)
DATA_LOADING = "data_loading"       # the sampled operation of torch's DataLoader workers (op_rules)


def threads_of(threads: list[dict], pid: int, main_pid: int | None) -> list[dict]:
    """A process's thread rows (a row without ``pid`` is the main process's: older rings)."""
    return [th for th in threads if th.get("pid", main_pid) == pid]


def op_seconds(mine: list[dict] | None, job_ops: dict[int, dict]) -> dict[str, dict]:
    """A process's share of the operations: ``{name: {"kind", "ns": {category: [on, off]}}}`` in
    seconds, the probes' calibrated cost taken out of on-CPU time (as the job's rows have it).

    Args:
        mine: the process record's ``ops`` (``[{id, ns, oh, calls}]``).
        job_ops: the accounting's operation records by id (their names and kinds).
    """
    out: dict[str, dict] = {}
    for o in mine or ():
        job = job_ops.get(o["id"]) or {}
        name = job.get("name", f"op#{o['id']}")
        ns = {c: [max(0, o["ns"][i][0] - o["oh"][i]) / 1e9, o["ns"][i][1] / 1e9] for i, c in enumerate(CATEGORIES)}
        out[name] = {"kind": job.get("kind", ""), "ns": ns}
    return out


def shift_seconds(d: dict, frm: str, to: str, s: float) -> float:
    """Move ``s`` seconds of ``d[frm]`` to ``d[to]`` (at most what ``frm`` holds, never leaving
    -0.0), rounded as the summary rounds. Changes ``d`` in place.

    Returns:
        the seconds moved.
    """
    take = min(d.get(frm) or 0.0, s)
    if take > 0:
        d[frm] = max(0.0, round(d[frm] - take, 6))
        d[to] = round((d.get(to) or 0.0) + take, 6)
    return max(0.0, take)


def move_simulation_python(totals: dict, ops: dict[str, dict], scale: float = 1.0) -> tuple[float, float]:
    """Python time inside a process's simulation operations counts as Simulator, as in the
    job's totals (operations.simulation_python_ns). Changes ``totals`` in place.

    Args:
        totals: the process's totals.
        ops: its operations (``op_seconds``).
        scale: the job's moved seconds over the processes' counted ones: the job's rows move
            Python net of the budget's estimates (operations.py), which are not kept per
            process; this makes the processes add up to the job.

    Returns:
        the [on, off]-CPU seconds moved.
    """
    on, off = (scale * x for x in simulation_python_ns(list(ops.values())))
    py = totals.get("python_s") or 0.0
    if not (on or off) or not py:
        return 0.0, 0.0
    f = min(1.0, py / (on + off))
    on, off = on * f, off * f
    shift_seconds(totals, "python_s", "simulator_s", on + off)
    return on, off


def spread_simulation_python(threads: list[dict], moved_s: float) -> None:
    """A process's thread rows follow its totals: the Python seconds its simulation
    operations moved to Simulator come off its Python threads in proportion to their Python
    time (operations are counted per process, not per thread; where one thread runs Python,
    as in most RL programs, that is exact). Changes the rows in place.

    Args:
        threads: the process's thread rows (``python_thread``, ``python_s``, ``simulator_s``).
        moved_s: the seconds ``move_simulation_python`` moved for the process.
    """
    mine = [r for r in threads if r.get("python_thread") and (r.get("python_s") or 0) > 0]
    whole = sum(r["python_s"] for r in mine)
    if moved_s <= 0 or not whole:
        return
    for r in mine:
        shift_seconds(r, "python_s", "simulator_s", moved_s * r["python_s"] / whole)


def launchers(procs: list[dict], main_pid: int | None) -> set[int]:
    """The attached PID when it runs no Python, and the native processes below it that lead to
    the job (`bash run.sh` -> `timeout 3600 python train.py`): a Python process started by one
    of them is the job's main one.

    Args:
        procs: the process records (``pid``, ``ppid``, ``python``).
        main_pid: the PID rlscope-top was attached to.
    """
    native = {p["pid"]: p["ppid"] for p in procs if not p.get("python", True)}
    out = {main_pid} if main_pid in native else set()
    grew = bool(out)
    while grew:                          # parents first or not: until no more join
        more = {pid for pid, ppid in native.items() if ppid in out and pid not in out}
        out |= more
        grew = bool(more)
    return out


FORKSERVER = "multiprocessing.forkserver"
HELPERS = {FORKSERVER: "forkserver", "multiprocessing.resource_tracker": "resource tracker"}


def helper_role(cmd: str, parent_cmd: str = "") -> str:
    """multiprocessing's own processes, by command line: ``forkserver`` or ``resource
    tracker``; "" for any other (the forkserver's children keep its command: they are workers).
    """
    for mark, role in HELPERS.items():
        if mark in cmd and not (mark == FORKSERVER and FORKSERVER in parent_cmd):
            return role
    return ""


def aside(procs: list[dict], main_pid: int | None, calls_of) -> set[int]:
    """The processes the job's figures leave out: multiprocessing's resource tracker and
    forkserver, which wait on a pipe all session and run none of the program. Their seconds
    of waiting made a torchrl PPO's headline read Python 80% where its one working process
    was at 60%. One the user named (``--role``), or that made a probed call, stays in.

    Args:
        procs: the process records (``pid``, ``ppid``, ``cmd``, ``role``).
        main_pid: the PID rlscope-top was attached to (never aside).
        calls_of: a process's pid -> its calls per category (a list).
    """
    cmd_of = {p["pid"]: p.get("cmd") or "" for p in procs}
    return {p["pid"] for p in procs
            if p["pid"] != main_pid and not p.get("role")
            and helper_role(cmd_of[p["pid"]], cmd_of.get(p["ppid"], "")) and not any(calls_of(p["pid"]))}


def shown_role(proc: dict) -> str:
    """A process's role as the tables show it, marked where the job's figures leave it out."""
    return proc["role"] + ("" if proc.get("in_totals", True) else " (not in totals)")


def guess_role(proc: dict, main_pid: int | None, calls: dict, simulation_s: float = 0.0,
               ops_s: dict[str, float] | None = None, parent_cmd: str = "", under_launcher: bool = False) -> str:
    """What a process is to the job, from what the monitor can see of it.

    A worker forked by multiprocessing's forkserver keeps the forkserver's command line: what
    it calls tells them apart.

    Args:
        proc: its ``process`` record (``cmd``, ``python``, ``role``: the user's, or None).
        main_pid: the PID rlscope-top was attached to.
        calls: its calls per category (None where nothing is probed).
        simulation_s: its time in simulation operations (sampled stacks: gymnasium's step...).
        ops_s: its seconds per operation (a DataLoader worker's loop is ``data_loading``).
        parent_cmd: its parent's command line ("" when the parent is not the job's).
        under_launcher: its parent is one of ``launchers``: a Python process it started is the
            job's main one.
    """
    ops_s = ops_s or {}
    if proc.get("role"):
        return proc["role"]
    cmd = proc.get("cmd") or ""
    if proc["pid"] == main_pid:
        return ROLE_MAIN if proc.get("python", True) else ROLE_LAUNCHER
    if under_launcher and proc.get("python", True):
        return ROLE_MAIN
    if ops_s.get(DATA_LOADING):
        return "dataloader"
    if calls.get("simulator") or simulation_s > 0:
        return "env worker"
    if any(calls.values()):
        return "worker"
    helper = helper_role(cmd, parent_cmd)
    if helper:
        return helper
    if FORKSERVER in cmd:                        # the forkserver's own children keep its command
        return "worker"
    if not proc.get("python", True):
        return "native"
    return "worker"


def waits_for(waits: list[list] | None, waiting_s: float | None, role_of: dict[int, str]) -> list[dict]:
    """What a process waited for, from its main thread's blocked samples (collect/waits.py):
    each wait's share of the samples, and that share of its ``waiting_s``.

    Args:
        waits: the process record's ``waits``, ``[[what, peer pid or 0 or SHARED, samples]]``.
        waiting_s: its waiting seconds (None: not known).
        role_of: pid -> role of the job's processes (to name the peer).
    """
    total = sum(n for _, _, n in waits or ())
    out = []
    for what, peer, n in waits or ():
        if peer == SHARED:
            label = f"a {what} several of the job's processes hold"
        elif peer:
            label = f"PID {peer} ({role_of.get(peer, 'process')}) via {what}"
        elif what in ("pipe", "socket"):
            label = f"a {what} to outside the job"
        else:
            label = what
        out.append({"what": label, "kind": what, "pid": peer if peer > 0 else None, "samples": n,
                    "share": round(n / total, 4),
                    "seconds": None if waiting_s is None else round(waiting_s * n / total, 6)})
    return out


def python_at_work(python_s: float | None, waiting_s: float | None) -> float | None:
    """A process's Python seconds less its waiting (its ``totals.python_s`` holds both)."""
    if python_s is None or waiting_s is None:
        return python_s
    return round(max(0.0, python_s - waiting_s), 6)
