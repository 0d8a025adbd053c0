"""Operations without eBPF: summary math on a hand-built stream, rules, the annotation API
and the region the monitor reads (the kernel's side is in test_ebpf_operations.py)."""

from __future__ import annotations

import copy
import os
import struct
import subprocess
import sys
import threading

import pytest

from rlscope_top import annotate as A
from rlscope_top import operation
from rlscope_top.report import summary as S
from rlscope_top.account.accounting import Accounting
from rlscope_top.errors import UsageError
from rlscope_top.collect.op_rules import BUILTIN, Matcher, parse
from rlscope_top.probes import ann_region
from rlscope_top.probes.stack_sampler import StackSampler

from streams import ops_stream


def _summary():
    acct = Accounting()
    acct.feed(ops_stream())
    return S.build(acct)


def test_operation_rows_add_up_to_the_totals():
    s = _summary()
    ops = s["operations"]
    assert ops["inference"]["wall_s"] == pytest.approx(0.47)          # 0.2 Python + 0.3 - 0.03 correction
    assert ops["inference"]["backend_s"] == pytest.approx(0.27)
    assert ops["env"]["wall_s"] == pytest.approx(0.50)
    assert ops["<none>"]["wall_s"] == pytest.approx(0.59)
    whole = sum(s["totals"][f"{c}_s"] or 0 for c in ("python", "backend", "simulator", "cuda_api"))
    assert whole == pytest.approx(sum(ops[n]["wall_s"] for n in ("inference", "env", "<none>")))
    assert ops["inference"]["share"] == pytest.approx(0.47 / 1.56, abs=1e-6)
    assert ops["inference"]["transitions"]["python->backend"] == 700
    assert ops["<none>"]["transitions"]["python->backend"] == 309       # 1009 - 700
    assert ops["inference"]["transitions_per_s"]["python->backend"] == pytest.approx(700 / 0.47, rel=1e-4)
    assert ops["inference"]["source"] == "annotated" and ops["env"]["source"] == "sampled"


def test_python_inside_a_simulation_operation_counts_as_simulation():
    s = _summary()
    env = s["operations"]["env"]
    assert env["python_s"] == 0.0 and env["simulator_s"] == pytest.approx(0.5)
    assert env["simulation_split"] == {"python_s": pytest.approx(0.1), "native_s": pytest.approx(0.4)}
    assert env["shares"]["simulator"] == pytest.approx(1.0)
    # the totals follow the same rule: 0.1 s of Python moved to the simulator
    assert s["totals"]["python_s"] == pytest.approx(0.7) and s["totals"]["simulator_s"] == pytest.approx(0.5)
    assert s["simulation_split"] == {"python_s": pytest.approx(0.1), "native_s": pytest.approx(0.4)}
    assert env["samples"] == 50 and env["inclusive_share"] == pytest.approx(env["share"], abs=1e-6)


def test_thread_rows_and_the_process_follow_the_simulation_rule():
    """The demo's main-thread row read Python 7.29 s / Simulator 0.80 s under a table of
    5.14 / 2.95: the rows now move the same 0.1 s of simulation Python as the totals, over
    the Python threads by their Python time (0.7 : 0.1 here)."""
    s = _summary()
    rows = {r["tid"]: r for r in s["threads"]}
    assert rows[42]["python_s"] == pytest.approx(0.7 - 0.1 * 0.7 / 0.8)
    assert rows[42]["simulator_s"] == pytest.approx(0.4 + 0.1 * 0.7 / 0.8)
    assert rows[43]["python_s"] == pytest.approx(0.1 - 0.1 * 0.1 / 0.8)
    py = [r for r in s["threads"] if r["python_thread"]]
    assert sum(r["python_s"] for r in py) == pytest.approx(s["totals"]["python_s"])
    assert sum(r["simulator_s"] for r in s["threads"]) == pytest.approx(s["totals"]["simulator_s"])
    (proc,) = s["processes"]
    assert proc["totals"]["python_s"] == pytest.approx(0.7) and proc["simulation_python_s"] == pytest.approx(0.1)
    # the CPU view too: env's 0.1 s of on-CPU Python is Simulator (0.3 probed + 0.1)
    for cpu in (s["job"]["cpu_s"], proc["cpu_s"]):
        assert cpu["python"] == pytest.approx(s["split"]["python"]["on_cpu_s"]) == pytest.approx(0.5)
        assert cpu["simulator"] == pytest.approx(s["split"]["simulator"]["on_cpu_s"]) == pytest.approx(0.4)


