"""Operations whose first samples the kernel cannot name: seven functions, each a new code
object, run one after another between stretches of a known one. Each new function's first
sample must reach the monitor at once, though the known function's samples before it were
queued without waking it (pystack.c pys_wake_flags).

usage: new_ops.py GO_FILE TRUTH
"""

import json
import sys
import time

from common import ready, wait_for

N = 7
BODY = ("def {name}(s):\n    end = time.perf_counter() + s\n    x = 0\n"
        "    while time.perf_counter() < end:\n        for j in range(50):\n            x += j * j\n")
for i in range(N):
    exec(BODY.format(name=f"b_work_{i}"), globals())     # one code object each
exec(BODY.format(name="a_work"), globals())


def main() -> None:
    go, truth = sys.argv[1], sys.argv[2]
    ready()
    wait_for(go)
    a_work(0.3)                                           # noqa: F821 - made above
    spans = []
    for i in range(N):
        t0 = time.monotonic_ns()
        globals()[f"b_work_{i}"](0.25)
        spans.append((t0, time.monotonic_ns()))
        a_work(0.25)                                      # noqa: F821
    with open(truth, "w") as f:
        json.dump(spans, f)
    while True:
        a_work(1.0)                                       # noqa: F821


if __name__ == "__main__":
    main()
