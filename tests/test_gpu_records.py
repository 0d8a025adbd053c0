"""Decoding CUPTI buffers, the correlation join and the GPU accounting, on the hand-built
sequence (tests/data/README.md) turned into buffers with cupti-python's own dtypes."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("cupti")

from cupti import cupti as real  # noqa: E402

import cupti_buffers as B  # noqa: E402
from rlscope_top.collect import gpu_decode as D  # noqa: E402
from rlscope_top.account.gpu_accounting import BusyUnion, GpuTotals  # noqa: E402
from rlscope_top.account.gpu_figures import _lost  # noqa: E402
from rlscope_top.collect.gpu_join import Joiner  # noqa: E402


def _merged_total(intervals):
    """Union length, the plain way (the reference for BusyUnion)."""
    total, cur = 0, None
    for a, b in sorted(intervals):
        if cur is None or a > cur[1]:
            if cur:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0)


@pytest.fixture(scope="module")
def seq():
    return B.load("cupti_ppo_update.json")


def _batch(seq):
    return D.decode(seq["frames"], D.layouts(B.SIZES))


def test_decoder_reads_cupti_python_layouts(seq):
    b = _batch(seq)
    specs = seq["records"]
    kernels = [s for s in specs if s["type"] == "ActivityKernel13"]
    k = b.acts[b.acts["kind"] == D.ACT_KERNEL]
    assert len(k) == len(kernels) == 4 * 7 + 1 + 3 + 1
    first = kernels[0]
    assert (k[0]["start"], k[0]["end"], k[0]["device"], k[0]["stream"], k[0]["corr"]) == \
        (first["start"], first["end"], 0, 7, first["correlation_id"])
    assert seq["names"][int(k[0]["detail"])] == first["name"]
    m = b.acts[b.acts["kind"] == D.ACT_MEMCPY]
    assert len(m) == 8 and set(m["detail"].tolist()) == {4096, 4}
    s = b.acts[b.acts["kind"] == D.ACT_MEMSET]
    assert s["detail"].tolist() == [65536] * 4
    apis = [s for s in specs if s["type"] == "ActivityAPI"]
    assert len(b.api) == len(apis) and b.unknown == 0
    drv = b.api[b.api["domain"] == 1]
    assert len(drv) == 1
    assert b.api["tid"].tolist() == [a["thread_id"] for a in apis if a["kind"] == "RUNTIME"] + [drv["tid"][0]]


def test_every_kernel_record_version_decodes_by_its_size():
    """CUPTI 13.0 .. 13.5 write different kernel structs: the size the agent reports picks one."""
    for name in B.real.__dict__:
        if not (name.startswith("activity_kernel") and name.endswith("_dtype")):
            continue
        dt = getattr(real, name)
        recs = np.zeros(23, dt)
        recs["kind"] = 10
        recs["start"] = np.arange(23) * 1000
        recs["end"] = recs["start"] + 500
        recs["correlation_id"] = np.arange(23) + 1
        b = D.decode([(10, recs.tobytes())], D.layouts({10: dt.itemsize}))
        assert len(b.acts) == 23 and b.acts["corr"].tolist() == list(range(1, 24)), name
        assert (b.acts["end"] - b.acts["start"]).tolist() == [500] * 23


def test_a_record_size_no_dtype_knows_is_refused_in_one_line():
    with pytest.raises(D.LayoutError) as e:
        D.layouts({10: 264})
    msg = str(e.value)
    assert "kernel records of 264 bytes" in msg and "upgrade cupti-python" in msg and "\n" not in msg
    bad = D.decode([(10, b"\0" * 100)], D.layouts({10: 248}))      # a frame that is not whole records
    assert len(bad.acts) == 0 and bad.unknown == 1


def _joined(seq, wait_ns=0, op_of=None):
    j = Joiner(wait_ns=wait_ns, **({"op_of": op_of} if op_of else {}))
    j.offset = seq["clock"][0] - seq["clock"][1]
    j.feed(_batch(seq), now=0)
    return j, j.ready(now=10**12, final=True)


def test_join_by_correlation_id(seq):
    j, out = _joined(seq)
    offset = seq["clock"][0] - seq["clock"][1]
    by_corr = {s["correlation_id"]: s for s in seq["records"] if s["type"] == "ActivityAPI"}
    acts = [s for s in seq["records"] if s["type"] != "ActivityAPI"]
    assert len(out) == len(acts)
    specs = {(s["correlation_id"], s["start"] - offset): s for s in acts}      # CLOCK_MONOTONIC now
    for it in out:
        s = specs.pop((int(it["corr"]), int(it["start"])))
        assert it["end"] == s["end"] - offset
        assert it["kind"] == {"ActivityKernel13": 0, "ActivityMemcpy7": 1, "ActivityMemset5": 2}[s["type"]]
        api = by_corr.get(s["correlation_id"])
        if api is None:
            assert it["tid"] == 0 and it["launch"] == 0
        else:
            assert it["tid"] == api["thread_id"] and it["launch"] == api["start"] - offset
        assert j.op_names[it["op"]] == "<all>"
    graph = out[out["corr"] == max(by_corr)]
    assert len(graph) == 3 and set(graph["tid"].tolist()) == {seq["tids"][0]}   # shared id: all joined
    assert j.unjoined == 1 and j.joined == len(acts) - 1


def _one(kind, corr, start, end, tid=None):
    if tid is None:
        r = np.zeros(1, D.ACTIVITY)
        r[0] = (kind, start, end, 0, 1, corr, 0)
        return D.Batch(r, np.empty(0, D.API))
    a = np.zeros(1, D.API)
    a[0] = (corr, tid, start, 0)
    return D.Batch(np.empty(0, D.ACTIVITY), a)


def test_unjoined_activity_waits_then_goes_out():
    j = Joiner(wait_ns=1_000)
    j.feed(_one(0, 77, 10, 20), now=100)
    assert len(j.ready(now=500)) == 0                          # the kernel waits for its API record
    j.feed(_one(None, 77, 5, 8, tid=9), now=600)
    out = j.ready(now=700)
    assert len(out) == 1 and out["tid"][0] == 9                # joined before its wait ran out
    j.feed(_one(0, 78, 30, 40), now=800)
    assert len(j.ready(now=1_000)) == 0
    late = j.ready(now=1_900)
    assert len(late) == 1 and late["tid"][0] == 0              # waited 1 us, then out unjoined
    assert j.unjoined == 1 and j.joined == 1


def test_runtime_record_wins_over_the_driver_call_inside_it():
    j = Joiner(wait_ns=0)
    api = np.zeros(2, D.API)
    api[0] = (5, 111, 100, 1)        # the driver call inside the runtime call, same id
    api[1] = (5, 222, 90, 0)
    acts = np.zeros(1, D.ACTIVITY)
    acts[0] = (0, 200, 300, 0, 1, 5, 0)
    j.feed(D.Batch(acts, api), now=0)
    out = j.ready(now=0)
    assert out["tid"].tolist() == [222] and out["launch"].tolist() == [90]


def test_operation_hook_is_used(seq):
    _, out = _joined(seq, op_of=lambda tid, ts: "rollout" if tid == seq["tids"][1] else "update")
    j, _ = _joined(seq, op_of=lambda tid, ts: "rollout" if tid == seq["tids"][1] else "update")
    assert {j.op_names[i] for i in out["op"].tolist()} == {"rollout", "update", "<all>"}   # <all>: no API record


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_busy_union_matches_the_plain_union(seed):
    rnd = random.Random(seed)
    ivs = []
    for _ in range(3000):
        a = rnd.randrange(0, 3_000_000_000)
        ivs.append((a, a + rnd.randrange(1, 5_000_000)))
    u = BusyUnion(reorder_ns=200_000_000)
    arrival = sorted(ivs, key=lambda iv: iv[1] + rnd.randrange(0, 150_000_000))   # out of order, within reorder
    for k in range(0, len(arrival), 100):                      # batches, as the collector adds them
        chunk = arrival[k:k + 100]
        u.add_many(np.array([a for a, _ in chunk]), np.array([b for _, b in chunk]))
        u.finalize(max(b for _, b in chunk) - 200_000_000)
    u.finalize(u.newest)
    assert u.late == 0
    assert u.total() == _merged_total(ivs)
    lo, hi = 700_000_000, 2_100_000_000
    clipped = [(max(a, lo), min(b, hi)) for a, b in ivs if b > lo and a < hi]
    assert abs(u.busy(lo, hi) - _merged_total(clipped)) <= 2 * u.bin_ns   # only the two edge bins pro-rate
    assert 600 > len(u.bins)           # a window of more bins than are kept walks the kept ones
    assert abs(u.busy(0, 6_000_000_000) - _merged_total(ivs)) <= 2 * u.bin_ns
    assert BusyUnion().busy(0, 10_000_000_000) == 0


def test_busy_union_counts_late_records_and_never_exceeds_wall():
    u = BusyUnion(bin_ns=1000, reorder_ns=0)
    u.add(0, 5000)
    u.finalize(5000)
    u.add(1000, 3000)           # late, and already covered: capped at the bin length
    assert u.late == 1 and u.total() == 5000


def test_busy_union_memory_is_bounded():
    """Bins older than a minute fold into the total: an hour of kernels keeps ~6000 bins."""
    u = BusyUnion(reorder_ns=0)
    for s in range(0, 3600, 10):
        t = s * 1_000_000_000
        a = t + np.arange(0, 10_000_000_000, 5_000_000)
        u.add_many(a, a + 1_000_000)
        u.finalize(t + 10_000_000_000)
    assert u.total() == 3600 * 200 * 1_000_000
    assert len(u.bins) <= 6_100


def test_accounting_per_operation_figures(seq):
    _, out = _joined(seq)
    g = GpuTotals()
    g.add(out, ["<all>"], seq["names"])
    kernels = out[out["kind"] == 0]
    assert g.all.kernels == len(kernels) and g.all.memcpys == 8 and g.all.memsets == 4
    assert g.all.kernel_ns == int((kernels["end"] - kernels["start"]).sum())
    ivs = list(zip(out["start"].tolist(), out["end"].tolist()))
    assert g.all.busy.total() == _merged_total(ivs)
    assert g.all.busy.total() < int((out["end"] - out["start"]).sum())       # streams overlap
    assert g.all.kernels_joined == len(kernels) - 1
    assert g.all.memcpy_bytes == 4 * (4096 + 4)
    rec = g.record(0)
    assert rec["top"][0][0].startswith("ampere_sgemm_32x32")
    assert rec["all"]["busy_ns"] == _merged_total(ivs) and rec["all"]["kernels"] == len(kernels)


def test_a_late_record_inside_the_kept_minute_is_counted_not_lost():
    """Seen on an H200: 4 set-up records a run came after the reorder window. They are counted
    and binned, so `gpu.complete` stays true; only time reaching past the kept bins is lost."""
    u = BusyUnion(bin_ns=1000, reorder_ns=0, keep_ns=10_000)
    u.add(0, 5000)
    u.finalize(50_000)
    u.add(45_000, 46_000)       # late, within the kept bins
    assert (u.late, u.clipped) == (1, 0)
    u.add(100, 200)             # late, and older than the kept bins: its time cannot be binned
    assert (u.late, u.clipped) == (2, 1)
    assert u.total() == 5000 + 1000
    assert _lost({"late": 4, "clipped": 0, "agent": {}}) == {"dropped_ring_full": 0, "dropped_by_cupti": 0,
                                                             "undecodable": 0, "late": 0,
                                                             "without_timestamps": 0}
    assert _lost({"late": 4, "clipped": 1, "agent": {}})["late"] == 1
