"""The monitor's environment in the attach benches: as an installed tool runs.

pip writes bytecode (.pyc) for what it installs; a shell with PYTHONDONTWRITEBYTECODE set
(as this VM's is) makes every start compile rlscope-top's and bcc's sources again, ~0.15 s
of an attach that users do not pay. The benches drop that variable and import the monitor
once first, so the caches exist.
"""

from __future__ import annotations

import os
import subprocess
import sys

PY = sys.executable


def monitor_env(extra: dict | None = None) -> dict:
    """os.environ without PYTHONDONTWRITEBYTECODE, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **(extra or {})}


def warm_bytecode(repo: str) -> None:
    """Import what an attach imports once, so its bytecode is cached."""
    subprocess.run([PY, "-c", "import rlscope_top.cli, rlscope_top.collect.session, bcc"], cwd=repo,
                   env=monitor_env(), check=True)
