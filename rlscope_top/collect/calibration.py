"""Per-machine probe costs: what one hit of each probe kind adds to the target.

`rlscope-top calibrate` measures them (rlscope_top/commands/calibrate.py) and stores them here,
keyed by kernel release and CPU model. Until then the defaults below, measured on
the development VM class (kernel 6.18, see docs/probe-notes.md), are used and
the correction is labelled uncalibrated.

Where a call's probe cost lands: each trap is split around the timestamp the BPF
program takes; the part before it lands in the category being left, the part after
in the category being entered. Calibration measures, per call, the two totals that
matter: ``inside`` (lands in the probed region's category) and ``outside`` (lands in
the caller's), for a begin/end bracket of entry probes and for a uprobe+uretprobe
pair, each on an emulated and on an out-of-line first instruction.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

from ..errors import UnsafePath
from ..safe_files import read_trusted, write_atomic

SCHEMA = "rlscope-top.calibration/1"
DEFAULT_PATH = "/var/lib/rlscope-top/calibration.json"

DEFAULT_KINDS = {  # ns per call; measured on the development VM class (kernel 6.18)
    "bracket": {"outside": 1330, "inside": 790},      # entry probes on begin and end, emulated
    "bracket_ool": {"outside": 10000, "inside": 10000},
    "pair": {"outside": 1450, "inside": 940},          # uprobe + uretprobe, emulated first instruction
    "pair_ool": {"outside": 1130, "inside": 9500},
    "count_torch": {"outside": 3400, "inside": 3400},  # torch's backward counter, a hit (calibrate's count_torch)
    "sched_switch": {"per_switch": 0},
    "tick": {"per_tick": 26000},      # a CPU-clock tick's interrupt beyond the program, an RL-shaped loop (calib_tick.py)
}


def machine_key() -> str:
    """Kernel release and CPU model: the key under which probe costs hold."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.uname().release} | {model}"


def path() -> str:
    """Where calibrations live (RLSCOPE_CALIBRATION overrides)."""
    return os.environ.get("RLSCOPE_CALIBRATION", DEFAULT_PATH)


