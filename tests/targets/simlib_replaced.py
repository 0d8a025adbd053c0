"""The toy simulator loaded from a copy that is then replaced on disk, as `pip install -U`
replaces a library under a running job: the process runs the deleted inode, and the path
holds another file. Then exactly N calls of sim_step(1 us) after the go file appears.

usage: simlib_replaced.py SIMLIB COPY N GO DONE
"""

import os
import shutil
import sys

from common import counted, load_simlib

simlib, copy, n, go, done = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
shutil.copy(simlib, copy)
lib = load_simlib(copy)
os.unlink(copy)
with open(copy, "wb") as f:          # the new version: another file (here not even ELF) at the path
    f.write(b"not the library this process runs\n")


def body():
    for _ in range(n):
        lib.sim_step(1e-6)


counted(go, done, body)
