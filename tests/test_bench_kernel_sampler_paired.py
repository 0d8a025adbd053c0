"""bench/kernel_sampler_paired.py's switch: it finds a loaded program's `pycfg` map, reads the
sampler's period, turns it off (0) and back to what it was, as the kernel map then holds."""

from __future__ import annotations

import ctypes as ct
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
pytestmark = pytest.mark.ebpf


def _kernel_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return int(next(x for x in f if x.startswith("map_id:")).split()[1])


def test_switch_turns_the_period_off_and_back(ebpf):
    if not shutil.which("bpftool"):                  # scripts/setup.sh installs it, as CI runs
        if os.environ.get("RLSCOPE_REQUIRE_EBPF") == "1":
            pytest.fail("bpftool not installed but RLSCOPE_REQUIRE_EBPF=1. Hint: bash scripts/setup.sh")
        pytest.skip("bpftool not installed (scripts/setup.sh installs it)")
    from bcc import BPF  # noqa: PLC0415

    from kernel_sampler_paired import SamplerSwitch  # noqa: PLC0415

    b = BPF(text="BPF_ARRAY(pycfg, u64, 2);")
    try:
        cfg = b["pycfg"]
        cfg[ct.c_int(0)] = ct.c_uint64(4_000_003)
        cfg[ct.c_int(1)] = ct.c_uint64(2_500_000)
        sw = SamplerSwitch(_kernel_id(cfg.map_fd))
        assert sw.on == 4_000_003
        sw.set(False)
        assert cfg[ct.c_int(0)].value == 0 and cfg[ct.c_int(1)].value == 2_500_000
        sw.set(True)
        assert cfg[ct.c_int(0)].value == 4_000_003 and sw.read() == 4_000_003
        assert SamplerSwitch().id.isdigit()          # found by name among the loaded maps
    finally:
        b.cleanup()
