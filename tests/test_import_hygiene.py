"""Layers talk through the ring: probes never import textual, the TUI never imports bcc."""

import subprocess
import sys

import pytest

CHECK = """
import sys, importlib
for m in {mods!r}:
    importlib.import_module(m)
bad = [name for name in {banned!r} if name in sys.modules]
print(",".join(bad))
"""


def _loaded(mods, banned):
    out = subprocess.run([sys.executable, "-c", CHECK.format(mods=mods, banned=banned)],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("mods,banned", [
    (["rlscope_top.probes.loader", "rlscope_top.probes.catalog", "rlscope_top.collect.collector"], ["textual"]),
    (["rlscope_top.tui", "rlscope_top.tui.app", "rlscope_top.report.view"], ["bcc", "rlscope_top.probes.loader"]),
    (["rlscope_top.account.accounting", "rlscope_top.report.summary", "rlscope_top.ring.ring", "rlscope_top.ring.records",
      "rlscope_top.report.prometheus"],
     ["bcc", "textual"]),
    (["rlscope_top.probes.nvml", "rlscope_top.collect.gpu_source", "rlscope_top.commands.launch", "rlscope_top.probes.gpu_region",
      "rlscope_top.probes.gpu_inject"], ["textual"]),
    (["rlscope_top.report.gpu_summary", "rlscope_top.account.gpu_accounting", "rlscope_top.collect.gpu_join", "rlscope_top.collect.gpu_decode",
      "rlscope_top.ring.gpu_records"], ["bcc", "textual", "rlscope_top.probes.loader", "cupti", "pynvml"]),
    (["rlscope_top.vocab"], ["bcc", "textual", "rich", "msgpack", "numpy", "psutil", "rlscope_top.probes"]),
    # GPU accounting is the CPU accounting's peer, not its child; the reader side needs no numpy
    (["rlscope_top.account.accounting"], ["rlscope_top.account.gpu_figures", "rlscope_top.account.gpu_accounting"]),
    (["rlscope_top.account.gpu_figures"], ["rlscope_top.account.accounting", "numpy", "rich"]),
    (["rlscope_top.account.session_figures", "rlscope_top.report.summary", "rlscope_top.report.view"],
     ["numpy", "rlscope_top.account.gpu_accounting"]),
    # an attach imports numpy only when GPU activity arrives: ~0.15 s of its start (issue 16)
    (["rlscope_top.collect.session", "rlscope_top.collect.gpu_source", "rlscope_top.cli"], ["numpy"]),
    # accounting computes, report presents: no rendering library below report/
    (["rlscope_top.account.session_figures", "rlscope_top.account.books"], ["rich", "rlscope_top.report"]),
])
def test_layer_imports(mods, banned):
    assert _loaded(mods, banned) == ""


def test_annotation_api_is_standard_library_only():
    """`import rlscope_top` is what users leave in production code: nothing heavy behind it."""
    banned = ["textual", "rich", "msgpack", "psutil", "bcc", "torch", "rlscope_top.report.summary",
              "rlscope_top.collect.collector"]
    assert _loaded(["rlscope_top"], banned) == ""


IDLE_GPU = """
import sys
from rlscope_top.account.gpu_accounting import GpuTotals
t = GpuTotals(t0=0)
for u in t.unions():
    u.finalize(5_000_000_000)
    assert u.busy(0, 10**9) == 0 and u.total() == 0
t.finish()
rec = t.record(6_000_000_000)
print("numpy" in sys.modules, rec["all"]["busy_ns"] if "all" in rec else None)
"""


def test_gpu_totals_without_activity_need_no_numpy():
    """A session with no GPU activity keeps GpuTotals ticking (finalize, busy, records, finish)
    without importing numpy; the first activity imports it (tests/test_gpu_records.py)."""
    out = subprocess.run([sys.executable, "-c", IDLE_GPU], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False", out.stdout


def test_the_check_can_fail():
    assert _loaded(["rlscope_top.probes.loader", "textual"], ["textual"]) == "textual"


def test_the_screen_reads_only_the_view_model():
    """tui/ imports nothing of rlscope_top but the view model and the shared words: a panel
    reads `ViewModel` (which asks the accounting), never the summary builder or the ring."""
    import ast  # noqa: PLC0415
    import pathlib  # noqa: PLC0415

    tui = pathlib.Path(__file__).resolve().parents[1] / "tui"
    used = set()
    for path in tui.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:      # relative: from rlscope_top.tui
                base = ["rlscope_top", "tui"][: 2 - (node.level - 1)]
                used.add(".".join(base + ([node.module] if node.module else [])))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlscope_top"):
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.startswith("rlscope_top")}
    assert used <= {"rlscope_top.report.view", "rlscope_top.vocab"}, used
