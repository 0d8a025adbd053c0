"""The in-process agent and its socket protocol, with the stand-in CUPTI source
(tests/cupti_fake.py), plus the injected sitecustomize in a real child Python."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("cupti")

from cupti import cupti as real  # noqa: E402

import cupti_fake as F  # noqa: E402
from rlscope_top._agent import INJECT_DIR, load  # noqa: E402
from rlscope_top.gpu_link import AgentLink, LaunchListener, discover  # noqa: E402

A = load()


def _until(link: AgentLink, kind: str, timeout: float = 5.0) -> tuple[dict, list[dict]]:
    msg, seen = link.wait(lambda m: m.get("t") == kind, timeout)
    assert msg is not None, f"no {kind!r} message; got {[m.get('t') for m in seen]}"
    return msg, seen


def test_frames_round_trip_in_both_encodings(monkeypatch):
    msgs = [{"t": "act", "k": [[1, 2, 0, 7, 9, 0]], "names": {0: "gemm"}}, {"t": "bye", "records": 3}]
    buf = bytearray(b"".join(A.encode(m) for m in msgs))
    monkeypatch.setattr(A, "_msgpack", None)                 # a target without msgpack sends JSON
    buf += A.encode({"t": "hello", "pid": 5})
    buf += A.encode({"t": "half"})[:-2]                      # a frame cut in the middle stays in the buffer
    out = A.decode_frames(buf)
    assert [m["t"] for m in out] == ["act", "bye", "hello"] and out[0]["names"] in ({0: "gemm"}, {"0": "gemm"})
    assert len(buf) > 0


def test_listen_mode_streams_while_a_monitor_is_attached(tmp_path):
    fake = F.FakeCupti(offset_ns=123_456_789)
    agent = A.Agent(fake)
    path = str(tmp_path / "gpu.sock")
    old = A._AGENT
    A._AGENT = agent
    try:
        A.listen(path=path)
        link = AgentLink.connect(path)
        hello, _ = _until(link, "hello")
        assert hello["pid"] == os.getpid() and hello["mode"] == "listen"
        assert fake.enabled == set()                            # nothing collected before start
        link.send({"t": "start", "collect": True})
        status, _ = _until(link, "status")
        assert status["ok"] and {int(getattr(real.ActivityKind, k)) for k in A.ACTIVITY_KINDS} == fake.enabled
        spans = [fake.launch(tid=11, name=f"k{i % 3}", dur_ns=50_000) for i in range(23)]
        agent.flush()
        act, _ = _until(link, "act")
        assert len(act["k"]) == 23 and len(act["a"]) == 23
        c, mono = act["clock"]
        assert abs((c - mono) - 123_456_789) < 1_000_000        # the offset the monitor will subtract
        assert [k[0] - (c - mono) for k in act["k"]][0] == pytest.approx(spans[0][0], abs=1_000_000)
        link.send({"t": "stop"})
        bye, _ = _until(link, "bye")
        assert bye == {"t": "bye", "records": 23, "dropped": 0}
        assert fake.enabled == set() and 1 in fake.flushes      # off again, with a forced flush
        link.close()
    finally:
        A._AGENT = old


def test_no_permission_is_reported_not_raised():
    fake = F.FakeCupti(fail=real.cuptiError(int(real.Result.ERROR_INSUFFICIENT_PRIVILEGES)))
    st = A.Agent(fake).enable()
    assert st["ok"] is False and st["code"] == "no_permission" and "INSUFFICIENT_PRIVILEGES" in st["msg"]


def test_real_cupti_without_a_driver_is_reported_not_raised():
    st = A.Agent(real).enable()
    assert st["ok"] is False and st["code"] == "no_driver"


def _child(code: str, env: dict, tmp_path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_launch_hook_holds_the_program_until_start_and_chains_sitecustomize(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    listener = LaunchListener()
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([INJECT_DIR, str(other)]), **listener.env()}
        p = _child("import os, time\nprint('user code', os.environ.get('CHAINED'), time.monotonic_ns(), flush=True)\n",
                   env, tmp_path)
        link = listener.accept(30, lambda: p.poll() is None)
        assert link is not None and link.hello["pid"] == p.pid and link.hello["mode"] == "launch"
        time.sleep(0.5)
        assert p.poll() is None                              # held: user code has not run
        released = time.monotonic_ns()
        link.send({"t": "start", "collect": True})
        status, _ = _until(link, "status", 30)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        word, chained, ts = out.split()[-3:]
        assert chained == "yes" and int(ts) > released       # ran after start, with the other sitecustomize
        assert status["code"] in ("no_driver", "not_installed", "ok")   # this machine: no driver
        link.close()
    finally:
        listener.close()


def test_env_var_makes_a_process_listen(tmp_path):
    env = {**os.environ, "PYTHONPATH": INJECT_DIR, "RLSCOPE_GPU_ACTIVITY": "1",
           "RLSCOPE_GPU_SOCKET_DIR": str(tmp_path)}
    p = _child("import time\nprint('ready', flush=True)\ntime.sleep(30)\n", env, tmp_path)
    try:
        assert p.stdout.readline().strip() == "ready"
        path = discover(p.pid)
        assert path is not None and path.startswith(str(tmp_path))
        link = AgentLink.connect(path)
        hello, _ = _until(link, "hello")
        assert hello["pid"] == p.pid
        link.close()
    finally:
        p.kill()
        p.wait()
