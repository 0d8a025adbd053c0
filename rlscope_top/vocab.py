"""The words every layer shares: categories and their codes, labels, transitions, the
operation markers, the one "not available" value and how it is shown.

Standard library only: the probes, the accounting, the report and the screen all import it.
The category codes are the ones probes/bpf_program.c uses (tests/test_vocab.py checks).
"""

from __future__ import annotations

CATEGORIES = ("python", "backend", "simulator", "cuda_api")     # index = the kernel's code
CAT_PY, CAT_BACKEND, CAT_SIM, CAT_CUDA = range(4)
NCAT = len(CATEGORIES)
LABELS = {"python": "Python", "simulator": "Simulator", "backend": "Backend", "cuda_api": "CUDA API", "gpu": "GPU",
          "openmp": "OpenMP"}   # openmp: a native thread's category, not a category (summary-schema.md)
TRANSITIONS = {  # name -> (from, to) category codes
    "python->backend": (CAT_PY, CAT_BACKEND),
    "python->simulator": (CAT_PY, CAT_SIM),
    "backend->cuda_api": (CAT_BACKEND, CAT_CUDA),
    "python->cuda_api": (CAT_PY, CAT_CUDA),
}
OVERLAP_KEYS = ("cpu_only", "gpu_only", "both", "idle")    # RL-Scope's CPU/GPU overlap split
ALL_OP = "<all>"          # the whole session, as an operation row
NONE_OP = "<none>"        # time in no operation

NA = None                 # the one "not available" value: JSON null ...
NA_TEXT = "n/a"           # ... shown as this
STEAL_SHOWN_PCT = 1.0     # hypervisor steal shown from here (summary line, header): below, within the figures' error


def fmt(value, spec: str = ",.3f", suffix: str = "") -> str:
    """``value`` formatted with ``spec`` plus ``suffix``, or "n/a" when it is not available."""
    return NA_TEXT if value is NA else f"{format(value, spec)}{suffix}"
