"""How the kept program's loader calls bpf(BPF_PROG_LOAD) (probes/bpf_cache.py ``_load_prog``),
with the syscall stood in for: the verifier's statistics where the kernel keeps them, a plain
load where it refuses the statistics log (before 5.2), and the verifier's last line when the
program itself is refused. The real loads are tests/test_ebpf_bpf_cache.py's."""

from __future__ import annotations

import ctypes as ct
import errno

import pytest

from rlscope_top.probes import bpf_cache

LEVEL, LOG_SIZE, LOG_BUF = 24, 28, 32     # union bpf_attr offsets for BPF_PROG_LOAD


def _field(attr, off: int, size: int) -> int:
    return int.from_bytes(ct.string_at(ct.addressof(attr) + off, size), "little")


class _Kernel:
    """bpf(2) as a kernel that knows these log levels, and says ``said`` in a level-1 log."""

    def __init__(self, levels: tuple[int, ...], refuse: bool = False, said: bytes = b""):
        self.levels, self.refuse, self.said, self.asked = levels, refuse, said, []

    def __call__(self, attr) -> int:
        level, size, buf = _field(attr, LEVEL, 4), _field(attr, LOG_SIZE, 4), _field(attr, LOG_BUF, 8)
        self.asked.append(level)
        if level not in self.levels or (buf and not level) or (level and not (buf and size)):
            raise OSError(errno.EINVAL, "Invalid argument")
        text = {4: b"processed 1009 insns (limit 1000000) max_states_per_insn 1 total_states 23\n",
                1: self.said}.get(level, b"")
        if buf:                         # the kernel writes its log from the start, NUL-terminated
            text = text[:size - 1] + b"\0"
            ct.memmove(buf, text, len(text))
        if self.refuse:
            raise OSError(errno.EACCES, "Permission denied")
        return 7


def _load(monkeypatch, kernel: _Kernel):
    monkeypatch.setattr(bpf_cache, "_prog_load", kernel)
    return bpf_cache._load_prog(2, b"g_enter", bytes(16), b"GPL", 0, -1)


def test_a_load_says_what_the_verifier_walked(monkeypatch):
    k = _Kernel(levels=(0, 1, 4))
    fd, (walked, took) = _load(monkeypatch, k)
    assert (fd, walked) == (7, 1009) and took >= 0 and k.asked == [4]


def test_a_kernel_without_the_statistics_log_loads_it_plainly(monkeypatch):
    k = _Kernel(levels=(0, 1))
    fd, (walked, _) = _load(monkeypatch, k)
    assert (fd, walked) == (7, 0) and k.asked == [4, 0]


def test_a_refused_program_raises_with_the_verifiers_last_line(monkeypatch):
    k = _Kernel(levels=(0, 1, 4), refuse=True, said=b"0: (b7) r0 = 0\nR1 invalid mem access 'scalar'\n")
    with pytest.raises(Exception, match=r"Failed to load BPF program g_enter: Permission denied: "
                                        r"R1 invalid mem access 'scalar'"):
        _load(monkeypatch, k)
    assert k.asked == [4, 0, 1]
