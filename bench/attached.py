"""One profiled run, as the case studies take it: start a workload that says `ready` and waits
for a go signal, attach `rlscope-top attach PID --headless` to it, give the go once the monitor
says `attached`, and let the session end when the workload exits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


def go_line(t: subprocess.Popen) -> None:
    """The go signal of workloads that wait for a line on stdin (sb3_train.py, vec_collect.py)."""
    t.stdin.write("\n")
    t.stdin.flush()


def own_seconds(out: str) -> float:
    """The workload's own time for its measured part, from its `time S ...` line."""
    return float(next(ln for ln in out.splitlines() if ln.startswith("time ")).split()[1])


def unprofiled(argv: list[str], cwd: str | None = None) -> float:
    """The workload alone: its own time for the measured part (go given at once)."""
    t = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    wait_ready(t)
    go_line(t)
    out = t.stdout.read()
    t.wait()
    return own_seconds(out)


def wait_ready(t: subprocess.Popen) -> None:
    """Read the workload's stdout until its `ready` line (it fails loudly if the workload dies)."""
    for line in t.stdout:
        if line.startswith("ready"):
            return
    raise RuntimeError(f"the workload exited ({t.wait()}) before it was ready: {' '.join(t.args)}")


def profiled(argv: list[str], go: Callable[[subprocess.Popen], None], summary: str, extra: tuple[str, ...] = (),
             cwd: str | None = None) -> tuple[dict, str]:
    """Run ``argv`` with rlscope-top attached from before its measured part to its exit.

    Args:
        argv: the workload's command line (it prints `ready`, then waits for ``go``).
        go: starts the measured part (writes a go file, or a line on the workload's stdin).
        summary: where the session writes its summary JSON.
        extra: more `attach` options (e.g. ``("--max-overhead", "100")``).
        cwd: the workload's working directory.

    Returns:
        (the summary, the workload's stdout after `ready`).
    """
    t = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    wait_ready(t)
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--headless", "--summary", summary,
                          *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in m.stderr:
        if "attached to PID" in line:
            break
    go(t)
    out = t.stdout.read()
    t.wait()
    _, err = m.communicate(timeout=300)
    if m.returncode:
        raise RuntimeError(f"rlscope-top exited {m.returncode}: {err[-600:]}")
    with open(summary) as f:
        return json.load(f), out


def started(argv: list[str]) -> subprocess.Popen:
    """A long-running workload past its `ready` line, the rest of its stdout read in a thread: one
    that prints as it runs (rl-games: a line an epoch) blocks once a pipe nobody reads is full."""
    t = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wait_ready(t)
    threading.Thread(target=t.stdout.read, daemon=True).start()
    return t


def headless(pid: int, seconds: float, extra: tuple[str, ...] | list[str] = (), keep: str | None = None) -> dict:
    """One `attach PID --headless --duration S` session to a running workload; its summary.

    Args:
        pid: the workload's PID.
        seconds: the session's duration.
        extra: more `attach` options.
        keep: where to copy the summary JSON too, if anywhere.
    """
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.json")
        subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--duration", str(seconds),
                        "--summary", summary, *extra], cwd=REPO, check=True, capture_output=True)
        if keep:
            os.makedirs(os.path.dirname(keep) or ".", exist_ok=True)
            shutil.copy(summary, keep)
        with open(summary) as f:
            return json.load(f)


def op_shares(summary: dict, parts: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """Each part's operations' wall time over all operations' (``<all>`` aside)."""
    ops = summary["operations"]
    whole = sum(o["wall_s"] for n, o in ops.items() if n != "<all>")
    return {p: sum(ops.get(o, {}).get("wall_s", 0.0) for o in names) / whole for p, names in parts.items()}
