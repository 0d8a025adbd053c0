"""`rlscope-top symbols LIB [PATTERN]` on real libraries (no eBPF): the toy simulator built
several ways, a process that maps it, and envpool's MuJoCo module."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from support import CLI, HERE, REPO, wait_file
from rlscope_top import errors as E
from rlscope_top.probes import elf_symbols as ES
from rlscope_top.probes.prologue import is_cheap_at, pair_offset

SIMLIB_C = HERE / "native" / "simlib.c"
TOY_NAMES = {"sim_step", "sim_last", "sim_work", "sim_ref", "sim_reset", "sim_die", "sim_spawn", "sim_worker_done",
             "sim_fault", "sim_fault_rounds"}


def symbols(*args: str, cwd: str | Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "symbols", *args], capture_output=True, text=True, timeout=120, cwd=str(cwd),
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def rows(p: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """SYMBOL -> [SIZE, FROM, PROBE, DEMANGLED] of the table on stdout."""
    lines = p.stdout.splitlines()
    assert lines[0].split()[:4] == ["SYMBOL", "SIZE", "FROM", "PROBE"], p.stdout
    out = {}
    for ln in lines[1:]:
        m = re.match(r"(\S+)\s+(\d+)\s+(\S+)\s+(emulated|out of line|unknown)\s+(.*)$", ln)
        assert m, ln
        out[m[1]] = [m[2], m[3], m[4], m[5]]
    return out


def clean_error(p: subprocess.CompletedProcess, code: int, words: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout and p.stdout == ""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith("rlscope-top: error:") and words in lines[0], p.stderr
    assert lines[1].startswith("  hint: "), p.stderr


def gcc(out: Path, *flags: str, src: Path = SIMLIB_C) -> str:
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return str(out)


def nm_functions(path: str, dynamic: bool) -> dict[str, int]:
    """name -> size of the defined functions nm sees (binutils, an independent reader)."""
    p = subprocess.run(["nm", "-S", "--defined-only", *(["-D"] if dynamic else []), path],
                       capture_output=True, text=True, check=True)
    out = {}
    for ln in p.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 4 and parts[2] in "TtWi":
            out[parts[3].split("@")[0]] = int(parts[1], 16)
    return out


def first_bytes(path: str, name: str) -> bytes:
    """The function's first instruction bytes, as objdump disassembles them."""
    addr = next(int(ln.split()[0], 16) for ln in subprocess.run(
        ["nm", "--defined-only", path], capture_output=True, text=True, check=True).stdout.splitlines()
        if ln.split()[-1] == name)
    p = subprocess.run(["objdump", "-d", f"--start-address={addr}", f"--stop-address={addr + 16}", path],
                       capture_output=True, text=True, check=True)
    hexes = []
    for ln in p.stdout.splitlines():
        m = re.match(r"\s*[0-9a-f]+:\s+((?:[0-9a-f]{2} )+)", ln)
        if m:
            hexes += m[1].split()
    return bytes.fromhex("".join(hexes))


# -- listing -----------------------------------------------------------------------
def test_lists_the_toy_simulator_like_nm_does(simlib):
    p = symbols(simlib)
    assert p.returncode == 0, p.stderr
    got = rows(p)
    dyn, alls = nm_functions(simlib, True), nm_functions(simlib, False)
    assert set(dyn) == TOY_NAMES
    for name in alls.keys() - ES.CRT_HELPERS:
        size, source, probe, demangled = got[name]
        assert int(size) == alls[name] and demangled == name
        assert source == ("dynsym" if name in dyn else "symtab"), name
        code = first_bytes(simlib, name)
        want = "emulated" if is_cheap_at(code, pair_offset(code)) else "out of line"
        assert probe == want, (name, probe)
    assert not ES.CRT_HELPERS & got.keys()
    assert f"--sim-lib {os.path.basename(simlib)}:" in p.stderr and f"dynsym {len(TOY_NAMES)}" in p.stderr


def test_a_cet_build_lists_the_probe_past_its_endbr64(tmp_path):
    """Built with CET (Ubuntu's gcc default) every function starts with `endbr64`, stepped out
    of line; a --sim-lib probe goes on the `push` after it (loader.py, prologue.pair_offset)."""
    plain, cet = gcc(tmp_path / "libplain.so", "-O1"), gcc(tmp_path / "libcet.so", "-O1", "-fcf-protection=full")
    assert first_bytes(cet, "sim_step")[:4] == bytes.fromhex("f30f1efa")
    assert rows(symbols(cet, "sim_step"))["sim_step"][2] == "emulated"
    assert rows(symbols(plain, "sim_work"))["sim_work"][2] == "out of line"     # mov; movq $0,-8(%rsp)


