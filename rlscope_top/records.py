"""Builders for ring records (format v1; documented in docs/ring-format.md).

Every record is a msgpack map with a type key ``t``. Times are CLOCK_MONOTONIC
nanoseconds (the clock BPF's bpf_ktime_get_ns uses) unless a key says otherwise.
"""

from __future__ import annotations

FORMAT = 1
META, COUNTERS, INTERVALS, NOTE, END = "meta", "ctr", "iv", "note", "end"


def meta(*, pid: int, command: str, t0_ns: int, wall0: float, interval_s: float, probes: list[dict],
         labels: list[str], groups: dict, missing: dict, host: str, kernel: str) -> dict:
    """Session facts: target, window start, attached probes."""
    return {"t": META, "v": FORMAT, "pid": pid, "cmd": command, "t0": t0_ns, "wall0": wall0,
            "interval_s": interval_s, "probes": probes, "labels": labels, "groups": groups,
            "missing": missing, "host": host, "kernel": kernel}


def thread(*, tid: int, name: str, python: bool, exited: bool, ns: list, trans: list, calls: list) -> dict:
    """Cumulative counters of one thread since attach.

    ``ns[c] = [on_cpu, off_cpu]`` for categories python, backend, simulator, cuda_api;
    ``trans[a][b]`` counts entries into b from a; ``calls[c]`` outermost entries.
    """
    return {"tid": tid, "name": name, "py": python, "exited": exited, "ns": ns, "trans": trans,
            "calls": calls}


def counters(ts: int, threads: list[dict], hits: list[int]) -> dict:
    """All threads' cumulative counters and per-probe hit counts at ``ts``."""
    return {"t": COUNTERS, "ts": ts, "threads": threads, "hits": hits}


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
