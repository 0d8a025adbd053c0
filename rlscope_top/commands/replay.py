"""``rlscope-top replay FILE``: a recording's summary, or the live screen played back.

Headless, the recording's records go through the same accounting and summary builder as the
session's, with what the session took from outside them (the ``fin`` record): the summary
equals the one the session wrote. ``--from S1``/``--to S2`` keep the window between S1 and S2
seconds into the session (its counters less those at S1: recording.since). On the screen,
a thread writes the records into a private ring at the pace they were recorded (``--speed``)
and the live screen reads that ring as it reads a session's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time

from ..account.books import Books
from ..report import summary as S
from ..ring import recording
from ..ring.ring import DEFAULT_CAPACITY, RingWriter


Window = recording.Window


def summary_of(path: str, window: Window = (None, None)) -> dict:
    """The summary of a recording (the session's own when it ended cleanly and the window is all of it)."""
    rec, records = recording.load(path, window)
    books = Books()
    books.feed(records)
    fin = rec.fin if window == (None, None) else None
    summary = S.build(books.cpu, books.gpu, ring_path=(fin or {}).get("ring_path", ""), dropped=(fin or {}).get("dropped", 0))
    if fin and fin.get("detach_s") is not None:
        summary["overhead"]["detach_s"] = fin["detach_s"]
    return summary


def run(path: str, *, headless: bool, window: Window, summary_path: str | None,
        speed: float, interval_s: float) -> int:
    """The ``replay`` command. Returns the exit code."""
    if headless or not (sys.stdout.isatty() and sys.stdin.isatty()):
        summary = summary_of(path, window)
        if summary_path:
            written, _ = S.write_safely(summary, summary_path, summary.get("pid") or 0)
        S.render(summary, S.table_console(summary_path))
        if summary_path:
            print(f"rlscope-top: summary written to {written}", file=sys.stderr)
        return 0
    return _screen(path, window, summary_path, speed, interval_s)


class Playback:
    """A recording played into a private ring for the live screen to read as it reads a
    session's: forward at ``speed`` times the recorded pace (0: all at once), paused, sped up
    or slowed down, and moved by ``seek`` (back: a new ring replayed up to the new position;
    ``generation`` counts them, so the screen knows to read the new one)."""

    STEP_S = 0.02

    def __init__(self, path: str, window: Window, speed: float):
        self.recording, self._records = recording.load(path, window)
        stamped = [r["ts"] for r in self._records if "ts" in r]
        self._t0 = min(stamped, default=0)
        self.length_s = (max(stamped, default=0) - self._t0) / 1e9
        size = sum(64 + len(str(r)) for r in self._records)       # a ring big enough not to lap
        self._cap = min(512 << 20, max(DEFAULT_CAPACITY, (size * 2 + 7) & ~7))
        self._dir = tempfile.mkdtemp(prefix="rlscope-replay-")
        self._lock = threading.Lock()
        self.speed, self.playing = (speed or 1.0), True
        self.position_s = self.length_s if speed == 0 else 0.0
        self.generation = 0
        self._next = 0                       # index of the next record to write
        self._ring = self._new_ring()
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=self._run, name="rlscope-replay", daemon=True)
        self._feeder.start()

    @property
    def ring_path(self) -> str:
        """The ring the screen should read now."""
        return self._ring.path

    def status(self) -> str:
        """The header's time cursor, e.g. ``replay 12.3/60.0 s x2 >``."""
        with self._lock:
            state = ">" if self.playing and self.position_s < self.length_s else "||"
            return f"replay {self.position_s:.1f}/{self.length_s:.1f} s x{self.speed:g} {state}"

    def toggle(self) -> None:
        """Play or pause."""
        with self._lock:
            self.playing = not self.playing

    def scale_speed(self, factor: float) -> None:
        """Speed up or slow down (1/64x to 64x)."""
        with self._lock:
            self.speed = min(64.0, max(1 / 64, self.speed * factor))

    def seek(self, delta_s: float) -> None:
        """Move the cursor; back means a new ring, replayed from the start up to it."""
        with self._lock:
            new = min(self.length_s, max(0.0, self.position_s + delta_s))
            back, self.position_s = new < self.position_s, new
            if back:
                self._ring.close(remove=True)
                self.generation += 1
                self._ring, self._next = self._new_ring(), 0
            self._write_until(self._t0 + int(new * 1e9))     # the screen's next read has it all

    def close(self) -> None:
        """Stop playing and remove the rings."""
        self._stop.set()
        self._feeder.join(timeout=2)
        self._ring.close(remove=True)
        shutil.rmtree(self._dir, ignore_errors=True)

    def _new_ring(self) -> RingWriter:
        return RingWriter(os.path.join(self._dir, f"ring-{self.generation}.bin"), capacity=self._cap)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.STEP_S):
            now = time.monotonic()
            with self._lock:
                if self.playing:
                    self.position_s = min(self.length_s, self.position_s + (now - last) * self.speed)
                self._write_until(self._t0 + int(self.position_s * 1e9))
            last = now

    def _write_until(self, limit_ns: int) -> None:
        recs = self._records
        while self._next < len(recs) and recs[self._next].get("ts", 0) <= limit_ns:
            self._ring.write(recs[self._next])
            self._next += 1


def _screen(path: str, window: Window, summary_path: str | None, speed: float, interval_s: float) -> int:
    from ..tui.app import RlscopeApp  # noqa: PLC0415 - the screen only when asked

    play = Playback(path, window, speed)
    try:
        RlscopeApp(play.ring_path, summary_path or f"rlscope-top-replay-{os.getpid()}.json", interval_s=interval_s,
                   pid=play.recording.pid, player=play).run()
    finally:
        play.close()
    return 0
