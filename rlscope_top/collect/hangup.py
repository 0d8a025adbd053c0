"""SIGHUP: the terminal closed (an ssh session dropped, a tmux server killed, a window shut).

It ends a session as SIGTERM does, with the summary written, instead of killing the monitor
where it stands (the summary lost). Under ``nohup`` SIGHUP stays ignored.
"""

from __future__ import annotations

import os
import signal
import stat

REASONS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)",
           signal.SIGHUP: "hung up (SIGHUP: the terminal closed)"}


def ending_signals(*signals: int) -> tuple[int, ...]:
    """``signals`` and SIGHUP, less SIGHUP where it is ignored (nohup)."""
    out = [s for s in signals if s != signal.SIGHUP]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        out.append(signal.SIGHUP)
    return tuple(out)


def silence_dead_terminal() -> None:
    """After a hang-up, what is still printed (the summary table, the last line) goes to
    /dev/null instead of failing with EIO. Only a terminal's descriptors move (a hung-up one
    no longer passes isatty, so any character device): a log file or a pipe keeps its output."""
    def terminal(fd: int) -> bool:
        try:
            return stat.S_ISCHR(os.fstat(fd).st_mode)
        except OSError:
            return False
    to_null(*(fd for fd in (1, 2) if terminal(fd)))


def to_null(*fds: int) -> None:
    """Point ``fds`` at /dev/null: what is still written to them goes nowhere, without an error."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(null, fd)
    finally:
        os.close(null)
