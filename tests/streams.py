"""Hand-built record streams with known answers, shared by accounting and TUI tests."""

from rlscope_top.ring import records as R
from rlscope_top.ring.ring import RingWriter

MS = 1_000_000


def meta_record(groups):
    probes = [{"id": 0, "group": "torch", "label": "op begin", "kind": "enter", "cost_ns": 700},
              {"id": 1, "group": "torch", "label": "op end", "kind": "exit", "cost_ns": 700},
              {"id": 2, "group": "mujoco", "label": "mj_step", "kind": "pair", "cost_ns": 1200}]
    return R.meta(pid=42, command="python train.py", t0_ns=1000 * MS, wall0=1_700_000_000.0, interval_s=1.0,
                  probes=probes, labels=["op begin", "op end", "mj_step"], groups=groups, missing={},
                  host="h", kernel="k")


def _thread(tid, py, ns, calls, trans, exited=False, oh=(0, 0, 0, 0)):
    return R.thread(tid=tid, name=f"t{tid}", python=py, exited=exited, ns=ns, trans=trans, calls=calls,
                    oh=list(oh))


def _trans(**kw):
    t = [[0] * 4 for _ in range(4)]
    idx = {"py": 0, "be": 1, "sim": 2, "cuda": 3}
    for k, v in kw.items():
        a, b = k.split("_")
        t[idx[a]][idx[b]] = v
    return t


def _backend_thread(calls, backend_ns, python_ns):
    return _thread(42, True, [[python_ns, 0], [backend_ns, 0], [0, 0], [0, 0]], [0, calls, 0, 0],
                   _trans(py_be=calls))


def windows_then_off_stream() -> list:
    """The budget's estimates: timed 1 s (1000 calls, 1 ms each) -> off 2 s -> timed 1 s (500
    calls) -> off 1 s."""
    s0, th = 1000 * MS, _backend_thread
    return [meta_record({"torch": ["/x"]}),
            R.counters(s0 + 1000 * MS, [th(1000, 1000 * MS, 0)], [0, 0, 0]),
            R.mode(s0 + 1000 * MS, "backend", "off", 50.0, 5.0),
            R.counters(s0 + 3000 * MS, [th(1000, 1000 * MS, 2000 * MS)], [0, 0, 0]),
            R.mode(s0 + 3000 * MS, "backend", "timed", 0.0, 5.0),
            R.counters(s0 + 4000 * MS, [th(1500, 1500 * MS, 2500 * MS)], [0, 0, 0]),   # 500 calls x 1 ms
            R.mode(s0 + 4000 * MS, "backend", "off", 50.0, 5.0),
            R.counters(s0 + 5000 * MS, [th(1500, 1500 * MS, 3500 * MS)], [0, 0, 0])]


def stream():
    main1 = _thread(42, True, [[300 * MS, 100 * MS], [200 * MS, 0], [100 * MS, 0], [0, 0]], [0, 23, 7, 0],
                    _trans(py_be=23, py_sim=7))
    main2 = _thread(42, True, [[600 * MS, 200 * MS], [400 * MS, 0], [300 * MS, 100 * MS], [0, 0]], [0, 1009, 23, 0],
                    _trans(py_be=1009, py_sim=23), oh=(100 * MS, 40 * MS, 0, 0))
    worker = _thread(43, True, [[100 * MS, 0], [0, 0], [0, 0], [0, 0]], [0, 0, 0, 0], _trans(), exited=True)
    pool = _thread(44, False, [[500 * MS, 1500 * MS], [0, 0], [0, 0], [0, 0]], [0, 0, 0, 0], _trans(),
                   oh=(5 * MS, 0, 0, 0))
    return [
        meta_record({"torch": ["/x/libtorch_python.so"], "mujoco": ["/x/libmujoco.so"]}),
        R.counters(1500 * MS, [main1], [30, 30, 7]),
        R.intervals([R.interval(42, "range", "Optimizer.step#SGD.step", 1100 * MS, 1150 * MS),
                     R.interval(42, "range", "Optimizer.step#SGD.step", 1200 * MS, 1230 * MS)]),
        R.counters(3000 * MS, [main2, worker, pool], [1100, 1100, 23]),
        R.note(3000 * MS, "info", "hello"),
        R.end(3000 * MS, "target exited"),
    ]


def op_records():
    """Two operations inside thread 42's counters of stream(): an annotated one and a sampled
    simulation one (its Python time counts as simulation)."""
    inference = R.operation(id=1, name="inference", kind="", source="annotated",
                            ns=[[200 * MS, 0], [300 * MS, 0], [0, 0], [0, 0]], trans=_trans(py_be=700),
                            calls=[0, 700, 0, 0], oh=[0, 30 * MS, 0, 0])
    env = R.operation(id=4096, name="env", kind="simulation", source="sampled",
                      ns=[[100 * MS, 0], [0, 0], [300 * MS, 100 * MS], [0, 0]], trans=_trans(py_sim=23),
                      calls=[0, 0, 23, 0], oh=[0, 0, 0, 0], samples=50, samples_incl=50, samples_total=156,
                      nested={"env": 50})
    return [inference, env]


def ops_stream():
    """stream() with operations: totals corrected 1.56 s = inference 0.47 + env 0.50 + <none> 0.59."""
    out = stream()
    ctr = out[3]
    out[3] = R.counters(ctr["ts"], ctr["threads"], ctr["hits"], ops=op_records())
    return out


def write_ring(path: str, records: list[dict], capacity: int = 1 << 16, close: bool = True) -> str:
    """A ring file holding ``records``; ``close=False`` leaves it as a live writer would."""
    w = RingWriter(path, capacity=capacity)
    for r in records:
        w.write(r)
    if close:
        w.close()
    return path


def tree_stream():
    """A job of three processes: main 42 (stream()'s threads), env worker 50 (1009 simulator
    calls, exited) and worker 60 (23 torch calls, named "learner" by the user)."""
    out = stream()
    ctr = out[3]
    w50 = R.thread(tid=50, name="t50", python=True, exited=True, pid=50,
                   ns=[[200 * MS, 300 * MS], [0, 0], [700 * MS, 0], [0, 0]], trans=_trans(py_sim=1009),
                   calls=[0, 0, 1009, 0], oh=[0] * 4)
    w60 = R.thread(tid=60, name="t60", python=True, exited=False, pid=60,
                   ns=[[100 * MS, 0], [250 * MS, 0], [0, 0], [0, 0]], trans=_trans(py_be=23),
                   calls=[0, 23, 0, 0], oh=[0] * 4)
    procs = [R.process(pid=42, ppid=1, command="python train.py", python=True, exited=False, role=None),
             R.process(pid=50, ppid=42, command="python -c from multiprocessing.spawn import spawn_main",
                       python=True, exited=True, role=None,
                       waits=[["socket", 42, 3], ["a lock or the GIL (futex)", 0, 1]]),
             R.process(pid=60, ppid=42, command="python learner.py", python=True, exited=False, role="learner")]
    threads = [{**t, "pid": 42} for t in ctr["threads"]] + [w50, w60]
    out[3] = R.counters(ctr["ts"], threads, ctr["hits"], procs=procs)
    return out