def _without_simulator_probes(records: list[dict], keep_probes: bool = False) -> list[dict]:
    """ops_stream() as a program with no simulator library (``keep_probes``: one it maps but
    never calls): no simulator time, calls or transitions in its counters; its `env`
    operation's time is Python only."""
    out = []
    for r in records:
        r = copy.deepcopy(r)
        if r["t"] == "meta" and not keep_probes:
            r["groups"].pop("mujoco", None)
        for th in r.get("threads", []) + r.get("ops", []):
            th["ns"][2] = [0, 0]
            th["calls"][2] = 0
            th["trans"][0][2] = 0
        out.append(r)
    return out


@pytest.mark.parametrize("keep_probes", [False, True])
def test_simulation_time_from_operations_has_no_call_count(keep_probes):
    """With no simulator probe, the Simulator figure is the Python time of simulation
    operations: it read `0.88 s ... 0 calls` (tianshou); its calls are not known: n/a. So with
    MuJoCo probed and never called (torchrl's Pendulum imports it): it read `0.52 s, 0 calls, exact`."""
    acct = Accounting()
    acct.feed(_without_simulator_probes(ops_stream(), keep_probes))
    s = S.build(acct)
    assert s["sources"]["simulator_s"] == "operations", s["sources"]
    assert s["totals"]["simulator_s"] == pytest.approx(0.1), s["totals"]
    env = s["operations"]["env"]
    for row in (s, env, s["operations"]["<all>"]):
        assert row["calls"]["simulator"] is None and row["transitions"]["python->simulator"] is None, row
    assert s["calls"]["backend"] == 1009          # what was counted stays counted


def test_no_operations_leaves_only_all():
    from streams import stream
    acct = Accounting()
    acct.feed(stream())
    assert set(S.build(acct)["operations"]) == {"<all>"}


# -- rules --------------------------------------------------------------------
SB3 = "/v/site-packages/stable_baselines3/common/on_policy_algorithm.py"


def test_rules_innermost_frame_wins_and_qualnames_match():
    m = Matcher(BUILTIN)
    frames = ["/w/train.py:<module>", f"{SB3}:OnPolicyAlgorithm.collect_rollouts",
              "/v/site-packages/stable_baselines3/common/vec_env/dummy_vec_env.py:DummyVecEnv.step_wait",
              "/v/site-packages/gymnasium/envs/classic_control/cartpole.py:CartPoleEnv.step"]
    inner, seen = m.match(frames)
    assert inner == "simulation" and seen == {"simulation", "collect_rollouts"}
    assert m.match(frames[:2])[0] == "collect_rollouts"
    assert m.match(["/w/x.py:main"]) == (None, set())
    assert m.kinds["simulation"] == "simulation" and m.kinds["train"] == ""


def test_importing_jax_is_not_jit():
    """The jax_jit rule matched pjit.py's and dispatch.py's module code: a torch program whose
    imports pulled in jax (tianshou) showed a jax_jit operation, 8% early on, for the import."""
    m = Matcher(BUILTIN)
    pjit = "/v/site-packages/jax/_src/pjit.py"
    importing = ["/w/train.py:<module>", "<frozen importlib._bootstrap>:_find_and_load", f"{pjit}:<module>",
                 "<frozen importlib._bootstrap>:_find_and_load", "/v/site-packages/jax/_src/dispatch.py:<module>"]
    assert m.match(importing) == (None, set())
    assert m.match(["/w/train.py:update", f"{pjit}:cache_miss"])[0] == "jax_jit"
    assert m.match(["/w/train.py:update", "/v/site-packages/jax/_src/dispatch.py:apply_primitive"])[0] == "jax_jit"


def test_user_rules_win_over_builtin_ones_at_the_same_frame():
    m = Matcher([parse("phase=*/on_policy_algorithm.py:*collect*")] + BUILTIN)
    assert m.match([f"{SB3}:OnPolicyAlgorithm.collect_rollouts"])[0] == "phase"
    r = parse("env:simulation=step_env")
    assert (r.name, r.kind, r.user) == ("env", "simulation", True)
    assert Matcher([r]).match(["/a.py:World.step_env"])[0] == "env"


@pytest.mark.parametrize("bad", ["noequals", "=pat", "name=", "  =  ", "x:weird=y", ":simulation=y", "x:=y"])
def test_bad_rules_are_usage_errors(bad):
    with pytest.raises(UsageError) as e:
        parse(bad)
    assert e.value.hint


