"""The processes whose sessions a session looks for: its targets and their parents
(rlscope_top/collect/neighbours.py; the sessions themselves: tests/test_ebpf_lifecycle.py)."""

import os
import subprocess
import sys

from rlscope_top.collect.neighbours import _parents


def test_a_targets_parents_are_named_with_it_and_a_target_is_never_its_own_parent():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        up = _parents({child.pid})
        assert up[os.getpid()] == child.pid and up[os.getppid()] == child.pid
        both = _parents({child.pid, os.getpid()})
        assert os.getpid() not in both and both[os.getppid()] == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert _parents({2 ** 22 + 7}) == {}          # gone (or never there): nothing above it
