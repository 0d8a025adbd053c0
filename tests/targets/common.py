"""Shared plumbing for test targets: a ready line, go/done files, a ground-truth log."""

import array
import ctypes
import json
import os
import signal
import sys
import time


def ready(extra: str = "") -> None:
    """Tell the test we are warm and waiting."""
    print(f"ready {os.getpid()} {extra}".strip(), flush=True)


def wait_for(path: str, timeout: float = 120.0) -> None:
    """Sleep (pure Python, no probed calls) until a file exists."""
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            sys.exit(f"timed out waiting for {path}")
        time.sleep(0.01)


def load_simlib(path: str) -> ctypes.CDLL:
    """The toy simulator (tests/native/simlib.c): ``sim_step(us)`` spins for ``us`` microseconds."""
    lib = ctypes.CDLL(path)
    lib.sim_step.argtypes, lib.sim_step.restype = [ctypes.c_double], ctypes.c_double
    if hasattr(lib, "sim_work"):
        lib.sim_work.argtypes, lib.sim_work.restype = [ctypes.c_long], ctypes.c_double
    return lib


class SimBounds:
    """The calling thread's last ``sim_step``: its own first and last clock reads (simlib.c's
    ``sim_last``), in ns. That is its interval at the library's boundary, where the monitor's
    Simulator begins and ends; the binding's dispatch around it is Python."""

    def __init__(self, lib: ctypes.CDLL):
        self._read = lib.sim_last
        self._read.argtypes, self._read.restype = [ctypes.POINTER(ctypes.c_long)], None

    def last(self) -> tuple[int, int]:
        t = (ctypes.c_long * 4)()
        self._read(t)
        return t[0] * 1_000_000_000 + t[1], t[2] * 1_000_000_000 + t[3]


def sim_rounds(lib: ctypes.CDLL, us: float) -> int:
    """``sim_work`` rounds that take ``us`` microseconds now (the best of 5 tries)."""
    best = min(_timed(lambda: lib.sim_work(10_000)) for _ in range(5))
    return max(1, round(10_000 * us * 1e3 / best))


def _timed(fn) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def timer_cost() -> int:
    """What one CLOCK_MONOTONIC read adds to a logged interval (median of back-to-back pairs)."""
    mono = time.monotonic_ns
    d = []
    for _ in range(2001):
        t0 = mono(); t1 = mono()
        d.append(t1 - t0)
    return sorted(d)[len(d) // 2]


def dispatch_cost(fn) -> int:
    """What a binding's dispatch adds to a logged native call: ``fn(0)`` (a call that does no
    work) timed back to back, median, less the timer. The monitor's boundary is the library's
    entry, so a known answer moves this part of each call to Python."""
    mono = time.monotonic_ns
    d = []
    for _ in range(2001):
        t0 = mono(); fn(0); t1 = mono()
        d.append(t1 - t0)
    return max(0, sorted(d)[len(d) // 2] - timer_cost())


def spin(n: int) -> int:
    """Pure Python work: n loop iterations, no native call."""
    x = 0
    for i in range(n):
        x += i * i
    return x


def sized(fn, seconds: float, n: int = 1000) -> int:
    """Iterations of ``fn(n)`` that take ``seconds`` now."""
    t0 = time.perf_counter()
    fn(n)
    return max(1, round(n * seconds / (time.perf_counter() - t0)))


def touch(path: str) -> None:
    with open(path, "w"):
        pass


def counted(go: str, done: str, body, announce: bool = True) -> None:
    """Say ready, run body() once the go file appears, say done, then idle until stopped.

    The body makes the known number of calls: nothing else probed runs in between.
    """
    if announce:
        ready()
    wait_for(go)
    body()
    touch(done)
    while True:
        time.sleep(0.05)


class Truth:
    """Phase intervals in CLOCK_MONOTONIC ns, dumped as JSON on SIGTERM/SIGINT."""

    def __init__(self, path: str):
        self.path, self.items = path, []
        signal.signal(signal.SIGTERM, self._dump)
        signal.signal(signal.SIGINT, self._dump)

    def add(self, kind: str, t0: int, t1: int) -> None:
        self.items.append((kind, t0, t1))

    def _dump(self, *_):
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.items, f)
        os.replace(self.path + ".tmp", self.path)
        sys.exit(0)


class IntervalLog:
    """A hot loop's intervals for the truth (tests/truth.py items): a kind code and two stamps
    each, in arrays. A tuple per interval (~130 bytes with its ints) grew the phased trainer's
    heap by ~36 MB/s, and the page faults of that growth, kernel time in the loop's glue that
    varied by session, moved its truth's Python by up to 5 pp (docs/accuracy.md, "Kernel
    ticks"). 17 bytes here, for the same ~360 ns of bytecode. The loop appends through
    ``kind`` and ``stamp`` (bound methods: no attribute lookup per call)."""

    def __init__(self, names: tuple, tid: int):
        self.names, self.tid = names, tid
        self.kinds, self.stamps = array.array("b"), array.array("q")
        self.kind, self.stamp = self.kinds.append, self.stamps.append

    def clear(self) -> None:
        del self.kinds[:], self.stamps[:]

    def items(self) -> list:
        """(name, tid, t0, t1) per interval; one a signal cut between its appends is dropped."""
        n = min(len(self.kinds), len(self.stamps) // 2)
        k, s = self.kinds, self.stamps
        return [(self.names[k[i]], self.tid, s[2 * i], s[2 * i + 1]) for i in range(n)]

    def write(self, path: str, timer_ns: int, dispatch_ns: int) -> None:
        """The truth file (tests/truth.py): the intervals, then the timer's and the binding's
        own cost per logged call, written whole (the reader never sees half a file)."""
        items = self.items() + [("timer_ns", 0, timer_ns, 0), ("dispatch_ns", 0, dispatch_ns, 0)]
        with open(path + ".tmp", "w") as f:
            json.dump(items, f)
        os.replace(path + ".tmp", path)