def test_sampler_feed_sets_the_kernel_op_only_on_change():
    calls = []
    smp = StackSampler(1, BUILTIN, 100, lambda tid, op, ts: calls.append((tid, op)))
    line = f"P1;T0:7;/w/t.py:<module>:3;{SB3}:OnPolicyAlgorithm.collect_rollouts:200 10000"
    smp.feed(line)
    smp.feed(line)
    smp.feed("P1;T0:7;/w/t.py:<module>:3;:INVALID: 10000")     # torn sample: no evidence
    smp.feed("P1;T0:7;/w/t.py:<module>:3 10000")
    cr = smp.ids["collect_rollouts"]
    assert calls == [(7, cr), (7, 0)]
    assert smp.samples() == {cr: 2} and smp.total == 3 and smp.invalid == 1
    assert smp.inclusive == {"collect_rollouts": 2}
    assert smp.nested == {"collect_rollouts": {"collect_rollouts": 2}}
    sim = f"{SB3}:OnPolicyAlgorithm.collect_rollouts:200;/v/site-packages/gymnasium/core.py:Env.step:1"
    smp.feed(f"P1;T0:7;/w/t.py:<module>:3;{sim} 10000")
    assert smp.nested["simulation"] == {"simulation": 1, "collect_rollouts": 1}


# -- the annotation API --------------------------------------------------------
def _run(code: str) -> str:
    """Annotation state is per process: run each scenario in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_annotations_cost_nothing_but_a_stack_while_not_attached():
    out = _run("""
import rlscope_top, struct
from rlscope_top import annotate as A
with rlscope_top.operation("a"):
    pass
print(A._mm is not None, getattr(A._tls, "t", None) is None)
""")
    assert out.split() == ["True", "True"]    # region made (discoverable), no per-thread state, no log


def test_attached_annotations_log_entries_the_kernel_can_read():
    out = _run("""
import threading, struct, rlscope_top
from rlscope_top import annotate as A
op = rlscope_top.operation("outer")
A._region()[A.ATTACHED_OFF] = 1                 # what the monitor does when it attaches
with op:
    with rlscope_top.operation("inner", kind="simulation"):
        pass

@rlscope_top.operation("deco")
def f(x):
    return x + 1
assert f(1) == 2 and f.__name__ == "f"
t = A._tls.t
slot = t.slot
tid = struct.unpack_from("<I", A._mm, slot)[0]
ents = [struct.unpack_from("<QII", A._mm, slot + 16 + (i % A.NENT) * 16) for i in range(1, t.seq + 1)]
print(tid == threading.get_native_id(), [(op_, seq) for _, op_, seq in ents])
ts = [e[0] for e in ents]
print(ts == sorted(ts))
""")
    first, second = out.splitlines()
    # outer=1 inner=2 deco=3: enter 1, enter 2, exit to 1, exit to 0, enter 3, exit to 0
    assert first == "True [(1, 1), (2, 2), (1, 3), (0, 4), (3, 5), (0, 6)]"
    assert second == "True"


def test_annotations_never_raise_into_the_program():
    out = _run("""
import rlscope_top
from rlscope_top import annotate as A
with rlscope_top.operation(None):        # nonsense in: no error out
    pass
with rlscope_top.operation(["x"]):
    pass
op = rlscope_top.operation("x")
A._region()[A.ATTACHED_OFF] = 1
try:
    with op:
        raise KeyError("user")            # the user's exception passes through untouched
except KeyError:
    print("passed through")
op.__exit__(None, None, None)            # unbalanced exit: ignored
op.__exit__(None, None, None)
print("ok")
""")
    assert out.split("\n")[:2] == ["passed through", "ok"]


def test_monitor_finds_the_region_and_reads_names():
    r, w = os.pipe()
    code = f"""
import os, rlscope_top
rlscope_top.operation("rollout")
rlscope_top.operation("env", kind="simulation")
os.write({w}, b"x")
import time; time.sleep(30)
"""
    p = subprocess.Popen([sys.executable, "-c", code], pass_fds=(w,))
    try:
        os.read(r, 1)
        if os.geteuid() != 0:
            pytest.skip("map_files needs root")
        region = ann_region.open_region(p.pid)
        assert region is not None
        assert region.names() == {1: ("rollout", ""), 2: ("env", "simulation")}
        assert region.attach() >= 1 and region.mm[A.ATTACHED_OFF] >= 1
        region.detach()
    finally:
        p.kill()
        p.wait()
    assert ann_region.open_region(p.pid) is None      # gone with its process


def test_region_layout_matches_the_kernel_constants():
    src = open(os.path.join(os.path.dirname(A.__file__), "..", "probes", "bpf_program.c")).read()
    for name, value in (("ANN_HDR", A.HDR_SIZE), ("ANN_NSLOTS", A.NSLOTS), ("ANN_SLOT", A.SLOT_SIZE),
                        ("ANN_NENT", A.NENT), ("ANN_PROBE", A.PROBE_SLOTS), ("ANN_GEN_OFF", A.GEN_OFF)):
        assert f"#define {name} {value}\n" in src, name
    assert struct.calcsize("<QII") == 16