def test_pattern_is_a_glob_or_a_substring_ignoring_case(simlib):
    assert set(rows(symbols(simlib, "sim_s*"))) == {"sim_step", "sim_spawn"}
    assert set(rows(symbols(simlib, "SIM_"))) == TOY_NAMES | {"sim_worker"}
    assert set(rows(symbols(simlib, "*re?et"))) == {"sim_reset"}


def test_json_document(simlib):
    p = symbols(simlib, "sim_", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["library"] == simlib and doc["pattern"] == "sim_" and doc["debug_file"] is None
    assert doc["counts"]["dynsym"] == len(TOY_NAMES) and doc["total"] == sum(doc["counts"].values())
    fns = {f["symbol"]: f for f in doc["functions"]}
    assert set(fns) == TOY_NAMES | {"sim_worker"}         # the worker thread's static function: symtab
    assert fns["sim_worker"]["found_in"] == "symtab"
    nm = nm_functions(simlib, True)
    for name, f in ((n, fns[n]) for n in TOY_NAMES):
        assert f["found_in"] == "dynsym" and f["size"] == nm[name] and f["demangled"] == name
        assert f["probe"] in ("emulated", "out of line") and f["address"] > 0


def test_a_path_relative_to_the_cwd(simlib):
    p = symbols(os.path.basename(simlib), "sim_step", cwd=os.path.dirname(simlib))
    assert p.returncode == 0, p.stderr
    assert set(rows(p)) == {"sim_step"} and simlib in p.stderr


def test_functions_only_in_a_debug_file_found_by_gnu_debuglink(tmp_path):
    lib = gcc(tmp_path / "libdbg.so", "-O0", "-g")
    subprocess.run(["objcopy", "--only-keep-debug", lib, f"{lib}.debug"], check=True)
    subprocess.run(["strip", "--strip-all", lib], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={lib}.debug", lib], check=True, cwd=tmp_path)
    assert "now" not in nm_functions(lib, True)
    doc = json.loads(symbols(lib, "--json").stdout)
    fns = {f["symbol"]: f for f in doc["functions"]}
    assert doc["debug_file"] == f"{lib}.debug"
    assert fns["now"]["found_in"] == "debuginfo" and fns["sim_step"]["found_in"] == "dynsym"


def test_debug_file_found_by_build_id(tmp_path, monkeypatch):
    lib = gcc(tmp_path / "libbid.so", "-O0", "-g", "-Wl,--build-id=sha1")
    with ES.ElfFile(lib) as elf:
        bid = elf.build_id()
    assert bid and len(bid) == 40
    root = tmp_path / "debug"
    (root / ".build-id" / bid[:2]).mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", lib, str(root / ".build-id" / bid[:2] / f"{bid[2:]}.debug")],
                   check=True)
    subprocess.run(["strip", "--strip-all", lib], check=True)
    monkeypatch.setattr(ES, "DEBUG_ROOT", str(root))
    listing = ES.functions(lib)
    assert listing.debug_file.endswith(f"{bid[2:]}.debug")
    assert {f.name: f.source for f in listing.functions}["now"] == "debuginfo"


def test_demangles_cpp_names():
    assert ES.demangle("_ZN5torch16PyWarningHandlerC1Ev") == "torch::PyWarningHandler::PyWarningHandler()"
    assert ES.demangle("sim_step") == "sim_step"
    assert ES.demangle("_Znot_mangled") == "_Znot_mangled"


# -- errors: one line, a hint, exit 2 -------------------------------------------------
def test_missing_file(tmp_path):
    clean_error(symbols(str(tmp_path / "libnope.so")), E.EXIT_USAGE, "no such file")


def test_not_elf(tmp_path):
    f = tmp_path / "libfake.so"
    f.write_text("not a library\n" * 10)
    clean_error(symbols(str(f)), E.EXIT_USAGE, "is not an ELF file")
    empty = tmp_path / "libempty.so"
    empty.write_bytes(b"")
    clean_error(symbols(str(empty)), E.EXIT_USAGE, "is not an ELF file")


def test_truncated_library(simlib, tmp_path):
    data = Path(simlib).read_bytes()
    for n in (64, len(data) // 2, len(data) - 100):
        cut = tmp_path / f"libcut{n}.so"
        cut.write_bytes(data[:n])
        clean_error(symbols(str(cut)), E.EXIT_USAGE, "is truncated or damaged")


def test_directory(tmp_path):
    clean_error(symbols(str(tmp_path)), E.EXIT_USAGE, "is a directory")


def test_pattern_that_matches_nothing_suggests_a_broader_one(simlib):
    p = symbols(simlib, "sim_stpe")
    clean_error(p, E.EXIT_USAGE, "matches 'sim_stpe'")
    assert "broader pattern, e.g. '*sim_*'" in p.stderr       # half the misspelt name: it matches


def test_stripped_library_without_any_function_symbol(tmp_path):
    lib = gcc(tmp_path / "libhidden.so", "-O1", "-fvisibility=hidden", "-s")
    p = symbols(lib)
    clean_error(p, E.EXIT_USAGE, "has no function symbols")
    assert "debug symbols" in p.stderr


# -- LIB named by a process that maps it ----------------------------------------------
@pytest.fixture
def mapping_simlib(target, simlib, tmp_path):
    f = {k: tmp_path / k for k in ("go_load", "loaded", "go_call", "done")}
    t = target("simlib_late.py", simlib, 1, *f.values())
    f["go_load"].touch()
    wait_file(f["loaded"])
    return t


def test_lib_by_name_or_prefix_in_a_process(mapping_simlib, simlib):
    for name in ("libtoysim.so", "libtoysim"):
        p = symbols(name, "--pid", str(mapping_simlib.pid), "sim_st")   # PATTERN after --pid PID too
        assert p.returncode == 0, p.stderr
        assert set(rows(p)) == {"sim_step"} and simlib in p.stderr


def test_lib_the_process_does_not_map(mapping_simlib):
    p = symbols("libnothere.so", "--pid", str(mapping_simlib.pid))
    clean_error(p, E.EXIT_USAGE, f"PID {mapping_simlib.pid} maps no library named libnothere.so")


def test_pid_that_does_not_exist(simlib):
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    clean_error(symbols("libtoysim.so", "--pid", str(pid)), E.EXIT_NO_SUCH_PROCESS, f"no process with PID {pid}")


# -- envpool: MuJoCo linked statically into a C++ module -------------------------------
@pytest.fixture
def envpool_target(target, tmp_path):
    if importlib.util.find_spec("envpool") is None:
        pytest.skip("envpool not installed (pip install -e '.[test]')")
    return target("envpool_mujoco.py", "HalfCheetah-v5", 1, tmp_path / "go", tmp_path / "done")


def test_mujoco_in_envpool_module(envpool_target):
    p = symbols("mujoco_gym_envpool.so", "--pid", str(envpool_target.pid), "mj_*")
    assert p.returncode == 0, p.stderr
    got = rows(p)
    for name in ("mj_step", "mj_step1", "mj_step2", "mj_forward", "mj_resetData"):
        assert got[name][1] == "dynsym", name
    assert "envpool/mujoco/mujoco_gym_envpool.so" in p.stderr
    cpp = json.loads(symbols("mujoco_gym_envpool.so", "--pid", str(envpool_target.pid), "--json",
                             "mujoco::user::VFS::*").stdout)["functions"]
    assert cpp and all(f["symbol"].startswith("_ZN6mujoco4user3VFS") for f in cpp)
    assert all(f["demangled"].startswith("mujoco::user::VFS::") for f in cpp)


def test_a_sim_lib_not_mapped_yet_names_the_mapped_libraries_close_to_it():
    from rlscope_top.commands.symbols_cmd import not_mapped_note

    mapped = ["/x/site-packages/mujoco/libmujoco.so.4.0.0", "/usr/lib/libm.so.6", "/x/torch/lib/libshm.so"]
    assert not_mapped_note("libmujco.so", mapped) == (
        "--sim-lib libmujco.so: not loaded (yet) (it maps libmujoco.so.4.0.0); its probes attach when the target loads it")
    assert not_mapped_note("libfoo.so", mapped) == (
        "--sim-lib libfoo.so: not loaded (yet); its probes attach when the target loads it")
