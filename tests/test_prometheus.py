"""Issue 13 (3): `--prometheus` serves the session's figures through prometheus_client, and a
real Prometheus server sums two sessions (two "nodes", each on its own target) to the targets'
own truth."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rlscope_top.errors import EXIT_USAGE, UsageError
from rlscope_top.report import prometheus as P
from support import CLI, stop, wait_file

DOC = {"pid": 23, "totals": {"wall_s": 2.0, "python_s": 1.0, "simulator_s": 0.75, "backend_s": 0.25,
                             "cuda_api_s": None, "gpu_s": None},
       "calls": {"simulator": 1009, "backend": 23, "cuda_api": None},
       "transitions": {"python->simulator": 1009, "python->backend": 23, "python->cuda_api": None},
       "operations": {"collect": {"python_s": 0.5, "simulator_s": 0.75, "backend_s": None}},
       "overhead": {"estimated_pct": 1.5}, "machine": {"steal_pct": 2.5, "steal_cpu_s": 0.1},
       "job": {"cpu_s": {"python": 1.0, "backend": 0.25, "simulator": 0.75, "cuda_api": None, "openmp": 1.9,
                         "native": 0.0, "kernel": 0.01}}}


def _samples(metrics: P.SessionMetrics) -> dict:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(metrics)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("host", "pid", "role")))
            out[(s.name, key)] = (s.value, s.labels)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("text, want", [("9464", ("127.0.0.1", 9464)), ("0.0.0.0:9464", ("0.0.0.0", 9464)),
                                        ("[::1]:80", ("::1", 80))])
def test_address_forms(text, want):
    assert P.parse_address(text) == want


@pytest.mark.parametrize("text", ["x", "0", "70000", "host:", ""])
def test_a_bad_address_is_a_usage_error(text):
    with pytest.raises(UsageError, match="not a port"):
        P.parse_address(text)


def test_the_cli_says_a_bad_address_in_one_line():
    p = subprocess.run([*CLI, "attach", str(os.getpid()), "--prometheus", "nope"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert "not a port" in p.stderr and "Traceback" not in p.stderr


def test_metrics_follow_the_summary_document():
    m = P.SessionMetrics(role="learner")
    assert _samples(m) == {}                      # nothing published yet: no series, not zeros
    m.publish(DOC)
    got = _samples(m)
    assert got[("rlscope_category_seconds_total", (("category", "simulator"),))][0] == 0.75
    assert got[("rlscope_calls_total", (("category", "simulator"),))][0] == 1009
    assert got[("rlscope_transitions_total", (("transition", "python->backend"),))][0] == 23
    assert got[("rlscope_operation_seconds_total", (("category", "simulator"), ("operation", "collect")))][0] == 0.75
    assert got[("rlscope_wall_seconds_total", ())][0] == 2.0
    assert got[("rlscope_overhead_ratio", ())][0] == pytest.approx(0.015)
    assert got[("rlscope_host_steal_ratio", ())][0] == pytest.approx(0.025)
    assert got[("rlscope_job_cpu_seconds_total", (("category", "openmp"),))][0] == pytest.approx(1.9)
    assert got[("rlscope_job_cpu_seconds_total", (("category", "native"),))][0] == 0.0
    assert ("rlscope_job_cpu_seconds_total", (("category", "cuda_api"),)) not in got
    # what the machine cannot give is absent, never a zero
    assert ("rlscope_category_seconds_total", (("category", "cuda_api"),)) not in got
    assert not any(name.startswith("rlscope_gpu") for name, _ in got)
    m.publish({**DOC, "machine": {"steal_pct": None, "steal_cpu_s": None}})
    assert not any(name == "rlscope_host_steal_ratio" for name, _ in _samples(m))
    labels = got[("rlscope_wall_seconds_total", ())][1]
    assert labels["pid"] == "23" and labels["role"] == "learner" and labels["host"] == socket.gethostname()


def test_a_port_in_use_is_one_notice_and_no_exporter():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        notes = []
        assert P.serve(("127.0.0.1", port), P.SessionMetrics(), lambda level, msg: notes.append((level, msg))) is None
    assert len(notes) == 1 and notes[0][0] == "warn" and str(port) in notes[0][1]


def _prometheus_server(spawn, tmp_path, ports: list[int]) -> str:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(binary):
        why = "the prometheus server is not installed (scripts/setup.sh installs Debian's)"
        if os.environ.get("RLSCOPE_REQUIRE_EBPF") == "1":
            pytest.fail(why)
        pytest.skip(why)
    cfg = tmp_path / "prometheus.yml"
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    cfg.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rlscope\n"
                   f"    static_configs:\n      - targets: [{targets}]\n")
    web = f"127.0.0.1:{_free_port()}"
    p = spawn([binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
               f"--web.listen-address={web}"])
    p.wait_line("Server is ready to receive web requests", stream="stderr", timeout=60)
    return f"http://{web}"


def _query(url: str, promql: str) -> float | None:
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
        res = json.loads(r.read())["data"]["result"]
    return float(res[0]["value"][1]) if res else None


@pytest.mark.ebpf
def test_a_real_prometheus_sums_two_exporters(ebpf, target, monitor, spawn, simlib, tmp_path):
    """Two sessions stand in for two nodes. Each target makes 23 calls of a 20 ms simulator
    step (a prime count); Prometheus's sum of the simulator seconds across both must match the
    sum the targets measured themselves within 3%, and it must see both."""
    ports = [_free_port(), _free_port()]
    url = _prometheus_server(spawn, tmp_path, ports)
    runs = []
    for i, port in enumerate(ports):
        go, done, truth = tmp_path / f"go{i}", tmp_path / f"done{i}", tmp_path / f"truth{i}.json"
        t = target("sim_count.py", simlib, 23, 20_000, go, done, truth)
        m, _ = monitor(t.pid, "--prometheus", f"127.0.0.1:{port}", "--sim-lib", f"{simlib}:sim_step")
        runs.append((m, go, done, truth))
    for _, go, _, _ in runs:
        go.touch()
    for _, _, done, _ in runs:
        wait_file(done, 60)
    want = sum(json.loads(truth.read_text())["sim_s"] for *_, truth in runs)
    promql = 'sum(rlscope_category_seconds_total{category="simulator"})'
    end, got = time.monotonic() + 30, None
    while time.monotonic() < end:            # scrapes every second; the sessions publish every second
        got = _query(url, promql)
        if got is not None and abs(got - want) <= 0.03 * want:
            break
        time.sleep(0.5)
    assert got is not None and abs(got - want) <= 0.03 * want, (got, want)
    assert _query(url, "count(rlscope_wall_seconds_total)") == 2
    assert _query(url, 'sum(rlscope_calls_total{category="simulator"})') == 46
    for m, *_ in runs:
        assert stop(m) == 0, m.stderr_text
        assert "Prometheus metrics on http://127.0.0.1:" in m.stderr_text
