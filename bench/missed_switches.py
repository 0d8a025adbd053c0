"""Whose switch-ins sched_switch does not show (docs/accuracy.md, "Whose switch-ins go missing").

A `sched_switch` program notes, per thread of the target, the task its last switch-out went
to and how; a 250 Hz CPU-clock tick that finds the thread running while that switch-out is
the last thing seen counts a missed switch-in, by that task's name. Machine-wide, it also
counts the switches to and from the task that took most of the misses, and that task's slices
(/proc/*/task/*/schedstat over the run). This is what rlscope-top's `tick_on_cpu` repairs and
`probes.missed_switch_ins` counts.

usage: sudo .venv/bin/python bench/missed_switches.py [--pid PID] [--seconds 20]
       (no --pid: a thread that only spins in Python, started here)
"""

from __future__ import annotations

import argparse
import ctypes as ct
import glob
import os
import subprocess
import sys
import time

PROGRAM = r"""
struct st { u32 out; u32 state; char next[16]; };
struct key { char next[16]; u32 state; };
struct name { char s[16]; };
BPF_HASH(th, u32, struct st);
BPF_HASH(miss, struct key, u64);
BPF_ARRAY(cnt, u64, 3);               // switch-outs, switch-ins ending one, ticks of the target's threads
BPF_ARRAY(watch, struct name, 1);       // a task name: switches to and from it, machine-wide
BPF_ARRAY(watched, u64, 2);

static __always_inline int same(const char *a, const char *b) {
    #pragma unroll
    for (int i = 0; i < 15; i++) {
        if (a[i] != b[i])
            return 0;
        if (!a[i])
            return 1;
    }
    return 1;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u32 prev = args->prev_pid, next = args->next_pid;
    struct st *s = th.lookup(&prev);
    if (s) {
        s->out = 1;
        s->state = args->prev_state;
        bpf_probe_read_kernel(s->next, 16, args->next_comm);
        cnt.atomic_increment(0);
    }
    s = th.lookup(&next);
    if (s) {
        if (s->out)            // a switch-in of a switch-out seen (not of one from before the watch)
            cnt.atomic_increment(1);
        s->out = 0;
    }
    int z = 0;
    struct name *w = watch.lookup(&z);
    if (w && w->s[0]) {
        char pc[16], nc[16];
        bpf_probe_read_kernel(pc, 16, args->prev_comm);
        bpf_probe_read_kernel(nc, 16, args->next_comm);
        if (same(nc, w->s))
            watched.atomic_increment(0);
        if (same(pc, w->s))
            watched.atomic_increment(1);
    }
    return 0;
}

int on_tick(struct bpf_perf_event_data *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct st *s = th.lookup(&tid);
    if (!s)
        return 0;
    cnt.atomic_increment(2);
    if (!s->out)
        return 0;
    struct key k = {};
    __builtin_memcpy(k.next, s->next, 16);
    k.state = s->state;
    u64 one = 1, *m = miss.lookup(&k);
    if (m)
        (*m)++;
    else
        miss.update(&k, &one);
    s->out = 0;
    return 0;
}
"""

SPIN = "while True:\n    sum(i * i for i in range(1000))"


def slices(name: str) -> tuple[int, int]:
    """(ns run, slices) summed over every task of that name (/proc/*/task/*/schedstat)."""
    ns = n = 0
    for t in glob.glob("/proc/[0-9]*/task/[0-9]*"):
        try:
            with open(f"{t}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"{t}/schedstat") as f:
                run, _, k = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
        ns, n = ns + run, n + k
    return ns, n


def measure(pid: int, seconds: float) -> dict:
    """Watch PID's threads for ``seconds``; the counts as a plain dict."""
    from bcc import BPF, PerfSWConfig, PerfType  # noqa: PLC0415

    b = BPF(text=PROGRAM)
    for tid in os.listdir(f"/proc/{pid}/task"):
        b["th"][ct.c_uint(int(tid))] = b["th"].Leaf()
    b.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK, fn_name="on_tick",
                        sample_freq=250, cpu=-1)
    time.sleep(seconds / 2)
    misses = {(k.next.decode(errors="replace"), k.state): v.value for k, v in b["miss"].items()}
    top = max(misses, key=misses.get)[0] if misses else ""
    if top:     # the second half also counts that task's switches, machine-wide
        leaf = b["watch"].Leaf()
        leaf.s = top.encode()[:15]
        b["watch"][ct.c_int(0)] = leaf
    before = slices(top) if top else (0, 0)
    time.sleep(seconds / 2)
    after = slices(top) if top else (0, 0)
    b.detach_tracepoint(tp="sched:sched_switch")     # the counts hold still while they are read
    b.detach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK)
    misses = {(k.next.decode(errors="replace"), k.state): v.value for k, v in b["miss"].items()}
    out = {"switch_outs": b["cnt"][ct.c_int(0)].value, "switch_ins": b["cnt"][ct.c_int(1)].value,
           "ticks": b["cnt"][ct.c_int(2)].value, "missed": sorted(misses.items(), key=lambda kv: -kv[1]),
           "watched": top, "to_watched": b["watched"][ct.c_int(0)].value,
           "from_watched": b["watched"][ct.c_int(1)].value,
           "watched_ms": (after[0] - before[0]) / 1e6, "watched_slices": after[1] - before[1]}
    b.cleanup()
    return out


def report(r: dict, seconds: float) -> list[str]:
    """The lines printed for one run."""
    lines = [f"{seconds:g} s: {r['switch_outs']} switch-outs and {r['switch_ins']} switch-ins of the target's "
             f"threads, {r['ticks']} ticks; {sum(n for _, n in r['missed'])} missed switch-ins"]
    for (name, state), n in r["missed"]:
        lines.append(f"  after a switch to {name} (prev_state {state}): {n}")
    if r["watched"]:
        per = r["watched_ms"] / r["watched_slices"] if r["watched_slices"] else 0.0
        lines.append(f"machine-wide over the last {seconds / 2:g} s: {r['to_watched']} switches to {r['watched']}, "
                     f"{r['from_watched']} from it; its slices: {r['watched_slices']} for {r['watched_ms']:.1f} ms "
                     f"({per:.3f} ms each)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, help="the target (default: a spinning Python thread started here)")
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    spin = None if a.pid else subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0 if a.pid else 0.5)
        r = measure(a.pid or spin.pid, a.seconds)
    finally:
        if spin:
            spin.kill()
    print("\n".join(report(r, a.seconds)))


if __name__ == "__main__":
    main()
