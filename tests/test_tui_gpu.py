"""The GPU panel of the live screen on recorded rings with hand-built GPU records
(tests/gpu_streams.py): kernel time and GPU-bound %, NVML utilization and the ratio, or
the plain how-to line with the CPU-side CUDA API figures."""

from __future__ import annotations

import asyncio

import pytest

import gpu_streams as GS
from streams import write_ring
from rlscope_top.tui.app import RlscopeApp

FROZEN = lambda: 1000.0  # noqa: E731


def _ring(tmp_path, name, **kw) -> str:
    return write_ring(str(tmp_path / f"{name}.bin"), GS.gpu_stream(**kw), capacity=1 << 18)


def _panel(ring, tmp_path, size=(120, 40)) -> str:
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN)
    seen = {}

    async def go():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            seen["gpu"] = str(app.query_one("#gpu").render())
    asyncio.run(go())
    return seen["gpu"]


def test_panel_shows_kernel_time_and_the_nvidia_smi_contrast(tmp_path):
    text = _panel(_ring(tmp_path, "gpu"), tmp_path, size=(200, 40))
    assert "GPU: busy 0.800s (20.0%)" in text and "kernels 160 (40/s, mean 5,000.0 us, 20.0/step)" in text
    assert "overlap cpu-only 64% gpu-only 4% both 16% idle 16% (estimated)" in text
    assert "nvidia-smi util 100.0% vs true GPU-bound 20.0%: ratio 5.0x" in text


def test_panel_without_the_agent_says_how_and_keeps_cuda_api_figures(tmp_path):
    text = _panel(_ring(tmp_path, "noagent", cupti=False), tmp_path, size=(240, 40))
    assert "GPU: n/a, no GPU activity measured: for kernel timing launch with `rlscope-top run -- CMD`" in text
    assert "CUDA API (CPU side): 160 launches (40/s); blocked in sync 0.480s = 12.0% of wall (GPU-bound >= this)" in text
    assert "ratio at most 8.3x" in text


@pytest.mark.parametrize("size", [(80, 24), (120, 32)])
def test_snapshot_gpu(snap_compare, tmp_path, size):
    assert snap_compare(RlscopeApp(_ring(tmp_path, "gpu"), str(tmp_path / "s.json"), clock=FROZEN),
                        terminal_size=size)


def test_snapshot_no_gpu(snap_compare, tmp_path):
    ring = _ring(tmp_path, "none", cupti=False, nvml=False)
    assert snap_compare(RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN), terminal_size=(100, 30))


def test_operation_details_show_its_gpu_time_and_overlap(tmp_path):
    """Enter on an operation's row: the GPU time it launched and its own overlap split."""
    app = RlscopeApp(_ring(tmp_path, "ops", ops=True), str(tmp_path / "s.json"), clock=FROZEN)
    seen = {}

    async def go():
        async with app.run_test(size=(160, 40), notifications=True) as pilot:
            await pilot.pause()
            app.query_one("#ops").focus()
            await pilot.press("down")                   # <all> stays on top; inference is next
            app.refresh_view()                          # the once-a-second refresh keeps the selection
            await pilot.pause()
            seen["cursor"] = app.query_one("#ops").cursor_row
            await pilot.press("enter")
            await pilot.pause()
            seen["notes"] = [n.message for n in app._notifications]
    asyncio.run(go())
    assert seen["cursor"] == 1
    note = next(n for n in seen["notes"] if n.startswith("inference"))
    assert ("GPU 0.400s launched here, 10.0 kernels/step; of its wall time: CPU+GPU 17%, GPU only 3%, "
            "CPU only 67%, idle 13%") in note


def test_g_asks_before_it_injects_and_only_where_there_is_a_collector(tmp_path):
    ring = _ring(tmp_path, "nogpu", cupti=False)
    asked = []
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN, request_gpu=lambda: asked.append(1))
    seen = {}

    async def go():
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            await pilot.press("g")
            seen["question"] = str(app.screen.query_one("#confirm").render())
            await pilot.press("n")                      # no: nothing happens
            await pilot.pause()
            seen["after_no"] = list(asked)
            await pilot.press("g", "y")
            await pilot.pause()
            seen["after_yes"] = list(asked)
    asyncio.run(go())
    assert "Inject rlscope-top's GPU agent into PID 42 with ptrace?" in seen["question"]
    assert seen["after_no"] == [] and seen["after_yes"] == [1]

    view = RlscopeApp(ring, str(tmp_path / "v.json"), clock=FROZEN)        # `view`: no collector to ask
    shown = {}

    async def go2():
        async with view.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            await pilot.press("g")
            await pilot.pause()
            shown["modal"] = len(view.screen_stack)
    asyncio.run(go2())
    assert shown["modal"] == 1
