"""Per-framework split, regex symbol resolution and the generated BPF for TF/JAX probes
(no eBPF, no root: pure functions and the program text)."""

from __future__ import annotations

import subprocess

import pytest

from support import CLI, REPO
from rlscope_top.account import frameworks as F
from rlscope_top.probes import catalog, frameworks as FW, symbols
from rlscope_top.probes.program import program_text
from test_import_hygiene import _loaded

SLOTS = list(FW.SLOTS)


def _thread(py=True, **slots) -> dict:
    """A thread record whose fw split has the given slots: name -> (on, off, oh, calls, trans)."""
    n = len(SLOTS)
    fw = {"ns": [[0, 0] for _ in range(n)], "calls": [0] * n, "trans": [0] * n, "oh": [0] * n}
    for name, (on, off, oh, calls, trans) in slots.items():
        k = SLOTS.index(name.replace("_wait", ":wait"))
        fw["ns"][k], fw["oh"][k], fw["calls"][k], fw["trans"][k] = [on, off], oh, calls, trans
    return {"tid": 1, "py": py, "fw": fw}


def test_split_sums_threads_corrects_and_groups_jax_parts():
    threads = [_thread(torch=(3_000_000_000, 0, 100_000_000, 101, 101), jax=(1_000_000_000, 0, 0, 103, 103)),
               _thread(jax_wait=(10_000_000, 2_000_000_000, 0, 23, 23))]
    out = F.split(SLOTS, {"torch": [], "jax": []}, threads, 5.91, 227, estimated=False)
    assert out["torch"]["backend_s"] == pytest.approx(2.9)          # 3.0 s minus 0.1 s of probe cost
    assert out["torch"]["raw_s"] == pytest.approx(3.0)
    assert out["jax"]["calls"] == 126 and out["jax"]["python->backend"] == 126
    assert out["jax"]["parts"]["dispatch"]["calls"] == 103
    assert out["jax"]["parts"]["wait"]["off_cpu_s"] == pytest.approx(2.0)
    assert out["jax"]["backend_s"] == pytest.approx(3.01)
    assert out["torch"]["share_of_backend"] + out["jax"]["share_of_backend"] == pytest.approx(1.0)
    assert "tensorflow" not in out and "other" not in out       # not attached, never called


def test_split_scales_to_the_estimated_backend_total():
    threads = [_thread(tensorflow=(1_000_000_000, 0, 0, 1009, 1009))]
    out = F.split(SLOTS, {"tensorflow": []}, threads, 4.0, 4036, estimated=True)
    assert out["tensorflow"]["backend_s"] == pytest.approx(4.0)
    assert out["tensorflow"]["calls"] == 4036


def test_render_line_skips_frameworks_never_called():
    summary = {"frameworks": {"jax": {"backend_s": 0.0, "calls": 0}, "torch": {"backend_s": 1.5, "calls": 7}}}
    assert F.render_line(summary) == "backend by framework  torch 1.500s x7"
    assert F.render_line({"frameworks": {"jax": {"backend_s": 0.0, "calls": 0}}}) is None


class _FakeBPF:
    def __init__(self, found):
        self.found = found

    def get_user_functions_and_addresses(self, path, regex):
        return self.found


class _FakeBcc:
    def __init__(self, found):
        self.BPF = _FakeBPF(found)


REGEX_SPEC = next(s for s in catalog.TENSORFLOW if s.sym_re)


def test_resolve_regex_symbol_to_one_name():
    name = REGEX_SPEC.symbol.replace("lts_[0-9]+", "lts_20250814").rstrip("$").replace(".*", "XYZ")
    got = symbols.resolve(_FakeBcc([(name.encode(), 4096), (name.encode(), 4096)]), REGEX_SPEC, "/lib.so")
    assert got.symbol == name and not got.sym_re


@pytest.mark.parametrize("found, words", [
    ([], "this build has no symbol matching"),
    ([(b"_Z24TFE_Py_ExecuteCancelableA", 1), (b"_Z24TFE_Py_ExecuteCancelableB", 2)], "ambiguous"),
])
def test_resolve_reports_missing_or_ambiguous(found, words):
    with pytest.raises(symbols.SymbolMissing, match=words):
        symbols.resolve(_FakeBcc(found), REGEX_SPEC, "/lib.so")


def test_exact_symbols_are_not_resolved():
    spec = catalog.JAX[0]
    assert symbols.resolve(None, spec, "/lib.so") is spec


def test_catalog_slots_and_wait_probes():
    assert {FW.slot_of(s) for s in catalog.TENSORFLOW} == {SLOTS.index("tensorflow")}
    assert FW.slot_of(catalog.TORCH[0]) == SLOTS.index("torch")
    waits = [s for s in catalog.JAX if s.part == "wait"]
    assert [FW.is_guarded_exit(s) for s in waits] == [True, False, False, False]   # the end attaches first
    assert all(FW.probe_fw_value(s) & FW.WAIT_FLAG for s in waits if s.kind == catalog.ENTER)
    pair = [s for s in waits if s.kind == catalog.PAIR]      # the buffer protocol's: it closes its own bracket
    assert len(pair) == 1 and FW.probe_fw_value(pair[0]) == SLOTS.index("jax:wait")
    assert not FW.probe_fw_value(catalog.JAX[0]) & FW.WAIT_FLAG
    assert all(s.kind == catalog.PAIR for s in catalog.TENSORFLOW)
    assert len(SLOTS) <= FW.NFW


def test_program_text_has_the_split_and_a_guarded_wait_exit():
    specs = catalog.builtin()
    text = program_text(specs)
    end = next(i for i, s in enumerate(specs) if FW.is_guarded_exit(s))
    assert f"int p{end}_exit(struct pt_regs *ctx) {{ return fw_wait_exit(ctx, {end}, 1); }}" in text
    assert text.index("struct fwsplit {") < text.index("struct tstate {")
    assert "fw_enter(&s->fw" in text and "fw_time(&s->fw" in text


def test_ebpf_flag_prints_the_program_without_root():
    p = subprocess.run([*CLI, "attach", "1", "--ebpf"], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert p.returncode == 0 and "fw_wait_exit" in p.stdout


def test_new_modules_keep_the_layers_apart():
    assert _loaded(["rlscope_top.probes.frameworks", "rlscope_top.probes.symbols"], ["textual"]) == ""
    assert _loaded(["rlscope_top.account.frameworks", "rlscope_top.report.compare"], ["bcc", "textual"]) == ""


def test_slots_add_up_when_a_wait_costs_more_than_its_on_cpu_time():
    """A wait is mostly off CPU: its probe cost can exceed its on-CPU time. The slots must
    still add up to the category's corrected total (not clamp each slot apart)."""
    threads = [_thread(torch=(2_000_000_000, 0, 100_000_000, 101, 101),
                       jax_wait=(1_000, 1_000_000_000, 5_000, 23, 23))]
    backend_s = (2_000_001_000 - 100_005_000 + 1_000_000_000) / 1e9   # what the category reports
    out = F.split(SLOTS, {"torch": [], "jax": []}, threads, backend_s, 124, estimated=False)
    assert out["torch"]["backend_s"] + out["jax"]["backend_s"] == pytest.approx(backend_s, abs=2e-6)
    assert out["jax"]["parts"]["wait"]["on_cpu_s"] == 0.0
