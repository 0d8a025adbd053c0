"""The collector's scan reads /proc/PID/maps once per tick (probes/proc_maps.py), asks which
specs a library's name matches once per path (ProbeSet._wanted), and checks the target's life
with a pidfd (target.AliveCheck): the same answers as before, for less of the monitor's CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rlscope_top.collect.target import AliveCheck
from rlscope_top.probes import catalog, proc_maps
from rlscope_top.probes.loader import ProbeSet

MAPS = """\
55d0c0a00000-55d0c0a2b000 r--p 00000000 fe:00 260386                     /usr/bin/python3.11
55d0c0a2b000-55d0c0d2c000 r-xp 0002b000 fe:00 260386                     /usr/bin/python3.11
7f1700000000-7f1700021000 rw-p 00000000 00:00 0 
7f174da31000-7f174da52000 rw-s 00000000 00:01 1479                       /memfd:rlscope-top-ops (deleted)
7f174e000000-7f174f000000 r-xp 00100000 fe:00 99                         /opt/my lib/libtorch_cpu.so
7f1750000000-7f1750001000 r-xp 00000000 fe:00 100                        /tmp/old.so (deleted)
7f1751000000-7f1751001000 --xp 00000000 fe:00 101                        /tmp/x [uprobes]
7ffd1e000000-7ffd1e021000 rw-p 00000000 00:00 0                          [stack]
7fffffffe000-7ffffffff000 r-xp 00000000 00:00 0                          [uprobes]
garbage line
"""


def test_the_exec_mappings_read_as_a_line_by_line_parse_does():
    want = [r for r in proc_maps.parse(MAPS.splitlines()) if "x" in r.perms and r.path.startswith("/")]
    got = proc_maps.exec_in(MAPS)
    assert got == want
    assert [r.path for r in got] == ["/usr/bin/python3.11", "/opt/my lib/libtorch_cpu.so", "/tmp/old.so (deleted)",
                                     "/tmp/x [uprobes]"]
    assert got[1].start == 0x7F174E000000 and got[1].offset == 0x100000 and got[1].inode == 99


def test_a_live_process_reads_the_same_both_ways():
    me = os.getpid()
    with open(f"/proc/{me}/maps") as f:
        want = [r for r in proc_maps.parse(f) if "x" in r.perms and r.path.startswith("/")]
    assert [r.path for r in proc_maps.exec_files(me)] == [r.path for r in want]
    assert proc_maps.regions(-1) == [] and proc_maps.exec_files(-1) == []


def test_one_read_per_process_inside_the_block_and_fresh_outside(monkeypatch):
    opened = []
    real_open = open

    def counting_open(path, *a, **k):
        opened.append(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(proc_maps, "open", counting_open, raising=False)
    me, parent = os.getpid(), os.getppid()
    with proc_maps.one_read():
        proc_maps.exec_files(me)
        proc_maps.named(me, "[uprobes]")
        proc_maps.regions(me)
        with proc_maps.one_read():          # nested: still the outer block's read
            proc_maps.exec_files(me)
        proc_maps.exec_files(parent)
    assert opened == [f"/proc/{me}/maps", f"/proc/{parent}/maps"]
    proc_maps.exec_files(me)
    proc_maps.exec_files(me)
    assert opened[2:] == [f"/proc/{me}/maps"] * 2


def test_the_specs_a_library_takes_are_the_same_and_asked_once_per_path(monkeypatch):
    specs = catalog.builtin()
    ps = ProbeSet(os.getpid(), specs)
    paths = {"/x/torch/lib/libtorch_cpu.so", "/x/torch/lib/libtorch_python.so", "/lib/libc.so.6",
             "/e/envpool/mujoco/mujoco_gym_envpool.so", "/m/libmujoco.so.3.1.0", "/c/libcudart.so.12"}
    copies = {"/e/envpool/mujoco/mujoco_gym_envpool.so": frozenset({"mj_step"})}
    want: dict[int, set[str]] = {}
    for i, s in enumerate(specs):
        for p in paths:
            if s.matches(p) or (s.any_lib and s.symbol in copies.get(p, ())):
                want.setdefault(i, set()).add(p)
    got = ps._wanted(paths, copies)
    assert {i: set(v) for i, v in got.items()} == want
    assert any(specs[i].any_lib and "/e/envpool/mujoco/mujoco_gym_envpool.so" in v for i, v in got.items())

    def asked(self, path):
        raise AssertionError(f"asked again: {path}")

    monkeypatch.setattr(catalog.ProbeSpec, "matches", asked)
    assert {i: set(v) for i, v in ps._wanted(paths, copies).items()} == want
    assert {i: set(v) for i, v in ps._wanted(paths, {}).items()} != want      # copies still count live


def test_alive_check_counts_a_zombie_as_gone():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    alive = AliveCheck(p.pid)
    try:
        assert alive()
        end = time.monotonic() + 10
        while alive() and time.monotonic() < end:
            time.sleep(0.02)
        assert not alive()
        assert p.poll() is not None or open(f"/proc/{p.pid}/stat").read().split(") ")[1][0] == "Z"
    finally:
        p.wait()
        alive.close()
    assert not alive()                       # closed: psutil's answer for a reaped pid
    assert not AliveCheck(2 ** 22 + 1)()     # no such process (above pid_max)


def test_named_takes_the_whole_path_field_only(monkeypatch):
    from rlscope_top.probes import ann_region
    from rlscope_top.probes.maps import uprobes_page

    monkeypatch.setattr(proc_maps, "_read", lambda pid: {"text": MAPS})
    assert [r.path for r in proc_maps.named(7, "[uprobes]")] == ["[uprobes]"]
    assert uprobes_page(7) == (0x7FFFFFFFE000, 0x7FFFFFFFF000)
    assert ann_region.find_memfd(7, "rlscope-top-ops") == (0x7F174DA31000, "/proc/7/map_files/7f174da31000-7f174da52000")
    assert ann_region.find_memfd(7, "rlscope-top") is None          # a prefix of the name is not it
    assert proc_maps.named(7, "/nowhere", "/tmp/old.so") == [] and proc_maps.named(7, "/tmp/old.so (deleted)")


MAPPER = """
import mmap, os, sys
kept = []
print("ready", flush=True)
for line in sys.stdin:
    what = line.strip()
    if what == "lib":                       # executable code mapped from a file, as a dlopen makes
        f = open(sys.executable, "rb")
        kept.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))
    elif what == "heap":                    # the heap grows (a replay buffer filling up)
        kept.append(bytearray(8 << 20))
    elif what == "memfd":                   # a shared region, as the annotation region and the GPU agent's
        fd = os.memfd_create("probe-region")
        os.ftruncate(fd, 1 << 16)
        m = mmap.mmap(fd, 1 << 16)
        m[:4096] = b"x" * 4096
        kept.append(m)
    print("mapped", flush=True)
