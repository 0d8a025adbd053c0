"""`rlscope-top demo`: start the built-in PPO workload, attach to it, summarize."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import time

from ..collect.session import Options, run, run_live
from ..errors import DemoError

READY_TIMEOUT_S = 120



def start_workload(seconds: float = 3600.0) -> subprocess.Popen:
    """Start the demo training process and wait until it is training."""
    errf = tempfile.TemporaryFile("w+")   # a file, not a pipe: warnings can never block it
    proc = subprocess.Popen([sys.executable, "-m", "rlscope_top.demo_workload", "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, stderr=errf, text=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.5)
        if r:
            line = proc.stdout.readline()
            if line.startswith("ready"):
                return proc
        if proc.poll() is not None:
            errf.seek(0)
            err = errf.read().strip().splitlines()
            raise DemoError(f"the demo workload exited: {err[-1] if err else proc.returncode}",
                            hint="install the demo extras: `sudo bash scripts/setup.sh`")
    proc.kill()
    raise DemoError("the demo workload did not start in time", hint="check `python -m rlscope_top.demo_workload`")


def demo(opts: Options, live: bool = False) -> dict:
    """Run a session on a fresh demo workload; the workload is stopped afterwards."""
    proc = start_workload()
    try:
        opts.pid = proc.pid
        return run_live(opts) if live else run(opts)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
