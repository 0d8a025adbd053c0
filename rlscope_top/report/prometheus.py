"""``--prometheus [HOST:]PORT``: the session's figures as Prometheus metrics.

The session's loop publishes the summary document as it stands (``SessionMetrics.publish``,
once per refresh, from the thread that owns the accounting); a scrape reads the latest one
through prometheus_client, never the accounting itself. Several hosts, or several sessions,
are summed by Prometheus: every series carries ``host``, ``pid`` and ``role`` labels
(docs/prometheus.md).
"""

from __future__ import annotations

import socket
import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..errors import UsageError
from ..vocab import CATEGORIES, TRANSITIONS

DEFAULT_HOST = "127.0.0.1"    # root's figures stay on this machine unless asked: 0.0.0.0:PORT


def parse_address(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` as (host, port).

    Raises:
        UsageError: not a port in 1..65535.
    """
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--prometheus {text!r}: not a port", hint="give PORT or HOST:PORT, e.g. 9464 or 0.0.0.0:9464")
    return host, int(port)


class SessionMetrics:
    """A prometheus_client collector over the latest published summary document."""

    def __init__(self, role: str = "main"):
        self._doc: dict | None = None
        self._lock = threading.Lock()
        self.role = role
        self.host = socket.gethostname()

    def publish(self, doc: dict) -> None:
        """The summary document as it stands (called by the session loop)."""
        with self._lock:
            self._doc = doc

    def describe(self):
        """No fixed description: the families are known once a document is published."""
        return []

    def collect(self):
        """Metric families from the latest document (called by prometheus_client per scrape)."""
        with self._lock:
            doc = self._doc
        if doc is None:
            return
        base = ["host", "pid", "role"]
        ids = [self.host, str(doc.get("pid", 0)), self.role]
        tot, calls, trans = doc.get("totals") or {}, doc.get("calls") or {}, doc.get("transitions") or {}
        wall = CounterMetricFamily("rlscope_wall_seconds", "Seconds the session has watched the process", labels=base)
        wall.add_metric(ids, tot.get("wall_s") or 0.0)
        yield wall
        secs = CounterMetricFamily("rlscope_category_seconds", "Seconds per category (exclusive; Python includes "
                                   "off-CPU)", labels=[*base, "category"])
        ncalls = CounterMetricFamily("rlscope_calls", "Calls into a category", labels=[*base, "category"])
        for c in CATEGORIES:
            if tot.get(f"{c}_s") is not None:
                secs.add_metric([*ids, c], tot[f"{c}_s"])
            if calls.get(c) is not None:
                ncalls.add_metric([*ids, c], calls[c])
        yield secs
        yield ncalls
        tr = CounterMetricFamily("rlscope_transitions", "Transitions between categories", labels=[*base, "transition"])
        for t in TRANSITIONS:
            if trans.get(t) is not None:
                tr.add_metric([*ids, t], trans[t])
        yield tr
        yield from self._job_cpu(doc, base, ids)
        yield from self._operations(doc, base, ids)
        yield from self._processes(doc, base, ids)
        yield from self._gpu(tot, doc, base, ids)
        oh = GaugeMetricFamily("rlscope_overhead_ratio", "The session's self-reported cost to the process "
                               "(fraction of its wall time)", labels=base)
        oh.add_metric(ids, ((doc.get("overhead") or {}).get("estimated_pct") or 0.0) / 100)
        yield oh
        steal = (doc.get("machine") or {}).get("steal_pct")
        if steal is not None:          # n/a: no series, never a zero
            st = GaugeMetricFamily("rlscope_host_steal_ratio", "Share of all CPUs' time the hypervisor gave to "
                                   "other guests over the session (on-CPU times include it)", labels=base)
            st.add_metric(ids, steal / 100)
            yield st

    @staticmethod
    def _job_cpu(doc: dict, base: list, ids: list):
        """The job's CPU view over every thread (its `openmp`: a pool spinning for work)."""
        cpu = (doc.get("job") or {}).get("cpu_s") or {}
        fam = CounterMetricFamily("rlscope_job_cpu_seconds", "On-CPU seconds of every thread of the job by "
                                  "category (openmp: native threads in an OpenMP runtime)", labels=[*base, "category"])
        for c, v in cpu.items():
            if v is not None:
                fam.add_metric([*ids, c], v)
        yield fam

    @staticmethod
    def _operations(doc: dict, base: list, ids: list):
        fam = CounterMetricFamily("rlscope_operation_seconds", "Seconds per operation and category",
                      labels=[*base, "operation", "category"])
        for name, op in (doc.get("operations") or {}).items():
            for c in CATEGORIES:
                v = op.get(f"{c}_s")
                if v is not None:
                    fam.add_metric([*ids, name, c], v)
        yield fam

    @staticmethod
    def _processes(doc: dict, base: list, ids: list):
        """Per process of the job (the session's own series are their sum)."""
        labels = [*base, "process", "process_role", "category"]
        secs = CounterMetricFamily("rlscope_process_category_seconds", "Seconds per category of one process "
                                   "of the job", labels=labels)
        ncalls = CounterMetricFamily("rlscope_process_calls", "Calls into a category by one process", labels=labels)
        for p in doc.get("processes") or []:
            who = [*ids, str(p["pid"]), p.get("role") or ""]
            for c in CATEGORIES:
                if (p.get("totals") or {}).get(f"{c}_s") is not None:
                    secs.add_metric([*who, c], p["totals"][f"{c}_s"])
                if (p.get("calls") or {}).get(c) is not None:
                    ncalls.add_metric([*who, c], p["calls"][c])
        yield secs
        yield ncalls

    @staticmethod
    def _gpu(tot: dict, doc: dict, base: list, ids: list):
        if tot.get("gpu_s") is not None:
            fam = CounterMetricFamily("rlscope_gpu_busy_seconds", "Seconds at least one kernel or copy ran (CUPTI)", labels=base)
            fam.add_metric(ids, tot["gpu_s"])
            yield fam
        contrast = (doc.get("gpu") or {}).get("contrast") or {}
        for key, name, text in (("nvml_util_pct", "rlscope_nvml_utilization_ratio",
                                 "What nvidia-smi reports as GPU utilization (NVML), session mean"),
                                ("gpu_bound_pct", "rlscope_gpu_bound_ratio",
                                 "True GPU-bound share of the session (CUPTI: a kernel or copy running)")):
            if contrast.get(key) is not None:
                fam = GaugeMetricFamily(name, text, labels=base)
                fam.add_metric(ids, contrast[key] / 100)
                yield fam


def serve(address: tuple[str, int], metrics: SessionMetrics, notify) -> object | None:
    """Serve /metrics on ``address`` in a daemon thread; a port in use or a refused bind is
    one notice and no exporter (the session goes on).

    Returns:
        the HTTP server (``shutdown()`` stops it), or None.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    host, port = address
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        notify("warn", f"Prometheus exporter not started on {host}:{port}: {e.strerror or e}; the session goes on")
        return None
    notify("status", f"Prometheus metrics on http://{host}:{port}/metrics")
    return server
