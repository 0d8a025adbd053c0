"""CUPTI record parsing, correlation join and GPU accounting on the hand-built sequence
(tests/data/README.md): real cupti-python record objects, built by hand."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("cupti")

from cupti import cupti as real  # noqa: E402

import cupti_fake as F  # noqa: E402
from rlscope_top import gpu_records as G  # noqa: E402
from rlscope_top._agent import load  # noqa: E402
from rlscope_top.gpu_accounting import BusyUnion, GpuAccounting  # noqa: E402
from rlscope_top.gpu_join import Joiner  # noqa: E402

A = load()


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
    return F.load("cupti_ppo_update.json")


def test_converter_reads_real_record_objects(seq):
    conv = A.Converter(real)
    msg = conv.batch(seq["objects"])
    specs = seq["records"]
    kernels = [s for s in specs if s["type"] == "ActivityKernel13"]
    assert len(msg["k"]) == len(kernels) == 4 * 7 + 1 + 3 + 1
    first = kernels[0]
    assert msg["k"][0] == [first["start"], first["end"], 0, 7, first["correlation_id"], 0]
    assert msg["names"][0] == first["name"] and len(msg["names"]) == len({k["name"] for k in kernels})
    assert len(msg["m"]) == 8 and {m[6] for m in msg["m"]} == {int(real.ActivityMemcpyKind.HTOD),
                                                               int(real.ActivityMemcpyKind.DTOH)}
    assert [s[5] for s in msg["s"]] == [65536] * 4
    apis = [s for s in specs if s["type"] == "ActivityAPI"]
    assert len(msg["a"]) == len(apis)            # launch, memcpy, memset, graph launch: all kept
    drv = [a for a in msg["a"] if a[5] == 1]
    assert len(drv) == 1 and drv[0][4] == int(real.DriverApiTraceCbid.cuLaunchKernel)
    # a second batch reuses the interned names
    again = conv.batch(seq["objects"][:4])
    assert again["names"] == {} and again["k"][0][5] == 0


def test_converter_drops_api_records_that_launch_nothing():
    conv = A.Converter(real)
    get_device = F.record({"type": "ActivityAPI", "kind": "RUNTIME", "start": 1, "end": 2, "thread_id": 1,
                           "correlation_id": 5, "cbid": "cudaGetDevice_v3020"})
    launch = F.record({"type": "ActivityAPI", "kind": "RUNTIME", "start": 1, "end": 2, "thread_id": 1,
                       "correlation_id": 6, "cbid": "cudaLaunchKernel_v7000"})
    msg = conv.batch([get_device, launch])
    assert [a[3] for a in msg["a"]] == [6]


def test_errors_are_one_line_with_a_fix():
    code, msg = A.classify_error(real.cuptiError(int(real.Result.ERROR_INSUFFICIENT_PRIVILEGES)), real)
    assert code == "no_permission" and "INSUFFICIENT_PRIVILEGES" in msg and "root" in msg
    with pytest.raises(Exception) as no_driver:          # the real failure on this GPU-less machine
        real.activity_enable(real.ActivityKind.CONCURRENT_KERNEL)
    code, msg = A.classify_error(no_driver.value, real)
    assert code == "no_driver" and "libcuda.so.1" in msg and "\n" not in msg
    code, msg = A.classify_error(ImportError("No module named 'cupti'"))
    assert code == "not_installed" and "pip install cupti-python" in msg
    code, msg = A.classify_error(real.cuptiError(int(real.Result.ERROR_UNKNOWN)), real)
    assert code == "error" and "ERROR_UNKNOWN" in msg


def _joined(seq, wait_ns=0):
    conv, j = A.Converter(real), Joiner(wait_ns=wait_ns)
    msg = conv.batch(seq["objects"])
    msg["clock"] = seq["clock"]
    j.feed(msg, now=0)
    rec = j.ready(now=10**12, final=True)
    return j, rec


def test_join_by_correlation_id(seq):
    j, rec = _joined(seq)
    offset = seq["clock"][0] - seq["clock"][1]
    items = rec["items"]
    by_corr = {}
    for s in seq["records"]:
        if s["type"] == "ActivityAPI":
            by_corr[s["correlation_id"]] = s
    acts = [s for s in seq["records"] if s["type"] != "ActivityAPI"]
    assert len(items) == len(acts)
    specs = {(s["correlation_id"], s["start"] - offset): s for s in acts}      # CLOCK_MONOTONIC now
    for it in items:
        s = specs.pop((it[G.CORR], it[G.START]))
        assert it[G.END] == s["end"] - offset
        assert it[G.KIND] == {"ActivityKernel13": "k", "ActivityMemcpy7": "m", "ActivityMemset5": "s"}[s["type"]]
        api = by_corr.get(s["correlation_id"])
        if api is None:
            assert it[G.TID] == 0 and it[G.LAUNCH] == 0
        else:
            assert it[G.TID] == api["thread_id"] and it[G.LAUNCH] == api["start"] - offset
        assert it[G.OP] == "<all>"
    graph = [it for it in items if it[G.CORR] == max(by_corr)]
    assert len(graph) == 3 and all(it[G.TID] == seq["tids"][0] for it in graph)   # shared id: all joined
    assert j.unjoined == 1 and j.joined == len(acts) - 1


def test_unjoined_activity_waits_then_goes_out(seq):
    conv, j = A.Converter(real), Joiner(wait_ns=1_000)
    kern = F.record({"type": "ActivityKernel13", "start": 10, "end": 20, "correlation_id": 77, "name": "k",
                     "device_id": 0, "stream_id": 1})
    j.feed({**conv.batch([kern]), "clock": [0, 0]}, now=100)
    assert j.ready(now=500)["items"] == []                     # the name goes out, the kernel waits
    api = F.record({"type": "ActivityAPI", "kind": "RUNTIME", "start": 5, "end": 8, "thread_id": 9,
                    "correlation_id": 77, "cbid": "cudaLaunchKernel_v7000"})
    j.feed({**conv.batch([api]), "clock": [0, 0]}, now=600)
    out = j.ready(now=700)["items"]
    assert len(out) == 1 and out[0][G.TID] == 9                # joined before its wait ran out
    j.feed({**conv.batch([kern]), "clock": [0, 0]}, now=800)
    j.api.clear()
    assert j.ready(now=1_000) is None
    late = j.ready(now=1_900)["items"]
    assert len(late) == 1 and late[0][G.TID] == 0              # waited 1 us, then out unjoined


def test_operation_hook_is_used(seq):
    conv = A.Converter(real)
    j = Joiner(op_of=lambda tid, ts: "rollout" if tid == seq["tids"][1] else "update", wait_ns=0)
    j.feed({**conv.batch(seq["objects"]), "clock": seq["clock"]}, now=0)
    ops = {it[G.OP] for it in j.ready(0, final=True)["items"]}
    assert ops == {"rollout", "update", "<all>"}               # <all>: the one without an API record


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_busy_union_matches_the_plain_union(seed):
    rnd = random.Random(seed)
    ivs = []
    for _ in range(3000):
        a = rnd.randrange(0, 3_000_000_000)
        ivs.append((a, a + rnd.randrange(1, 5_000_000)))
    u = BusyUnion(reorder_ns=200_000_000)
    arrival = sorted(ivs, key=lambda iv: iv[1] + rnd.randrange(0, 150_000_000))   # out of order, within reorder
    for a, b in arrival:
        u.add(a, b)
    u.finalize(u.newest)
    assert u.late == 0
    assert u.total() == _merged_total(ivs)
    lo, hi = 700_000_000, 2_100_000_000
    clipped = [(max(a, lo), min(b, hi)) for a, b in ivs if b > lo and a < hi]
    assert abs(u.busy(lo, hi) - _merged_total(clipped)) <= 2 * u.bin_ns   # only the two edge bins pro-rate


def test_busy_union_counts_late_records_and_never_exceeds_wall():
    u = BusyUnion(bin_ns=1000, reorder_ns=0)
    u.add(0, 5000)
    u.finalize(5000)
    u.add(1000, 3000)           # late, and already covered: capped at the bin length
    assert u.late == 1 and u.total() == 5000


def test_accounting_per_operation_figures(seq):
    _, rec = _joined(seq)
    g = GpuAccounting()
    g.feed(rec)
    items = rec["items"]
    kernels = [it for it in items if it[G.KIND] == G.KERNEL]
    assert g.all.kernels == len(kernels) and g.all.memcpys == 8 and g.all.memsets == 4
    assert g.all.kernel_ns == sum(it[G.END] - it[G.START] for it in kernels)
    assert g.all.busy.total() == _merged_total([(it[G.START], it[G.END]) for it in items])
    assert g.all.busy.total() < sum(it[G.END] - it[G.START] for it in items)       # streams overlap
    assert g.all.kernels_joined == len(kernels) - 1
    assert g.all.memcpy_bytes == 4 * (4096 + 4)
    top = max(g.top.items(), key=lambda kv: kv[1][1])
    assert g.kernel_name(top[0]).startswith("ampere_sgemm_32x32")
