"""What the kernel's verifier walks at each attach (issue 16: the attach's CPU on a busy
machine). The two sync loops (ann_sync, sop_sync) live in bodies behind tail calls: inlined into
the hot handlers they made each handler 25-33k processed instructions, ~75% of the verifier's
work. The heads must stay small, and every body must load. Processed-instruction counts come
from the kernel (BPF_PROG_LOAD with log level 4), not from a clock."""

from __future__ import annotations

import ctypes as ct
import os
import re

import pytest

pytestmark = pytest.mark.ebpf

HEADS = ("g_enter", "g_exit_entry", "tracepoint__sched__sched_switch")
HEAD_MAX = 2000          # processed instructions; the heads read ~70-170 on Linux 6.18


def _processed(prog_type: int, name: bytes, code: bytes, license: bytes, kern_version: int,
               attach_type: int) -> tuple[int, int]:
    """(fd, processed instructions) of one program, loaded with the verifier's statistics."""
    from rlscope_top.probes import bpf_cache as B
    insns, lic, log = ct.create_string_buffer(code, len(code)), ct.create_string_buffer(license), \
        ct.create_string_buffer(1 << 16)
    attr = B._attr()
    for off, v, n in ((0, prog_type, 4), (4, len(code) // 8, 4), (8, ct.addressof(insns), 8),
                      (16, ct.addressof(lic), 8), (24, 4, 4), (28, len(log), 4), (32, ct.addressof(log), 8),
                      (40, kern_version, 4)):
        B._put(attr, off, v, n)
    if attach_type >= 0:
        B._put(attr, 68, attach_type, 4)
    fd = B._bpf(B.BPF_PROG_LOAD, attr)
    return fd, int(re.search(r"processed (\d+) insns", log.value.decode()).group(1))


def test_hot_handlers_are_small_heads_and_their_bodies_load(ebpf, monkeypatch):
    from rlscope_top.probes import bpf_cache, catalog, loader, uprobe_multi
    from rlscope_top.probes.loader import ProbeSet

    seen: dict[str, int] = {}

    def load_prog(prog_type, name, code, license, kern_version, attach_type):
        fd, n = _processed(prog_type, name, code, license, kern_version, attach_type)
        seen[name.decode()] = n
        return fd

    ps = ProbeSet(os.getpid(), catalog.builtin())
    ps.load()                                   # compiled now if not kept yet (bcc loads it itself)
    ps.stop()
    assert ps.compiled in ("cache", "bcc")
    monkeypatch.setattr(bpf_cache, "_load_prog", load_prog)
    ps = ProbeSet(os.getpid(), catalog.builtin())
    ps.load()                                   # from the kept record, through load_prog
    try:
        assert ps.compiled == "cache"
        if uprobe_multi.wanted():
            ps.bpf.load_func("g_exit_entry", ps._bcc.BPF.KPROBE, attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
        else:
            pytest.fail("this kernel takes no uprobe_multi links: the generic heads are not what attach uses")
    finally:
        ps.stop()
    for head in HEADS:
        assert seen[head] < HEAD_MAX, (head, seen)
    for _, _, body, _, _ in loader.BODIES:
        assert seen.get(body, 0) > HEAD_MAX, (body, seen)    # the loops are there, once