@dataclasses.dataclass
class Calibration:
    """Costs in ns per hit for each probe kind, and whether they were measured here."""

    kinds: dict
    measured: bool
    key: str
    problem: str = ""      # why a calibration file that is there was not used
    measured_at: float = 0.0   # unix time of the measurement (0: unknown)

    def cost(self, kind: str, emulated: bool, group: str = "") -> dict:
        """The 4-way split used by the BPF program for one catalog probe kind.

        Args:
            kind: catalog kind (pair, enter, exit, count, range_begin, range_end).
            emulated: whether the probed instruction is emulated (cheap) or stepped out of line.
            group: the probe set; torch's begin/end probes have their own measured cost
                (``bracket_torch``: a torch binding in an RL-shaped loop, not a C loop) when
                calibrate measured it,
                and so has its backward counter (``count_torch``: on its own site, in an
                RL-shaped loop; ~3x the C loop's entry probe on an AMD EPYC VM).
        """
        k = self._kind(kind, emulated, group)
        o, i = k["outside"], k["inside"]
        if kind in ("pair", "enter", "exit"):     # a bracket's two probes share its cost
            return {"enter_before": o // 2, "enter_after": i // 2,
                    "exit_before": i - i // 2, "exit_after": o - o // 2}
        half = (o + i) // 4                        # a lone probe: half a bracket, all in one category
        return {"enter_before": half, "enter_after": half, "exit_before": half, "exit_after": half}

    def _kind(self, kind: str, emulated: bool, group: str) -> dict:
        base = "pair" if kind == "pair" else "bracket"
        if group == "torch" and kind in ("enter", "exit") and emulated and "bracket_torch" in self.kinds:
            return self.kinds["bracket_torch"]
        if group == "torch" and kind == "count" and emulated and "count_torch" in self.kinds:
            return self.kinds["count_torch"]
        return self.kinds[base if emulated else base + "_ool"]

    def kernel_share(self, kind: str, emulated: bool, group: str = "") -> float | None:
        """The part of a probe kind's cost that is the target's kernel time (the traps), or
        None where calibrate did not measure it (an older calibration, or none)."""
        share = self._kind(kind, emulated, group).get("kernel_share")
        return share if self.measured else None

    def hit_ns(self, kind: str, emulated: bool, group: str = "") -> int:
        """Total cost of one hit (a pair counts both of its probes)."""
        c = self.cost(kind, emulated, group)
        if kind == "pair":
            return sum(c.values())
        return c["exit_before"] + c["exit_after"] if kind == "exit" else c["enter_before"] + c["enter_after"]


def load() -> Calibration:
    """This machine's measured costs, or the defaults (with ``problem`` saying why, when the
    file is there but cannot be used)."""
    key, p = machine_key(), path()
    try:
        data = _read(p)
    except FileNotFoundError:
        return _defaults(key)
    except (OSError, ValueError) as e:
        return _defaults(key, f"cannot read {p}: {e}")
    except UnsafePath as e:
        return _defaults(key, f"not reading {e.message}")
    if not _is_calibration_file(data):
        return _defaults(key, f"{p} is not a {SCHEMA} file")
    entry = data["machines"].get(key)
    if entry is None:
        return _defaults(key)
    bad = _invalid(entry)
    if bad:
        return _defaults(key, f"{p}: {bad}")
    at = entry.get("measured_at")
    at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0
    return Calibration({**DEFAULT_KINDS, **entry["kinds"]}, True, key, measured_at=at)


def age_words(measured_at: float, now: float) -> str:
    """How long ago a calibration was measured, for a person ('' when unknown)."""
    if not measured_at or now < measured_at:
        return ""
    s = now - measured_at
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= n:
            k = int(s // n)
            return f"{k} {unit}{'s' if k > 1 else ''} ago"
    return "just now"


MAX_FILE = 4 << 20


def _read(p: str):
    """The file's JSON, read as root with care (its figures move every estimate): see
    safe_files.read_trusted; root's own file is trusted too."""
    return json.loads(read_trusted(p, MAX_FILE, owners=(0,), hint="run `rlscope-top calibrate` again"))


def _defaults(key: str, problem: str = "") -> Calibration:
    return Calibration(dict(DEFAULT_KINDS), False, key, problem)


def _is_calibration_file(data) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("machines"), dict)


MAX_NS = 10_000_000     # 10 ms a probe hit: far beyond any trap; a larger figure is a broken file


def _invalid(entry) -> str:
    """What is wrong with one machine's entry, or "" (every figure a finite ns count >= 0, the
    kernel shares in [0, 1])."""
    kinds = entry.get("kinds") if isinstance(entry, dict) else None
    if not isinstance(kinds, dict):
        return "its entry for this machine has no \"kinds\""
    for name, k in kinds.items():
        if not isinstance(k, dict):
            return f"{name} is not a table of costs"
        for field, v in k.items():
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            top = 1.0 if field == "kernel_share" else MAX_NS
            if not ok or not 0 <= v <= top:
                return f"{name}.{field} is {v!r}, not a number in [0, {top:g}]"
        need = {"sched_switch": {"per_switch"}, "tick": {"per_tick"}}.get(name, {"outside", "inside"})
        if not need <= k.keys():
            return f"{name} lacks {', '.join(sorted(need - k.keys()))}"
    return ""


def save(kinds: dict, details: dict) -> str:
    """Store measured costs for this machine, keeping other machines' entries."""
    p = path()
    data = {"schema": SCHEMA, "machines": {}}
    try:
        old = _read(p)
        if _is_calibration_file(old):
            data = old      # other machines' entries are kept; a broken or untrusted file is replaced
    except (OSError, ValueError, UnsafePath):
        pass
    data["machines"][machine_key()] = {"kinds": kinds, "details": details, "measured_at": time.time()}
    os.makedirs(os.path.dirname(p), exist_ok=True)
    write_atomic(p, json.dumps(data, indent=2), mode=0o644)
    return p
