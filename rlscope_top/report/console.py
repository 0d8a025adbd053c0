"""The console the printed summary and `compare` go to."""

from __future__ import annotations

import os
import sys

PIPE_WIDTH = 200   # columns when stdout is a pipe or a file and $COLUMNS is unset


def text_console():
    """A rich Console on stdout. On a terminal it takes the terminal's width. Into a pipe or
    a file rich would assume 80 columns and cut the operations table's cells to `7…`. So
    there it takes $COLUMNS when set, else PIPE_WIDTH: the tables are as wide as their
    content, up to that."""
    from rich.console import Console  # noqa: PLC0415 - rich only when printing: off the attach's path

    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=PIPE_WIDTH) if piped else Console()
