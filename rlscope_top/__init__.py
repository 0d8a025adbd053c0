"""rlscope-top: live cross-stack profiler for deep RL training.

Importing this package is cheap and has no dependencies beyond the standard library:
``rlscope_top.operation`` is meant to stay in production code.
"""

from .annotate import operation

__version__ = "0.1.0"
__all__ = ["operation", "enable_gpu_activity", "__version__"]


def enable_gpu_activity() -> str | None:
    """Let an rlscope-top monitor that attaches to this process time its GPU kernels.

    Loads rlscope-top's GPU agent (a small C library, built by scripts/setup.sh) into
    the process. It stays idle, one thread asleep, until a monitor attaches; then CUPTI
    activity (kernels, memcpys, memsets) is on, and off again when the monitor leaves.
    Works before or after CUDA is initialised. Never raises.

    Returns:
        The agent's path, or None when it is not built here.
    """
    import ctypes  # noqa: PLC0415
    import os  # noqa: PLC0415

    path = os.environ.get("RLSCOPE_GPU_AGENT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                "probes", "librlscope_gpu.so")
    try:
        ctypes.CDLL(os.path.realpath(path))
    except OSError:
        return None
    return os.path.realpath(path)
