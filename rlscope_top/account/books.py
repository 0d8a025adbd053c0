"""A session's books: the CPU and the GPU accounting, peers fed the same ring records."""

from __future__ import annotations

import dataclasses

from .accounting import Accounting
from .gpu_figures import GpuView


@dataclasses.dataclass
class Books:
    """The CPU accounting and the GPU accounting side by side; neither owns the other."""

    cpu: Accounting = dataclasses.field(default_factory=Accounting)
    gpu: GpuView = dataclasses.field(default_factory=GpuView)

    def feed(self, records: list[dict]) -> None:
        """Apply records in ring order to both."""
        self.cpu.feed(records)
        self.gpu.feed(records)
