"""Builders for ring records (format v1; documented in docs/ring-format.md).

Every record is a msgpack map with a type key ``t``. Times are CLOCK_MONOTONIC
nanoseconds (the clock BPF's bpf_ktime_get_ns uses) unless a key says otherwise.
"""

from __future__ import annotations

FORMAT = 1
META, COUNTERS, INTERVALS, NOTE, END, MODE, EVENTS = "meta", "ctr", "iv", "note", "end", "mode", "ev"
STACKS = "stk"


def seconds(ns: float) -> float:
    """Nanoseconds as the summary's seconds, rounded to the microsecond."""
    return round(ns / 1e9, 6)


def meta(*, pid: int, command: str, t0_ns: int, wall0: float, interval_s: float, probes: list[dict],
         labels: list[str], groups: dict, missing: dict, host: str, kernel: str,
         calibrated: bool = False, max_overhead_pct: float | None = None, tids0: list | None = None,
         timeline: bool = False, fw_slots: list[str] | None = None, switch_ns: int = 0,
         tick_ns: int = 0, program: dict | None = None) -> dict:
    """Session facts: target, window start, attached probes, whether costs were calibrated,
    and how the program was had (``program``: from the compile cache or bcc, load/attach s)."""
    return {"t": META, "v": FORMAT, "pid": pid, "cmd": command, "t0": t0_ns, "wall0": wall0,
            "interval_s": interval_s, "probes": probes, "labels": labels, "groups": groups,
            "missing": missing, "host": host, "kernel": kernel, "calibrated": calibrated,
            "max_overhead_pct": max_overhead_pct, "tids0": tids0 or [], "timeline": timeline,
            "fw_slots": fw_slots or [], "switch_ns": switch_ns, "tick_ns": tick_ns,
            "program": program}


def thread(*, tid: int, name: str, python: bool, exited: bool, ns: list, trans: list, calls: list,
           oh: list, fw: dict | None = None, ticks: list | None = None, switches: int | None = None,
           preempt_ns: int | None = None, pid: int | None = None, omp_ticks: int = 0) -> dict:
    """Cumulative counters of one thread since attach (``pid``: its process).

    ``ns[c] = [on_cpu, off_cpu]`` for categories python, backend, simulator, cuda_api;
    ``trans[a][b]`` counts entries into b from a; ``calls[c]`` outermost entries;
    ``oh[c]`` calibrated probe cost that landed in category c (on-CPU ns);
    ``fw`` the Backend figures split per framework slot (``meta.fw_slots`` names them):
    ``{"ns": [[on, off]], "calls": [], "trans": [] (python->backend), "oh": []}``;
    ``ticks`` the 250 Hz CPU-clock ticks that found the thread on a CPU, by where its
    instruction pointer was: indices 1-3 in the libraries of backend, simulator, cuda_api
    (the probed ones, those beside them, and simulator engines without probes such as
    envpool's modules: catalog.SIM_ENGINE_LIB), 4 other user code, 5 the kernel (0 unused);
    ``sw`` how many times the thread was switched out (the scheduler probe runs each time);
    ``pre`` its off-CPU ns while still runnable (preempted: waiting for a CPU, not blocked);
    ``omp`` of its user-space ticks, those in an OpenMP runtime (libgomp, libiomp5, libomp:
    counted in ``ticks`` too, under the library's category): an intra-op worker spinning for work.
    """
    rec = {"tid": tid, "name": name, "py": python, "exited": exited, "ns": ns, "trans": trans,
           "calls": calls, "oh": oh}
    if pid is not None:
        rec["pid"] = pid
    if fw is not None:
        rec["fw"] = fw
    if ticks is not None:
        rec["ticks"] = ticks
    if switches is not None:
        rec["sw"] = switches
    if preempt_ns is not None:
        rec["pre"] = preempt_ns
    if omp_ticks:
        rec["omp"] = omp_ticks
    return rec


def target_ticks(threads) -> int:
    """The CPU-clock ticks that found any of these thread records on a CPU: the interrupts the
    target took (each costs it the calibrated ``tick_ns`` beyond the program's own time)."""
    return sum(sum(th.get("ticks") or ()) for th in threads)


FOLD_TID = {True: -1, False: -2}          # the folded rows' tids: Python, other (the main process)
FOLD_PID = 1 << 30                        # the "(N exited processes)" record: above any pid_max (2^22)


def pid_label(pid: int) -> str:
    """How a process's pid is shown: the folded record's reads "folded"."""
    return "folded" if pid == FOLD_PID else str(pid)


def fold_tid(py: bool, pid: int | None, main_pid: int | None) -> int:
    """The tid of an "(N exited threads)" row (collect/thread_fold.py): FOLD_TID in the main
    process, a negative of its own in another."""
    if pid is None or pid == main_pid:
        return FOLD_TID[py]
    return -(2 * pid + (1 if py else 2))


