"""rlscope-top: live cross-stack profiler for deep RL training.

Importing this package is cheap and has no dependencies beyond the standard library:
``rlscope_top.operation`` is meant to stay in production code.
"""

from .annotate import operation

__version__ = "0.1.0"
__all__ = ["operation", "enable_gpu_activity", "__version__"]


def enable_gpu_activity(cupti=None) -> str:
    """Let any rlscope-top monitor that attaches to this process see its GPU activity.

    Listens on a per-PID unix socket; while a monitor is connected, CUPTI activity
    (kernels, memcpys, memsets, CUDA API records) is on and streamed to it; when it
    detaches, CUPTI is turned off again. Costs nothing while no monitor is attached.
    Setting ``RLSCOPE_GPU_ACTIVITY=1`` in a process started by ``rlscope-top``'s
    sitecustomize does the same.

    Args:
        cupti: the ``cupti.cupti`` module to use (default: import it); tests pass a
            stand-in that delivers real cupti-python record objects.

    Returns:
        The socket path monitors connect to.
    """
    from ._agent import load  # noqa: PLC0415

    return load().listen(cupti)
