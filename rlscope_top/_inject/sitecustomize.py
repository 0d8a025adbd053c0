"""Put first on PYTHONPATH by rlscope-top (``rlscope-top run``, or ``RLSCOPE_GPU_ACTIVITY=1``).

Python imports the first ``sitecustomize`` on its path at start-up. This one:

- ``rlscope-top run`` (``RLSCOPE_LAUNCH_SOCKET`` set): says hello to the monitor with its
  PID and waits until the monitor has attached its eBPF probes, so nothing the program
  does is missed. Kernel timing comes from the GPU agent, which the CUDA driver loads
  itself (``CUDA_INJECTION64_PATH``).
- ``RLSCOPE_GPU_ACTIVITY=1``: loads the GPU agent (``RLSCOPE_GPU_AGENT``), idle until a
  monitor attaches.

Then it imports the ``sitecustomize`` that would have run without it, so nothing else
changes for the program. Standard library only; it never raises.
"""

import importlib
import json
import os
import socket
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
HOLD_TIMEOUT_S = 60.0       # run anyway if the monitor never says start


def _hold(path: str) -> None:
    """Hello, then block until the monitor says start (or goes away)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(HOLD_TIMEOUT_S)
        conn.connect(path)
        conn.sendall(json.dumps({"t": "hello", "pid": os.getpid(), "python": sys.version.split()[0]}).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            chunk = conn.recv(4096)
            if not chunk:
                break
            buf += chunk
        conn.close()
    except OSError:
        pass                         # the monitor is gone: run unmonitored


def _agent(path: str) -> None:
    import ctypes  # noqa: PLC0415

    ctypes.CDLL(path)


def _start() -> None:
    try:
        if os.environ.get("RLSCOPE_LAUNCH_SOCKET"):
            path = os.environ.pop("RLSCOPE_LAUNCH_SOCKET")       # children of the program are not held
            _hold(path)
        elif os.environ.get("RLSCOPE_GPU_ACTIVITY") == "1" and os.environ.get("RLSCOPE_GPU_AGENT"):
            _agent(os.environ["RLSCOPE_GPU_AGENT"])
    except Exception as e:  # never break the program being profiled
        print(f"rlscope-top: not started: {e}", file=sys.stderr)


def _chain() -> None:
    """Import the sitecustomize this one shadows (Debian ships one, so may a venv)."""
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:
        print(f"rlscope-top: the original sitecustomize failed: {e}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


_chain()   # first: it may set up paths the program relies on
_start()