def counters(ts: int, threads: list[dict], hits: list[int], overhead_pct: float = 0.0,
             ops: list[dict] | None = None, procs: list[dict] | None = None) -> dict:
    """All threads' cumulative counters, per-probe hit counts, and the live overhead
    estimate (% of one thread's time over the budget's last window) at ``ts``;
    ``ops``: cumulative counters per operation (absent when the target has none);
    ``procs``: the processes counted (``process`` records), when there is more than one."""
    r = {"t": COUNTERS, "ts": ts, "threads": threads, "hits": hits, "oh_pct": overhead_pct}
    if ops:
        r["ops"] = ops
    if procs:
        r["procs"] = procs
    return r


SHARED = -1     # a wait's peer "pid" when several of the job's processes hold the pipe or socket


def process(*, pid: int, ppid: int, command: str, python: bool, exited: bool, role: str | None,
            ops: list[dict] | None = None, waits: list[list] | None = None, folded: int = 0) -> dict:
    """One process of the job: ``role`` is the user's (``--role PID=NAME``) or None (guessed
    by the accounting); ``python``: it runs a Python interpreter (its main thread is Python's);
    ``ops``: its share of the operations, ``[{id, ns, oh, calls}]`` (the ``ops`` layout);
    ``folded``: the record of that many exited processes added together (pid FOLD_PID);
    ``waits``: samples of its main thread while blocked, ``[[what, peer pid or 0 or SHARED, samples]]``
    (what: "pipe", "socket", or the kind of wait; the peer is the job's process at the other end)."""
    r = {"pid": pid, "ppid": ppid, "cmd": command, "python": python, "exited": exited, "role": role}
    if folded:                       # pid FOLD_PID: this many exited processes, added together
        r["folded"] = folded
    if ops:
        r["ops"] = ops
    if waits:
        r["waits"] = waits
    return r


def operation(*, id: int, name: str, kind: str, source: str, ns: list, trans: list, calls: list,
              oh: list, samples: int | None = None, samples_incl: int | None = None,
              samples_total: int | None = None, nested: dict | None = None, ticks: list | None = None) -> dict:
    """Cumulative counters of one operation, summed over threads (same layout as a thread's).

    ``kind`` is "simulation" or ""; ``source`` is "annotated" (exact boundaries) or
    "sampled" (boundaries seen by the stack sampler). Sampled only: ``samples`` counts
    the stack samples with it innermost, ``samples_incl`` those with it anywhere on
    the stack, ``samples_total`` all samples so far, ``nested`` {op: samples} counts the
    operations on the stack of the samples with this one innermost (itself included).
    ``ticks``: its threads' CPU-clock ticks by where, as a thread's.
    """
    r = {"id": id, "name": name, "kind": kind, "src": source, "ns": ns, "trans": trans,
         "calls": calls, "oh": oh}
    if ticks:
        r["ticks"] = ticks
    if samples is not None:
        r.update(samples=samples, samples_incl=samples_incl, samples_total=samples_total, nested=nested or {})
    return r


def interval(tid: int, kind: str, name: str, t0: int, t1: int) -> list:
    """One closed interval: [tid, kind, name, start, end]."""
    return [tid, kind, name, t0, t1]


def intervals(items: list[list]) -> dict:
    """A batch of closed intervals."""
    return {"t": INTERVALS, "items": items}


def note(ts: int, level: str, msg: str) -> dict:
    """A notice for the user (info, warn, error)."""
    return {"t": NOTE, "ts": ts, "level": level, "msg": msg}


def end(ts: int, reason: str) -> dict:
    """The session ended; counters are final."""
    return {"t": END, "ts": ts, "reason": reason}


def mode(ts: int, category: str, new_mode: str, overhead_pct: float, budget_pct: float) -> dict:
    """The budget changed how a category is measured (timed, count or off)."""
    return {"t": MODE, "ts": ts, "category": category, "mode": new_mode, "overhead_pct": overhead_pct,
            "budget_pct": budget_pct}


def events(items: list[list]) -> dict:
    """Timeline events (``--timeline``): [ts, tid, enter|exit|on|off|new|gone, category]."""
    return {"t": EVENTS, "items": items}


def stacks(ts: int, frames: list[list], items: list[list]) -> dict:
    """Sampled stacks since the previous such record (recordings only, never the ring):
    ``frames`` new interned frames ``[[id, "file:function"]]``; ``items``
    ``[[pid, tid, [frame ids, outermost first], microseconds]]``."""
    return {"t": STACKS, "ts": ts, "frames": frames, "items": items}
