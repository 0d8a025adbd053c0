"""dlopen the toy simulator after attach; call sim_step N times after a second go file."""

import sys

from common import counted, load_simlib, ready, touch, wait_for

path, n, go_load, loaded, go_call, done = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]
ready()
wait_for(go_load)
lib = load_simlib(path)
touch(loaded)


def body():
    for _ in range(n):
        lib.sim_step(0.0001)


counted(go_call, done, body, announce=False)
