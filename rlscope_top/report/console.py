"""The console the printed summary and `compare` go to."""

from __future__ import annotations

import os
import sys

PIPE_WIDTH = 200   # columns when stdout is a pipe or a file and $COLUMNS says none


def _width(stream=None) -> int:
    """$COLUMNS where it is a positive number; else the terminal's width; else, into a pipe or
    a file, PIPE_WIDTH. rich alone assumes 80 columns there (the operations table's cells came
    out as `7…`), and takes COLUMNS=0 as a width of 0, printing nothing."""
    stream = stream or sys.stdout
    v = os.environ.get("COLUMNS", "")
    if v.isdigit() and int(v) > 0:
        return int(v)
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else PIPE_WIDTH
    except (OSError, ValueError):
        return PIPE_WIDTH


def text_console(stderr: bool = False):
    """A rich Console on stdout (or stderr), as wide as _width() says: the tables are as wide
    as their content, up to that."""
    from rich.console import Console  # noqa: PLC0415 - rich only when printing: off the attach's path

    return Console(width=_width(sys.stderr if stderr else sys.stdout), stderr=stderr)
