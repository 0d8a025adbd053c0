"""The compile cache (probes/bpf_cache.py): a second attach loads the program kept by the
first, counts the same known answer, and a cache file that is not safely ours is never loaded."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from rlscope_top.collect import start_priority
from support import ebpf_gate, load_summary, stop, wait_file

pytestmark = pytest.mark.ebpf


def _count_1009(target, monitor, tmp_path, tag: str, env: dict) -> dict:
    go, done = tmp_path / f"go-{tag}", tmp_path / f"done-{tag}"
    t = target("torch_count.py", 1009, go, done)
    m, summary = monitor(t.pid, "--sample-hz", "0", env=env)
    go.touch()
    wait_file(done)
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["calls"]["backend"] == 1009 and s["transitions"]["python->backend"] == 1009, s["calls"]
    return s


def _kept(d) -> list:
    return sorted(p for p in d.iterdir() if p.name.startswith("bpf-"))


@pytest.mark.parametrize("uprobes", ["uprobe_multi", "perf"])
def test_second_attach_loads_the_kept_program_and_counts_the_same(ebpf, target, monitor, tmp_path, uprobes):
    """Both attach paths: uprobe_multi links (generic programs) and bcc's perf-event uprobes
    (one program per probe, so the text, and the kept record, depend on the probe set)."""
    d = tmp_path / "cache"
    env = {"RLSCOPE_CACHE_DIR": str(d), **({"RLSCOPE_PERF_UPROBES": "1"} if uprobes == "perf" else {})}
    first = _count_1009(target, monitor, tmp_path, "a", env)
    assert first["probes"]["program"]["from"] == "bcc"
    kept = _kept(d)
    assert len(kept) == 1
    assert kept[0].stat().st_mode & 0o777 == 0o600 and d.stat().st_mode & 0o777 == 0o700
    second = _count_1009(target, monitor, tmp_path, "b", env)
    assert second["probes"]["program"]["from"] == "cache"
    assert _kept(d) == kept
    # where the attach time went, step by step, in the order the steps run
    prog = second["probes"]["program"]
    steps = [prog[k] for k in ("load_s", "attach_s", "priced_s", "sampler_s", "sources_s", "ready_s")]
    assert steps == sorted(steps) and steps[0] > 0
    # the verifier's part of the cached load, from its statistics (a compile's load does not say)
    assert 0 < prog["verifier"]["s"] < prog["ready_s"] and prog["verifier"]["insns"] > 1000
    assert "verifier" not in first["probes"]["program"]
    # the attach's start ran niced (start_priority.py); the compile's own steps took over from it
    assert prog["niced"]["nice"][0] == start_priority.STEPS[0][1] and prog["niced"]["for_s"] > 0
    assert first["probes"]["program"]["niced"]["for_s"] < first["probes"]["program"]["load_s"]
    # the same probes went in both times
    assert second["probes"]["attached"].keys() == first["probes"]["attached"].keys()


def test_corrupt_record_is_compiled_again_and_replaced(ebpf, target, monitor, tmp_path):
    d = tmp_path / "cache"
    env = {"RLSCOPE_CACHE_DIR": str(d)}
    _count_1009(target, monitor, tmp_path, "a", env)
    (kept,) = _kept(d)
    kept.write_bytes(kept.read_bytes()[:1000])            # truncated
    s = _count_1009(target, monitor, tmp_path, "b", env)
    assert s["probes"]["program"]["from"] == "bcc"
    assert kept.stat().st_size > 1000
    assert _count_1009(target, monitor, tmp_path, "c", env)["probes"]["program"]["from"] == "cache"


def test_cache_off_compiles_and_keeps_nothing(ebpf, target, monitor, tmp_path):
    d = tmp_path / "cache"
    s = _count_1009(target, monitor, tmp_path, "a", {"RLSCOPE_CACHE_DIR": str(d), "RLSCOPE_BPF_CACHE": "0"})
    assert s["probes"]["program"]["from"] == "bcc"
    assert not d.exists() or not _kept(d)


# -- what may not be loaded (no target needed: the record is read, or not) -------------
@pytest.fixture(scope="module")
def compiled_record(tmp_path_factory):
    """The generic program compiled once for the module (~8 s on the CI VM a compile) and kept
    by the real bpf_cache.save: (record path, program text)."""
    ebpf_gate()                   # made before the test's own `ebpf` gate runs
    from rlscope_top.probes import catalog, program

    text = program.program_text(catalog.builtin(), generic=True)
    d = tmp_path_factory.mktemp("compiled") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLSCOPE_CACHE_DIR", str(d))
        import bcc

        from rlscope_top.probes import bpf_cache

        b = bcc.BPF(text=text.encode())
        try:
            assert bpf_cache.save(b, text) is None
        finally:
            b.cleanup()
        return bpf_cache.path_for(text), text


@pytest.fixture
def kept_record(ebpf, compiled_record, tmp_path, monkeypatch):
    """A real record for the generic program in a private directory of this test's own, which
    the test may break."""
    from rlscope_top.probes import bpf_cache

    record, text = compiled_record
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("RLSCOPE_CACHE_DIR", str(d))
    shutil.copyfile(record, bpf_cache.path_for(text))
    os.chmod(bpf_cache.path_for(text), 0o600)
    assert bpf_cache.read(text) is not None
    return bpf_cache, text, d


def test_symlinked_record_is_not_followed(kept_record, tmp_path):
    bpf_cache, text, d = kept_record
    path = bpf_cache.path_for(text)
    elsewhere = tmp_path / "elsewhere.msgpack"
    os.replace(path, elsewhere)
    os.symlink(elsewhere, path)
    assert bpf_cache.read(text) is None


@pytest.mark.parametrize("mode", [0o620, 0o602], ids=["group-writable", "world-writable"])
def test_record_others_can_write_is_not_loaded(kept_record, mode):
    bpf_cache, text, _ = kept_record
    os.chmod(bpf_cache.path_for(text), mode)
    assert bpf_cache.read(text) is None


def test_shared_directory_is_refused_with_a_reason(kept_record):
    bpf_cache, text, d = kept_record
    os.chmod(d, 0o777)
    assert bpf_cache.read(text) is None
    why = bpf_cache.save(object(), text)
    assert why and "not 700" in why


def test_loaded_record_serves_tables_and_programs(kept_record):
    """The cached object is a bcc.BPF: tables by name with bcc's types, programs the verifier takes."""
    import ctypes as ct

    import bcc

    bpf_cache, text, _ = kept_record
    b = bpf_cache.load(text)
    try:
        assert isinstance(b, bcc.BPF)
        b["targets"][ct.c_uint(4242)] = ct.c_uint(1)
        assert [k.value for k in b["targets"].keys()] == [4242]
        assert len(b["hits"][ct.c_int(0)]) >= 1                   # per-CPU array
        leaf = b["threads"].Leaf()
        leaf.tid = 7
        b["threads"][ct.c_uint(7)] = leaf
        assert b["threads"][ct.c_uint(7)].tid == 7
        assert b.load_func("on_tick", bcc.BPF.PERF_EVENT).fd >= 0
        with pytest.raises(Exception, match="Unknown program"):
            b.load_func("no_such_function", bcc.BPF.KPROBE)
    finally:
        b.cleanup()


