"""`rlscope-top doctor`: can attach work on this machine, and what would it find?"""

from __future__ import annotations

import os
import platform
import time

from ..probes import catalog

OK, FAIL, INFO = "ok", "FAIL", "info"


def _check(name: str, good: bool, detail: str, fix: str, required: bool = True) -> tuple:
    return (name, OK if good else (FAIL if required else INFO), detail if good else fix, required)


def checks(pid: int | None = None) -> list[tuple]:
    """Run every check. Each row: (name, status, detail-or-fix, required)."""
    rows = [_check("root", os.geteuid() == 0, "running as root",
                   "run as root or with sudo (eBPF needs CAP_BPF and CAP_PERFMON)")]
    rows.append(_check("BTF", os.path.exists("/sys/kernel/btf/vmlinux"), "/sys/kernel/btf/vmlinux present",
                       "kernel built without CONFIG_DEBUG_INFO_BTF; uprobes still work", required=False))
    try:
        import bcc  # noqa: F401, PLC0415 - optional system module
        rows.append(_check("bcc", True, "python3-bpfcc importable", ""))
    except Exception as e:
        rows.append(_check("bcc", False, "", f"cannot import bcc ({e}); run `sudo bash scripts/setup.sh`"))
    kdir = f"/lib/modules/{platform.release()}/build"
    rows.append(_check("kernel headers", os.path.exists(os.path.join(kdir, "Makefile")), f"{kdir} -> {os.path.realpath(kdir)}",
                       f"{kdir} missing; run `sudo bash scripts/setup.sh` (links the installed headers)"))
    rows.append(_check("tracefs", os.path.exists("/sys/kernel/tracing/uprobe_events"), "/sys/kernel/tracing mounted",
                       "mount it: `mount -t tracefs nodev /sys/kernel/tracing`"))
    from ..collect.calibration import age_words, load as load_calibration  # noqa: PLC0415
    cal = load_calibration()
    age = age_words(cal.measured_at, time.time())
    rows.append(_check("calibration", cal.measured, f"probe costs measured for {cal.key}"
                       f"{', ' + age if age else ''} (they move with the host's speed: calibrate again after it changes)",
                       f"{cal.problem}; run `rlscope-top calibrate` again (defaults are used)" if cal.problem else
                       "probe costs not measured here: run `rlscope-top calibrate` (defaults are used)",
                       required=False))
    rows.append(_program_row())
    rows += _gpu_rows()
    if pid is not None:
        rows += _target_rows(pid)
    return rows


def _program_row() -> tuple:
    """Whether attach will load the compiled program (probes/bpf_cache.py) or compile it."""
    try:
        from ..probes import bpf_cache, catalog, uprobe_multi  # noqa: PLC0415
        from ..probes.program import program_text  # noqa: PLC0415
        text = program_text(catalog.builtin(), generic=uprobe_multi.wanted())
        kept = bpf_cache.read(text) is not None
        where = bpf_cache.path_for(text)
    except Exception as e:          # no bcc: the bcc row says so
        kept, where = False, f"({type(e).__name__})"
    return _check("compiled program", kept, f"kept: attach skips the compile ({where})",
                  "not kept yet: the first attach compiles it (2-5 s); "
                  "`sudo .venv/bin/python -m rlscope_top.probes.bpf_cache` compiles it now", required=False)


def _gpu_rows() -> list[tuple]:
    dev = any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0"))
    rows = [_check("GPU", dev, "NVIDIA device nodes present", "no NVIDIA GPU: GPU figures will be n/a", required=False)]
    try:
        import pynvml  # noqa: PLC0415 - optional extra
        pynvml.nvmlInit()
        rows.append(_check("NVML", True, f"driver {pynvml.nvmlSystemGetDriverVersion()}", ""))
    except Exception as e:
        rows.append(_check("NVML", False, "", f"NVML unavailable ({type(e).__name__}); install the `gpu` extra on a GPU host",
                           required=False))
    try:
        import cupti  # noqa: F401, PLC0415 - optional extra
        rows.append(_check("CUPTI", True, "cupti-python importable", ""))
    except Exception:
        rows.append(_check("CUPTI", False, "", "cupti-python not installed (`pip install .[gpu]`)", required=False))
    return rows


def _target_rows(pid: int) -> list[tuple]:
    from ..probes.maps import mapped_files  # noqa: PLC0415 - only needed with a PID
    from ..collect.target import check_target, command_line  # noqa: PLC0415
    from ..errors import RlscopeError  # noqa: PLC0415
    try:
        check_target(pid)
    except RlscopeError as e:
        return [_check(f"PID {pid}", False, "", f"{e.message}; {e.hint}")]
    paths = mapped_files(pid)
    rows = [_check(f"PID {pid}", True, command_line(pid)[:80], "")]
    groups: dict[str, set[str]] = {}
    for spec in catalog.builtin():
        for p in paths:
            if spec.matches(p):
                groups.setdefault(spec.group, set()).add(os.path.basename(p))
    for g in catalog.groups():
        found = groups.get(g)
        rows.append(_check(f"  {g}", bool(found), ", ".join(sorted(found or [])),
                           "not mapped (probes attach if it is loaded later)", required=False))
    from ..probes.gpu_region import find  # noqa: PLC0415

    region = find(pid)
    rows.append(_check("  gpu agent", region is not None, f"loaded (region at {region[0]:#x})" if region else "",
                       "no GPU agent (no kernel timing): attach with --gpu-activity to inject it, or start the job "
                       "with `rlscope-top run -- CMD` or RLSCOPE_GPU_ACTIVITY=1", required=False))
    return rows


def run(pid: int | None = None, out=print) -> int:
    """Print the checks; exit code 0 when attach can work."""
    rows = checks(pid)
    width = max(len(r[0]) for r in rows)
    for name, status, text, _ in rows:
        out(f"{status:>4}  {name:<{width}}  {text}")
    bad = [r for r in rows if r[1] == FAIL and r[3]]
    out("attach can work" if not bad else f"attach cannot work: fix the {len(bad)} FAIL line(s) above")
    return 0 if not bad else 1
