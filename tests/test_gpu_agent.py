"""The native GPU agent (probes/gpu_agent.c) in real processes, and the monitor's side of
its shared region (probes/gpu_region.py). The GPU and CUPTI this machine lacks are
stand-ins behind CUPTI's own C interface (tests/native/fake_cupti.c, fake_cuda.c); the
agent, its region, its commands and the decoding are the real ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from support import REPO, TARGETS
from rlscope_top.collect import gpu_decode as D
from rlscope_top.collect.gpu_join import Joiner
from rlscope_top.commands.launch import INJECT_DIR, LaunchListener
from rlscope_top.probes import gpu_region as R

pytest.importorskip("cupti")
ROOT = os.geteuid() == 0


class Native:
    """tests/targets/gpu_native_target.py, driven line by line."""

    def __init__(self, g: dict, agent: bool = True, cuda: bool = True, env: dict | None = None):
        argv = [sys.executable, str(TARGETS / "gpu_native_target.py"), g["cuda"] if cuda else "/dev/null",
                g["cupti"], g["agent"] if agent else "--no-agent"]
        if not cuda:
            argv[2] = g["cupti"]             # something loadable that is not a driver
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env={**os.environ, **(env or {})})
        _, pid, tid = self.p.stdout.readline().split()
        self.pid, self.tid = int(pid), int(tid)

    def __call__(self, line: str) -> str:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


@pytest.fixture
def native(gpu_native):
    made = []

    def _make(**kw) -> Native:
        n = Native(gpu_native, **kw)
        made.append(n)
        return n

    yield _make
    for n in made:
        n.close()


def _region(pid: int) -> R.GpuRegion:
    end = time.monotonic() + 10
    while (r := R.open_region(pid)) is None and time.monotonic() < end:
        time.sleep(0.01)
    assert r is not None, "the agent mapped no region"
    return r


def _start(r: R.GpuRegion, cupti: str) -> tuple[str, str]:
    r.claim(os.getpid(), cupti)
    assert r.command(R.CMD_START, 10), "the agent did not answer START"
    return r.status()


def _collect(r: R.GpuRegion) -> tuple[D.Batch, dict]:
    assert r.command(R.CMD_FLUSH, 10)
    frames = r.read()
    return D.decode(frames, D.layouts(r.kind_sizes())), r.names()


def test_region_layout_matches_the_c_header(gpu_native, tmp_path):
    fields = [k for k in R.OFF if k not in ("magic",)]
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "gpu_agent.h"\nint main(void){\n' + "".join(
        f'printf("{k} %zu\\n", offsetof(struct rls_gpu_header, {k}));\n' for k in fields) +
        'printf("frame %zu name %zu\\n", sizeof(struct rls_frame), sizeof(struct rls_name));\n}\n')
    exe = tmp_path / "layout"
    subprocess.run(["gcc", f"-I{REPO / 'probes'}", "-o", str(exe), str(src)], check=True)
    out = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    assert {k: int(out[k]) for k in fields} == {k: R.OFF[k] for k in fields}
    assert out["frame"] == f"{R.FRAME.size} name {R.NAME.size}"
    hdr = (REPO / "probes" / "gpu_agent.h").read_text()
    assert re.search(r'#define RLS_GPU_MEMFD_NAME "(.*)"', hdr).group(1) == R.MEMFD_NAME


@pytest.mark.skipif(not ROOT, reason="the region is opened through /proc/PID/map_files (root)")
def test_idle_agent_costs_one_sleeping_thread(native):
    t = native()
    r = _region(t.pid)
    assert not r.tracing and r.status()[0] == "ok" and r.u32("agent_pid") == t.pid
    names = {open(f"/proc/{t.pid}/task/{x}/comm").read().strip(): x for x in os.listdir(f"/proc/{t.pid}/task")}
    assert "rlscope-gpu" in names
    path = f"/proc/{t.pid}/task/{names['rlscope-gpu']}/stat"

    def stat() -> list[str]:
        return open(path).read().rsplit(")", 1)[1].split()

    end = time.monotonic() + 30          # a busy machine may not have run it to its wait yet
    while stat()[0] != "S":
        assert time.monotonic() < end, stat()
        time.sleep(0.01)
    ticks0 = int(stat()[11]) + int(stat()[12])                     # utime + stime, clock ticks
    time.sleep(1.0)
    st = stat()
    assert st[0] == "S" and int(st[11]) + int(st[12]) - ticks0 <= 1, st   # asleep on its futex, ~no CPU
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_every_record_arrives_decoded_and_joined(native, gpu_native):
    t = native()
    r = _region(t.pid)
    assert _start(r, gpu_native["cupti"]) == ("ok", "CUPTI activity on") and r.tracing
    assert t("kernels 1009 2000 1") and t("memcpy 23 4096") and t("memset 7 512")
    b, names = _collect(r)
    kinds = np.bincount(b.acts["kind"], minlength=3).tolist()
    assert kinds == [1009, 23, 7] and len(b.api) == 1009 + 23 + 7 and b.unknown == 0
    assert set(names.values()) == {"fake_elementwise_kernel"}
    assert names[int(b.acts["detail"][0])] == "fake_elementwise_kernel"
    j = Joiner(wait_ns=0)
    j.feed(b, time.monotonic_ns())
    out = j.ready(time.monotonic_ns())
    assert len(out) == 1039 and j.joined == 1039 and set(out["tid"].tolist()) == {t.tid}
    k = out[out["kind"] == 0]
    assert ((k["end"] - k["start"]) == 2000).all()
    assert (k["start"] > k["launch"]).all()                         # CLOCK_MONOTONIC on both sides
    assert abs(int(k["launch"][0]) - time.monotonic_ns()) < 60e9
    st = r.stats()
    assert st["records"] == 2 * 1039 and st["dropped_records"] == 0 and st["cupti_dropped"] == 0
    assert st["clock"] == 0 and st["cupti_version"] >= 130000
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_stop_flushes_and_three_cycles_change_nothing(native, gpu_native):
    t = native()
    r = _region(t.pid)
    threads = int(t("threads"))
    for cycle in range(3):
        assert _start(r, gpu_native["cupti"])[0] == "ok"
        t("kernels 101 1000 0")
        assert r.command(R.CMD_STOP, 10) and not r.tracing          # STOP flushes: nothing held back
        b = D.decode(r.read(), D.layouts(r.kind_sizes()))
        assert (b.acts["kind"] == 0).sum() == 101, cycle
        t("kernels 7 1000 0")                                        # not traced while stopped
        assert r.read() == []
        assert int(t("threads")) == threads + 1      # + the stand-in CUPTI's worker, started once
    assert r.stats()["generation"] == 3
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_exit_during_a_command_waits_for_it_and_runs_no_later_one(native, gpu_native):
    """A process that exits while the agent runs a command (a budget window's flush or stop):
    its exit hook waits for it, hands over what CUPTI still holds, and refuses commands after.
    Before, the hook gave up on a busy lock: the 37 kernels made during the flush were lost,
    and the control thread went on calling CUPTI into the runtime's teardown (an H200 `run`
    of the launch loop ended with a non-zero status and no message)."""
    t = native()
    r = _region(t.pid)
    assert _start(r, gpu_native["cupti"])[0] == "ok"
    t("flush_hold 400")                           # each flush takes 0.4 s once it has delivered
    t("kernels 101 1000 0")
    assert not r.command(R.CMD_FLUSH, 0.05)       # in flight: delivered, now holding
    t("kernels 37 1000 0")                        # made during it, held by CUPTI
    t.p.stdin.write("exit\n")
    t.p.stdin.flush()
    frames, end = [], time.monotonic() + 10
    while r.stats()["records"] < 2 * 138 and time.monotonic() < end:
        time.sleep(0.01)
    assert r.stats()["records"] == 2 * 138, "the exit hook did not flush what CUPTI held"
    flushes = r.stats()["flushes"]
    assert t.p.poll() is None                     # still in its exit hook, waiting for us to drain
    assert r.command(R.CMD_STOP, 5)               # answered, not run: the runtime is going away
    assert r.stats()["flushes"] == flushes and r.tracing
    while t.p.poll() is None and time.monotonic() < end:
        frames += r.read()
        time.sleep(0.01)
    frames += r.read()
    b = D.decode(frames, D.layouts(r.kind_sizes()))
    assert (b.acts["kind"] == 0).sum() == 138 and t.p.wait(5) == 0
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_a_forked_child_exits_without_waiting_on_its_parents_region(native, gpu_native):
    """A child forked from a traced process inherits the agent's exit hook and its parent's
    shared region. Its exit must not flush its parent's CUPTI or wait for the monitor to drain a
    ring that is not its own (before: up to 3 s at each such exit)."""
    t = native()
    r = _region(t.pid)
    assert _start(r, gpu_native["cupti"])[0] == "ok"
    t("kernels 101 1000 0")
    assert r.command(R.CMD_FLUSH, 10) and r.u64("head") > 0     # records the monitor has not read
    assert int(t("fork_exit")) < 1000
    assert r.tracing and r.stats()["flushes"] == 1               # the parent's tracing goes on
    b = D.decode(r.read(), D.layouts(r.kind_sizes()))
    assert (b.acts["kind"] == 0).sum() == 101
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_another_cupti_subscriber_is_reported_not_fought(native, gpu_native):
    t = native()
    t("configure 1 0")                       # torch.profiler holds CUPTI
    r = _region(t.pid)
    code, msg = _start(r, gpu_native["cupti"])
    assert code == "other_subscriber" and "MULTIPLE_SUBSCRIBERS" in msg and not r.tracing
    t("configure 0 0")                       # it let go: the next start works
    assert _start(r, gpu_native["cupti"])[0] == "ok"
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_no_permission_is_one_line(native, gpu_native):
    t = native()
    t("configure 0 35")                      # CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
    r = _region(t.pid)
    code, msg = _start(r, gpu_native["cupti"])
    assert code == "no_permission" and "INSUFFICIENT_PRIVILEGES" in msg and "\n" not in msg
    assert not r.tracing
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_real_libcupti_without_a_driver_says_so(native):
    from rlscope_top.probes.gpu_inject import local_cupti

    t = native(cuda=False)
    r = _region(t.pid)
    code, msg = _start(r, local_cupti())
    assert code == "no_driver" and "libcuda.so.1" in msg and "\n" not in msg and not r.tracing
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_tracing_stops_when_the_monitor_is_gone(native, gpu_native):
    t = native()
    r = _region(t.pid)
    ghost = subprocess.Popen(["sleep", "30"])
    r.claim(ghost.pid, gpu_native["cupti"])
    assert r.command(R.CMD_START, 10) and r.tracing
    ghost.kill()
    ghost.wait()
    end = time.monotonic() + 5
    while r.tracing and time.monotonic() < end:
        time.sleep(0.05)
    assert not r.tracing and r.status()[0] == "monitor_gone"
    r.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_a_full_ring_drops_whole_buffers_and_counts_every_record(native, gpu_native):
    t = native()
    r = _region(t.pid)
    _start(r, gpu_native["cupti"])
    for _ in range(18):                          # ~50 MB of records into a 32 MB ring nobody reads
        t("kernels 10000 1000 2")
    assert r.command(R.CMD_FLUSH, 10)
    st = r.stats()
    assert st["dropped_records"] > 0
    assert st["records"] + st["dropped_records"] == 2 * 180_000         # a kernel and its API record each
    frames = r.read()
    b = D.decode(frames, D.layouts(r.kind_sizes()))
    assert len(b.acts) + len(b.api) == st["records"]                     # what is in the ring is whole
    r.close()


def test_a_foreign_region_is_refused_not_read(tmp_path):
    code = ("import mmap, os, time\n"
            "fd = os.memfd_create('rlscope-top-gpu')\nos.ftruncate(fd, 1 << 20)\n"
            "m = mmap.mmap(fd, 1 << 20)\nm[:8] = b'NOTOURS!'\nprint('ready', flush=True)\ntime.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        if not ROOT:
            pytest.skip("root only")
        with pytest.raises(R.RegionError) as e:
            R.open_region(p.pid)
        assert "not rlscope-top's" in str(e.value)
    finally:
        p.kill()
        p.wait()


def _child(code: str, env: dict, tmp_path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_launch_hold_keeps_the_program_until_attached_and_chains_sitecustomize(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    listener = LaunchListener()
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([INJECT_DIR, str(other)]),
               "RLSCOPE_LAUNCH_SOCKET": listener.path}
        p = _child("import os, time\nprint('user code', os.environ.get('CHAINED'), "
                   "os.environ.get('RLSCOPE_LAUNCH_SOCKET'), time.monotonic_ns(), flush=True)\n", env, tmp_path)
        pid = listener.accept(30, p.pid, lambda: p.poll() is None)
        assert pid == p.pid
        time.sleep(0.5)
        assert p.poll() is None                              # held: user code has not run
        released = time.monotonic_ns()
        listener.release()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        word, chained, sock, ts = out.split()[-4:]
        assert chained == "yes" and int(ts) > released       # ran after release, with the other sitecustomize
        assert sock == "None"                                # its own children are not held
    finally:
        listener.close()


def test_a_hello_from_outside_the_command_is_ignored(tmp_path):
    listener = LaunchListener()
    try:
        env = {**os.environ, "PYTHONPATH": INJECT_DIR, "RLSCOPE_LAUNCH_SOCKET": listener.path}
        stranger = _child("print('x')\n", env, tmp_path)         # not the command the monitor started
        me = subprocess.Popen(["sleep", "30"])
        assert listener.accept(3, me.pid, lambda: True) is None
        me.kill()
        me.wait()
        stranger.communicate(timeout=60)
    finally:
        listener.close()


@pytest.mark.skipif(not ROOT, reason="root only")
def test_env_var_loads_the_idle_agent(gpu_native, tmp_path):
    env = {**os.environ, "PYTHONPATH": INJECT_DIR, "RLSCOPE_GPU_ACTIVITY": "1", "RLSCOPE_GPU_AGENT": gpu_native["agent"]}
    p = _child("import time\nprint('ready', flush=True)\ntime.sleep(30)\n", env, tmp_path)
    try:
        assert p.stdout.readline().strip() == "ready"
        r = _region(p.pid)
        assert not r.tracing
        r.close()
    finally:
        p.kill()
        p.wait()
