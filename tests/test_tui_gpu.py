"""The GPU panel of the live screen on recorded rings with hand-built GPU records
(tests/gpu_streams.py): kernel time and GPU-bound %, NVML utilization and the ratio, or
the plain how-to line with the CPU-side CUDA API figures."""

from __future__ import annotations

import pytest

import gpu_streams as GS
from streams import write_ring
from rlscope_top.tui.app import RlscopeApp

FROZEN = lambda: 1000.0  # noqa: E731


def _ring(tmp_path, name, **kw) -> str:
    return write_ring(str(tmp_path / f"{name}.bin"), GS.gpu_stream(**kw), capacity=1 << 18)


async def _panel(ring, tmp_path, size=(120, 40)) -> str:
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return str(app.query_one("#gpu").render())


@pytest.mark.anyio
async def test_panel_shows_kernel_time_and_the_nvidia_smi_contrast(tmp_path):
    text = await _panel(_ring(tmp_path, "gpu"), tmp_path, size=(200, 40))
    assert "GPU: busy 0.800s (20.0%)" in text and "kernels 160 (40/s, mean 5,000.0 us, 20.0/step)" in text
    assert "overlap cpu-only 64% gpu-only 4% both 16% idle 16% (estimated)" in text
    assert "nvidia-smi util 100.0% vs true GPU-bound 20.0%: ratio 5.0x" in text


@pytest.mark.anyio
async def test_panel_without_the_agent_says_how_and_keeps_cuda_api_figures(tmp_path):
    text = await _panel(_ring(tmp_path, "noagent", cupti=False), tmp_path, size=(240, 40))
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


@pytest.mark.anyio
async def test_operation_details_show_its_gpu_time_and_overlap(tmp_path):
    """Enter on an operation's row: the GPU time it launched and its own overlap split."""
    app = RlscopeApp(_ring(tmp_path, "ops", ops=True), str(tmp_path / "s.json"), clock=FROZEN)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await pilot.pause()
        app.query_one("#ops").focus()
        await pilot.press("down")                   # <all> stays on top; inference is next
        app.refresh_view()                          # the once-a-second refresh keeps the selection
        await pilot.pause()
        assert app.query_one("#ops").cursor_row == 1
        await pilot.press("enter")
        await pilot.pause()
        note = next(n for n in app.notices() if n.startswith("inference"))
        assert ("GPU 0.400s launched here, 10.0 kernels/step; of its wall time: CPU+GPU 17%, GPU only 3%, "
                "CPU only 67%, idle 13%") in note


@pytest.mark.anyio
async def test_g_asks_before_it_injects_and_only_where_there_is_a_collector(tmp_path):
    ring = _ring(tmp_path, "nogpu", cupti=False)
    asked = []
    app = RlscopeApp(ring, str(tmp_path / "s.json"), clock=FROZEN, request_gpu=lambda: asked.append(1))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await pilot.press("g")
        assert "Inject rlscope-top's GPU agent into PID 42 with ptrace?" in str(app.screen.query_one("#confirm").render())
        await pilot.press("n")                      # no: nothing happens
        await pilot.pause()
        assert asked == []
        await pilot.press("g", "y")
        await pilot.pause()
        assert asked == [1]

    view = RlscopeApp(ring, str(tmp_path / "v.json"), clock=FROZEN)        # `view`: no collector to ask
    async with view.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert len(view.screen_stack) == 1
