"""Which mapped libraries carry their own copy of MuJoCo (probes/elf_symbols.defines and
probes/static_copies): real libraries built here, a real process that runs one (no eBPF)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from support import wait_file
from rlscope_top.probes import elf_symbols as ES
from rlscope_top.probes.static_copies import StaticCopies


def gcc(out: Path, src: Path, *flags: str) -> str:
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return str(out)


PADDED = r"""
/* 256 KiB of code first, so that the loader's fault-around near the start of .text
   (64 KiB) never maps mj_step's page: only running it does. */
void pad(void) { __asm__ volatile(".skip 262144, 0x90"); }
int mj_step(int x) { return x + 1; }
"""
IMPORTER = "extern int mj_step(int); int call_it(int x) { return mj_step(x); }\n"


def test_defines_tells_a_definition_from_an_import(tmp_path):
    (tmp_path / "def.c").write_text(PADDED)
    (tmp_path / "imp.c").write_text(IMPORTER)
    definer = gcc(tmp_path / "libdef.so", tmp_path / "def.c", "-O0", "-fno-toplevel-reorder")
    importer = gcc(tmp_path / "libimp.so", tmp_path / "imp.c", "-O0")
    names = frozenset({"mj_step", "mj_forward"})
    assert set(ES.defines(definer, names)) == {"mj_step"}
    assert ES.defines(importer, names) == {}
    assert ES.defines(str(tmp_path / "def.c"), names) == {}     # not ELF
    assert ES.defines(str(tmp_path / "absent.so"), names) == {}


def test_a_copy_counts_once_the_process_has_run_it(spawn, tmp_path):
    (tmp_path / "def.c").write_text(PADDED)
    lib = gcc(tmp_path / "libmjcopy.so", tmp_path / "def.c", "-O0", "-fno-toplevel-reorder")
    go, done = tmp_path / "go", tmp_path / "done"
    code = ("import ctypes, os, sys, time\n"
            f"lib = ctypes.CDLL({lib!r}); print('ready', flush=True)\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            f"lib.mj_step(1); open({str(done)!r}, 'w').close()\n"
            "time.sleep(600)\n")
    t = spawn([sys.executable, "-c", code])
    t.wait_line("ready")
    copies = StaticCopies(t.pid, frozenset({"mj_step", "mj_forward"}))
    paths = {lib, "/usr/lib/x86_64-linux-gnu/libc.so.6"}
    assert copies.scan(paths) == {}               # mapped, defined, never run
    go.touch()
    wait_file(done)
    assert copies.scan(paths) == {lib: frozenset({"mj_step"})}
    assert copies.scan(paths - {lib}) == {}       # unmapped since
