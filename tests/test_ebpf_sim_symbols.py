"""--sim-lib LIB:SYM with a SYM the library lacks (the toy simulator, real eBPF).

Mapped at attach: an error, exit 2, before the BPF compile. Loaded later: one warning
line, and the session goes on with the symbols that exist.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from support import CLI, REPO, load_summary, stop, wait_file
from rlscope_top import errors as E

pytestmark = pytest.mark.ebpf


def _files(tmp_path):
    return {k: tmp_path / k for k in ("go_load", "loaded", "go_call", "done")}


def test_misspelled_symbol_in_a_mapped_library_exits_2_before_compiling(ebpf, target, simlib, tmp_path):
    f = _files(tmp_path)
    t = target("simlib_late.py", simlib, 1, *f.values())
    f["go_load"].touch()
    wait_file(f["loaded"])
    # a compile would fail with EXIT_BPF_COMPILE here: exit 2 shows the check came first
    p = subprocess.run([*CLI, "attach", str(t.pid), "--duration", "2", "--sim-lib", f"{simlib}:sim_step,sim_stpe"],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO),
                       env={**os.environ, "BCC_KERNEL_SOURCE": "/nonexistent"})
    assert p.returncode == E.EXIT_USAGE, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr and len(lines) == 2, p.stderr
    assert lines[0].startswith("rlscope-top: error: --sim-lib") and "defines no function sim_stpe" in lines[0]
    assert "did you mean sim_step?" in lines[0] and f"mapped by PID {t.pid}" in lines[0]
    assert lines[1].startswith("  hint: ") and f"rlscope-top symbols {simlib}" in lines[1]
    assert t.p.poll() is None


def test_correct_symbols_in_a_mapped_library_still_attach(ebpf, target, monitor, simlib, tmp_path):
    f = _files(tmp_path)
    t = target("simlib_late.py", simlib, 7, *f.values())
    f["go_load"].touch()
    wait_file(f["loaded"])
    m, summary = monitor(t.pid, "--sim-lib", "libtoysim.so:sim_step")
    f["go_call"].touch()
    wait_file(f["done"])
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    assert load_summary(summary)["calls"]["simulator"] == 7


def test_misspelled_symbol_in_a_library_loaded_later_is_one_warning(ebpf, target, monitor, simlib, tmp_path):
    f = _files(tmp_path)
    t = target("simlib_late.py", simlib, 11, *f.values())
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step,sim_stpe")
    f["go_load"].touch()
    wait_file(f["loaded"])
    warn = m.wait_line("sim_stpe", stream="stderr", timeout=15)
    m.wait_line("probes for sim:libtoysim.so", stream="stderr", timeout=15)
    f["go_call"].touch()
    wait_file(f["done"])
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    assert "defines no function sim_stpe" in warn and f"`rlscope-top symbols {simlib}`" in warn
    waiting = [ln for ln in m.stderr_text.splitlines() if "--sim-lib libtoysim.so: not loaded (yet)" in ln]
    assert len(waiting) == 1 and "attach when the target loads it" in waiting[0], m.stderr_text
    assert sum("sim_stpe" in ln for ln in m.stderr_text.splitlines()) == 1, m.stderr_text
    s = load_summary(summary)
    assert s["calls"]["simulator"] == 11
    assert s["probes"]["missing"]["sim:libtoysim.so"] == ["sim_stpe"]
    assert s["probes"]["attached"]["sim:libtoysim.so"]["libs"] == [simlib]


def test_a_sim_lib_path_that_does_not_exist_exits_2_before_compiling(ebpf, target, simlib, tmp_path):
    f = _files(tmp_path)
    t = target("simlib_late.py", simlib, 1, *f.values())
    gone = tmp_path / "nowhere" / "libtoysim.so"
    p = subprocess.run([*CLI, "attach", str(t.pid), "--duration", "2", "--sim-lib", f"{gone}:sim_step"],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO),
                       env={**os.environ, "BCC_KERNEL_SOURCE": "/nonexistent"})
    assert p.returncode == E.EXIT_USAGE, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == [f"rlscope-top: error: --sim-lib {gone}: no such file", lines[1]], p.stderr
    assert lines[1].startswith("  hint: ") and f"rlscope-top doctor {t.pid}" in lines[1]
    assert t.p.poll() is None


def test_a_library_replaced_on_disk_is_probed_in_the_copy_the_process_runs(ebpf, target, monitor, simlib, tmp_path):
    """`pip install -U` under a running job: maps names the library `... (deleted)` and its path
    holds another file. Both used to be skipped (no probe, "not loaded (yet)"); the probes now go
    in through /proc/PID/map_files, the inode the process runs, and count every call."""
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("simlib_replaced.py", simlib, tmp_path / "libtoysim.so", 1009, go, done)
    m, summary = monitor(t.pid, "--sim-lib", "libtoysim.so:sim_step")
    go.touch()
    wait_file(done)
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["calls"]["simulator"] == 1009, s["calls"]
    assert "probes for sim:libtoysim.so (libtoysim.so (deleted))" in m.stderr_text, m.stderr_text
    assert "--sim-lib libtoysim.so: not loaded" not in m.stderr_text
