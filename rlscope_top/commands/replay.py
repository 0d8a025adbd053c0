"""``rlscope-top replay FILE``: a recording's summary, or the live screen played back.

Headless, the recording's records go through the same accounting and summary builder as the
session's, with what the session took from outside them (the ``fin`` record): the summary
equals the one the session wrote. ``--to S`` stops S seconds into the session. On the screen,
a thread writes the records into a private ring at the pace they were recorded (``--speed``)
and the live screen reads that ring as it reads a session's.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

from ..account.accounting import Accounting
from ..report import summary as S
from ..ring import recording
from ..ring.ring import DEFAULT_CAPACITY, RingWriter


def summary_of(path: str, to_s: float | None = None) -> dict:
    """The summary of a recording (the session's own when it ended cleanly and ``to_s`` is None)."""
    rec, records = recording.load(path, to_s)
    acct = Accounting()
    acct.feed(records)
    fin = rec.fin if to_s is None else None
    summary = S.build(acct, ring_path=(fin or {}).get("ring_path", ""), dropped=(fin or {}).get("dropped", 0))
    if fin and fin.get("detach_s") is not None:
        summary["overhead"]["detach_s"] = fin["detach_s"]
    return summary


def run(path: str, *, headless: bool, to_s: float | None, summary_path: str | None,
        speed: float, interval_s: float) -> int:
    """The ``replay`` command. Returns the exit code."""
    if headless or not (sys.stdout.isatty() and sys.stdin.isatty()):
        summary = summary_of(path, to_s)
        S.render(summary)
        if summary_path:
            written, _ = S.write_safely(summary, summary_path, summary.get("pid") or 0)
            print(f"rlscope-top: summary written to {written}", file=sys.stderr)
        return 0
    return _screen(path, to_s, summary_path, speed, interval_s)


class Playback:
    """A recording written into a private ring at its recorded pace, ``speed`` times faster
    (0: all at once), for the live screen to read as it reads a session's ring."""

    def __init__(self, path: str, to_s: float | None, speed: float):
        self.recording, records = recording.load(path, to_s)
        size = sum(64 + len(str(r)) for r in records)          # a ring big enough not to lap
        cap = min(512 << 20, max(DEFAULT_CAPACITY, (size * 2 + 7) & ~7))
        self.ring_path = os.path.join(tempfile.mkdtemp(prefix="rlscope-replay-"), "ring.bin")
        self._ring = RingWriter(self.ring_path, capacity=cap)
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=_play, args=(self._ring, records, speed, self._stop), daemon=True)
        self._feeder.start()

    def close(self) -> None:
        """Stop playing and remove the ring."""
        self._stop.set()
        self._feeder.join(timeout=2)
        self._ring.close(remove=True)
        os.rmdir(os.path.dirname(self.ring_path))


def _screen(path: str, to_s: float | None, summary_path: str | None, speed: float, interval_s: float) -> int:
    from ..tui.app import RlscopeApp  # noqa: PLC0415 - the screen only when asked

    play = Playback(path, to_s, speed)
    try:
        RlscopeApp(play.ring_path, summary_path or f"rlscope-top-replay-{os.getpid()}.json", interval_s=interval_s,
                   pid=play.recording.pid).run()
    finally:
        play.close()
    return 0


def _play(ring: RingWriter, records: list[dict], speed: float, stop: threading.Event) -> None:
    """Write the records at their recorded pace, ``speed`` times faster (0: at once)."""
    t_first = next((r["ts"] for r in records if "ts" in r), 0)
    start = time.monotonic()
    for r in records:
        if stop.is_set():
            return
        ts = r.get("ts")
        if speed > 0 and ts is not None:
            due = start + (ts - t_first) / 1e9 / speed
            if stop.wait(max(0.0, due - time.monotonic())):
                return
        ring.write(r)
