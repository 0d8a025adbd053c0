"""The in-kernel sampler's CPython layout (probes/pystack.py), checked against this interpreter:
the offsets the BPF program walks frames with, thread states, and code object names."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import pytest

from rlscope_top.errors import NotReadablePython
from rlscope_top.probes import pystack

pytestmark = pytest.mark.skipif(sys.version_info[:2] not in pystack.LAYOUTS,
                                reason="no layout for this CPython (the sampler falls back to austin)")


@pytest.fixture
def me():
    interp = pystack.Interpreter(os.getpid())
    yield interp
    interp.close()


def _tstate() -> int:
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    return get()


def test_version_and_thread_states_are_this_interpreters(me):
    assert me.version == tuple(sys.version_info[:3])
    states = me.thread_states()
    assert states[threading.get_native_id()] == _tstate()

    seen: dict = {}
    done = threading.Event()
    t = threading.Thread(target=lambda: (seen.update(tid=threading.get_native_id(), ts=_tstate()), done.wait(5)))
    t.start()
    try:
        assert done.wait(0) or _until(lambda: "ts" in seen)
        assert me.thread_states()[seen["tid"]] == seen["ts"]     # a second thread, found by its tid
    finally:
        done.set()
        t.join()


def test_thread_states_hold_while_other_threads_come_and_go(me):
    """A thread that exits mid-walk leaves a freed state behind it in the list; the walk must
    still find every live thread (the one-walk reader lost the main thread in ~0.15% of reads)."""
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            ts = [threading.Thread(target=lambda: None) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

    c = threading.Thread(target=churn)
    c.start()
    try:
        main, mine = threading.get_native_id(), _tstate()
        missed = sum(me.thread_states().get(main) != mine for _ in range(100003))
    finally:
        stop.set()
        c.join()
    assert missed == 0


def test_when_every_walk_is_torn_the_live_threads_keep_their_last_states(me, monkeypatch):
    """Threads that start and exit back to back can tear every walk of a read (~1e-4 of reads
    under the churn above, all at the list's head); the threads still alive keep the states
    of the last whole read, and a thread that has exited is dropped."""
    main, mine = threading.get_native_id(), _tstate()
    assert me.thread_states()[main] == mine                     # a whole read first
    gone = 2 ** 22 + 7                                          # no such thread
    me._states[gone] = 0x1234
    torn = iter([(False, {}), (False, {gone: 0x1234})] * pystack.WALKS)
    monkeypatch.setattr(me, "_walk_thread_states", lambda: next(torn))
    got = me.thread_states()
    assert got[main] == mine and gone not in got, got


def _until(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def _frames(me: pystack.Interpreter) -> list[tuple[int, int]]:
    """(code object, instruction address) of this thread's frames, innermost first, walked as
    pystack.c does."""
    L = me.layout
    frame = me.ptr(me.ptr(_tstate() + L.tstate_cframe) + L.cframe_current)
    out = []
    while frame and len(out) < 200:
        out.append((me.ptr(frame + L.frame_code), me.ptr(frame + L.frame_instr)))
        frame = me.ptr(frame + L.frame_previous)
    return out


def _chain(me: pystack.Interpreter) -> list[int]:
    """The code objects of this thread's frames, innermost first."""
    return [code for code, _ in _frames(me)]


def test_the_frame_chain_the_kernel_walks_is_this_threads_stack(me):
    def inner():
        return _chain(me), sys._getframe()

    codes, f = inner()
    want = []
    while f is not None:
        want.append(id(f.f_code))
        f = f.f_back
    # the walk ran inside _chain and me.ptr: those frames are innermost, then the same stack
    assert codes[-len(want):] == want
    assert id(_chain.__code__) in codes[:len(codes) - len(want)]


def test_each_frame_is_read_at_the_instruction_it_is_at(me):
    """The kernel places a tick by its call site: the frame's current instruction. Each frame's
    instruction address, less its f_lasti, is where its code object's bytecode starts: the
    same offset from every code object (CPython keeps the bytecode inside it)."""
    def inner():
        pairs, f, want = _frames(me), sys._getframe().f_back, []
        while f is not None:              # the callers: each still at its call, as when read
            want.append((id(f.f_code), f.f_lasti))
            f = f.f_back
        return pairs, want

    pairs, want = inner()
    got = pairs[-len(want):]
    assert [c for c, _ in got] == [c for c, _ in want]
    starts = {instr - lasti - code for (code, instr), (_, lasti) in zip(got, want)}
    assert len(starts) == 1 and 0 < starts.pop() < 512, (got, want)


class Env:
    def step(self):
        return sys._getframe().f_code


def test_code_objects_are_named_as_austin_names_frames(me):
    code = Env().step()
    assert me.name(id(code)) == f"{code.co_filename}:Env.step"
    ns = {}
    # non-ASCII names: each kind of compact string (1, 2 and 4 bytes a character)
    exec("def café():\n    pass\ndef δ_step():\n    pass\ndef 步():\n    pass\ndef 𐐀x():\n    pass\n", ns)
    for name in ("café", "δ_step", "步", "𐐀x"):
        c = ns[name].__code__
        assert me.name(id(c)) == f"<string>:{name}", name


def test_a_process_that_is_not_cpython_is_refused_with_a_reason():
    p = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(NotReadablePython, match="no CPython 3.11"):
            pystack.Interpreter(p.pid)
    finally:
        p.kill()
        p.wait()