# What the verifier may walk per program of a default attach. Before the sync loops lost
# depth_sync and the branches in advance/cur_cat, and ip_where its scan of 64 ranges, these
# read 48-100k each (on_tick 99,690; sched_switch 73,332), ~0.5 s of a cached load on the AMD
# VM; now 9-17k (docs/overhead.md, "The verifier"). A branch added to the hot path shows here.
VERIFY_MAX = 30_000
DEFAULT_ATTACH = {"tracepoint__sched__sched_switch": None, "on_tick": "PERF_EVENT", "pys_tick": "PERF_EVENT",
                  "pys_switch": "TRACEPOINT", "g_enter": "KPROBE", "g_exit_entry": "KPROBE", "g_exit_ret": "KPROBE"}


def test_each_program_of_a_default_attach_verifies_within_its_budget(kept_record):
    import bcc

    bpf_cache, text, _ = kept_record
    b = bpf_cache.load(text)
    try:
        for fn, kind in DEFAULT_ATTACH.items():
            if kind:                                      # the tracepoints load with the record
                b.load_func(fn, getattr(bcc.BPF, kind))
        walked = {fn: b.verified[fn][0] for fn in DEFAULT_ATTACH}
    finally:
        b.cleanup()
    assert all(n > 0 for n in walked.values()), walked    # the statistics line was read
    assert max(walked.values()) <= VERIFY_MAX, walked


def test_signals_during_the_load_neither_fail_it_nor_drop_the_record(kept_record):
    """The verifier gives up with EAGAIN while a signal is pending (it takes ~0.1 s on
    sched_switch's program here): 20 signals a second failed every load from the record, which
    was then dropped as refused, and the next attach compiled (3-5 s). Here ~500 a second."""
    import signal
    import subprocess

    import bcc

    bpf_cache, text, _ = kept_record
    got = []
    was = signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    storm = subprocess.Popen(["bash", "-c", f"while kill -USR1 {os.getpid()}; do sleep 0.002; done"])
    try:
        for _ in range(3):
            b = bpf_cache.load(text)
            assert b is not None, "a load under signals failed"
            try:
                assert b.load_func("on_tick", bcc.BPF.PERF_EVENT).fd >= 0
            finally:
                b.cleanup()
    finally:
        storm.kill()
        storm.wait()
        signal.signal(signal.SIGUSR1, was)
    assert len(got) > 10 and bpf_cache.read(text) is not None


def test_map_references_are_found_and_unknown_fds_refused():
    from rlscope_top.probes.bpf_cache import map_refs

    def ld_map(fd):   # ld_imm64 r1, map fd (src_reg 1): two instructions
        return bytes([0x18, 0x11, 0, 0]) + fd.to_bytes(4, "little") + bytes(8)

    mov = bytes([0xb7, 0, 0, 0, 5, 0, 0, 0])          # r0 = 5
    code = mov + ld_map(9) + mov + ld_map(12)
    assert map_refs(code, {9: 0, 12: 3}) == [[1, 0], [4, 3]]
    assert map_refs(code, {9: 0}) is None
    plain_imm64 = bytes([0x18, 0x01, 0, 0, 9, 0, 0, 0]) + bytes(8)   # a constant, not a map
    assert map_refs(plain_imm64, {}) == []
