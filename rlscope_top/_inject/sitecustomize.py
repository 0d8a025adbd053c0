"""Injected by rlscope-top (``rlscope-top run``, or ``RLSCOPE_GPU_ACTIVITY=1``).

Python imports the first ``sitecustomize`` on its path at start-up; rlscope-top puts
this directory first on PYTHONPATH. It loads the GPU activity agent beside it, then
imports the ``sitecustomize`` that would have run without us, so nothing changes for
the program. It never raises: a failure here must not stop the user's program.
"""

import importlib
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _agent():
    sys.path.insert(0, _HERE)
    try:
        import rlscope_gpu_agent  # noqa: PLC0415
    finally:
        sys.path.remove(_HERE)
    return rlscope_gpu_agent


def _start() -> None:
    try:
        a = _agent()
        if os.environ.get(a.ENV_MONITOR):
            a.launch_hook()          # holds until the monitor has attached its probes
        elif os.environ.get(a.ENV_ACTIVITY) == "1":
            a.listen()
    except Exception as e:  # never break the program being profiled
        print(f"rlscope-top: GPU activity agent not started: {e}", file=sys.stderr)


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


_chain()   # first: it may set up the paths cupti is imported from
_start()
