"""rlscope-top: live cross-stack profiler for deep RL training."""

__version__ = "0.1.0"
