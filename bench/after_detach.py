"""Is a job slower after `rlscope-top attach` detached than before it attached, and why?

An H200 run showed the CUDA launch loop at 0.94x of its speed after an eBPF-only attach/detach
cycle, where a control stretch with no attach held 0.988x. This runs: the loop; its speed
before; a control stretch; one attach (eBPF probes only) and its detach; its speed after;
then process_madvise(MADV_COLLAPSE) on the probed libraries' text and its speed again.
Around each step it reads /proc/PID/smaps for the executable mappings of the probed
libraries: a uprobe write splits a huge-page text mapping into 4k pages (FilePmdMapped
falls), which would cost iTLB misses long after the probe is gone.

usage: sudo python bench/after_detach.py [--reps 2] [--out result.json]   (cd /tmp first)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
LOOP = os.path.join(HERE, "workloads", "launch_loop.py")
LIBS = ("libcuda.so", "libcudart", "libtorch_cuda", "libtorch_cpu", "libc10", "libpython")
FIELDS = ("Rss", "Anonymous", "FilePmdMapped", "AnonHugePages")
MADV_COLLAPSE = 25
SYS_PROCESS_MADVISE, SYS_PIDFD_OPEN = 440, 434


def text_maps(pid: int) -> dict:
    """Per probed library: its executable mappings' sizes (kB) by smaps field, and their ranges."""
    out: dict = {}
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for ln in f:
            p = ln.split()
            if "-" in p[0] and len(p) >= 5 and ":" not in p[0]:
                name = p[5] if len(p) >= 6 else ""
                lib = next((x for x in LIBS if x in os.path.basename(name)), None)
                cur = out.setdefault(lib, {k: 0 for k in FIELDS} | {"ranges": []}) if lib and "x" in p[1] else None
                if cur is not None:
                    lo, hi = (int(x, 16) for x in p[0].split("-"))
                    cur["ranges"].append((lo, hi))
            elif cur is not None and p[0].rstrip(":") in FIELDS:
                cur[p[0].rstrip(":")] += int(p[1])
    return out


def collapse(pid: int, maps: dict) -> dict:
    """process_madvise(MADV_COLLAPSE) over each library's text: 0 or the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    res = {}

    class Iov(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    for lib, m in maps.items():
        errs = []
        for lo, hi in m["ranges"]:
            lo2, hi2 = (lo + (1 << 21) - 1) & ~((1 << 21) - 1), hi & ~((1 << 21) - 1)
            if hi2 <= lo2:
                continue
            iov = Iov(lo2, hi2 - lo2)
            r = libc.syscall(SYS_PROCESS_MADVISE, fd, ctypes.byref(iov), 1, MADV_COLLAPSE, 0)
            errs.append(0 if r >= 0 else ctypes.get_errno())
        res[lib] = errs
    os.close(fd)
    return res


class Loop:
    def __init__(self):
        self.p = subprocess.Popen([PY, LOOP, "--forever"], stdout=subprocess.PIPE, text=True, cwd="/tmp")
        self.p.stdout.readline()
        self.lines: list[dict] = []

    def rate(self, sec: float) -> float:
        end, pts = time.monotonic() + sec, []
        while time.monotonic() < end:
            ln = self.p.stdout.readline()
            if ln.startswith("{"):
                pts.append(json.loads(ln))
        return (pts[-1]["steps"] - pts[0]["steps"]) / (pts[-1]["t"] - pts[0]["t"])

    def drain(self, sec: float) -> None:
        self.rate(sec)

    def close(self):
        self.p.terminate()
        self.p.wait(30)


def one(span: float) -> dict:
    lp = Loop()
    try:
        lp.drain(3)
        r: dict = {"before": lp.rate(span)}
        maps0 = text_maps(lp.p.pid)
        r["control"] = lp.rate(span)
        a = subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(lp.p.pid), "--headless", "-q", "--duration",
                            "6", "--summary", "/tmp/after-detach.json"], capture_output=True, text=True, cwd="/tmp",
                           timeout=120)
        r["attach_rc"] = a.returncode
        lp.drain(1)
        maps1 = text_maps(lp.p.pid)
        r["after"] = lp.rate(span)
        r["collapse"] = collapse(lp.p.pid, maps1)
        maps2 = text_maps(lp.p.pid)
        r["after_collapse"] = lp.rate(span)
        b = r["before"]
        r["ratios"] = {k: round(r[k] / b, 3) for k in ("control", "after", "after_collapse")}
        r["smaps_kB"] = {lib: {"before": {k: maps0.get(lib, {}).get(k) for k in FIELDS},
                               "after_detach": {k: maps1.get(lib, {}).get(k) for k in FIELDS},
                               "after_collapse": {k: maps2.get(lib, {}).get(k) for k in FIELDS}} for lib in maps1}
        return r
    finally:
        lp.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--span", type=float, default=6)
    ap.add_argument("--out")
    a = ap.parse_args()
    thp = {}
    for f in ("enabled", "defrag", "shmem_enabled", "khugepaged/defrag"):
        try:
            thp[f] = open(f"/sys/kernel/mm/transparent_hugepage/{f}").read().strip()
        except OSError as e:
            thp[f] = str(e)
    res = {"thp": thp, "runs": []}
    for _ in range(a.reps):
        res["runs"].append(one(a.span))
        print(json.dumps(res["runs"][-1]["ratios"]), flush=True)
        if a.out:
            json.dump(res, open(a.out, "w"), indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