"""


def test_a_scan_reads_the_maps_again_only_when_they_may_have_changed():
    p = subprocess.Popen([sys.executable, "-c", MAPPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(what: str) -> None:
        p.stdin.write(what + "\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "mapped"

    try:
        assert p.stdout.readline().strip() == "ready"
        ps = ProbeSet(p.pid, catalog.builtin())
        s0 = proc_maps.stamp([p.pid])
        assert s0[0][0] == p.pid and s0[0][1] > 0
        assert ps.maps_changed(100.0) is True              # the first scan
        assert ps.maps_changed(100.5) is False             # nothing moved
        do("heap")
        assert ps.maps_changed(100.7) is False             # the heap is nothing a scan looks for
        do("lib")
        assert proc_maps.stamp([p.pid]) != s0
        assert ps.maps_changed(101.0) is True              # a new library's code
        assert ps.maps_changed(101.5) is False
        do("memfd")
        assert ps.maps_changed(101.7) is True              # a new shared region
        assert ps.maps_changed(101.8) is False
        ps.modes[1] = "off"
        assert ps.maps_changed(102.0) is True              # a category's mode: its libraries wait on it
        assert ps.maps_changed(102.5) is False
        assert ps.maps_changed(102.0 + 5.0) is True        # FULL_SCAN_S, changed or not
    finally:
        p.kill()
        p.wait()
    assert proc_maps.stamp([p.pid]) == ((p.pid, -1, -1),)     # gone
