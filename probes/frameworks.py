"""Framework slots: which ML framework a Backend probe belongs to.

The kernel keeps, per thread, Backend time, calls and Python->Backend transitions per
slot (probes/fw_prelude.c), charged to the framework of the outermost Backend call in
progress. A backend call made inside another framework's call counts for the outer one.

JAX executes asynchronously: a jitted call returns once the computation is dispatched.
So JAX has two slots, ``jax`` (dispatch: the jitted call) and ``jax:wait`` (the Python
thread blocked in ``block_until_ready``). Both are Backend time; the split says which is
which, and the on/off-CPU split shows the waiting.
"""

from __future__ import annotations

from .catalog import CAT_BACKEND, ENTER, EXIT, ProbeSpec

# Slot ids, as the kernel stores them (index = id). Append only: the ring carries ids.
SLOTS = ("other", "torch", "tensorflow", "jax", "jax:wait")
NFW = 8                  # slots the kernel reserves per thread (power of two; see fw_prelude.c)
WAIT_FLAG = 0x100        # probe_fw flag: this entry probe opens a wait bracket


def slot_of(spec: ProbeSpec) -> int:
    """The framework slot of a Backend probe (0 for a backend probe of no known framework)."""
    name = f"{spec.group}:wait" if spec.part == "wait" else spec.group
    return SLOTS.index(name) if name in SLOTS else 0


def probe_fw_value(spec: ProbeSpec) -> int:
    """What the kernel's probe_fw map holds for a probe: its slot, and WAIT_FLAG when it
    is an entry probe that opens a wait bracket."""
    if spec.category != CAT_BACKEND:
        return 0
    flag = WAIT_FLAG if spec.part == "wait" and spec.kind == ENTER else 0   # a pair closes its own
    return slot_of(spec) | flag


def is_guarded_exit(spec: ProbeSpec) -> bool:
    """An exit probe that closes only an open wait bracket (its function also runs elsewhere)."""
    return spec.kind == EXIT and spec.part == "wait"


def framework_of(slot_name: str) -> tuple[str, str]:
    """('jax', 'wait') for 'jax:wait'; ('torch', '') for 'torch'."""
    fw, _, part = slot_name.partition(":")
    return fw, part
