"""Load the self-contained GPU activity agent (rlscope_top/_inject/) as a module.

The agent lives beside the sitecustomize that launch mode injects, so that a
program's own Python can load it without rlscope-top installed; inside rlscope-top it
is loaded from the same file.
"""

from __future__ import annotations

import importlib.util
import os
import sys

INJECT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_inject")
NAME = "rlscope_gpu_agent"


def load():
    """The agent module (loaded once per process)."""
    mod = sys.modules.get(NAME)
    if mod is None:
        spec = importlib.util.spec_from_file_location(NAME, os.path.join(INJECT_DIR, f"{NAME}.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = mod
        spec.loader.exec_module(mod)
    return mod
