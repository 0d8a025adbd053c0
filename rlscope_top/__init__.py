"""rlscope-top: live cross-stack profiler for deep RL training.

Importing this package is cheap and has no dependencies beyond the standard library:
``rlscope_top.operation`` is meant to stay in production code.
"""

from .annotate import operation

__version__ = "0.1.0"
__all__ = ["operation", "__version__"]
