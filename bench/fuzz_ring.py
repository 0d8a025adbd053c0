"""The ring reader and `compare` against hostile input, at a larger scale than the suite.

The cases are tests/ring_fuzz.py's (a real lapped ring: random bytes, truncations, byte
flips, header fields at extremes) and compare's mutated summaries (a field of the wrong
type). Anything but RingError / UsageError is a defect; the first few are printed.

usage: sudo .venv/bin/python bench/fuzz_ring.py [--cases 1000000] [--seed 1] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from ring_fuzz import fuzz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="put the table in docs/hostile-input.md")
    a = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        out = fuzz(os.path.join(d, "ring.bin"), a.cases, a.seed)
    dt = time.monotonic() - t0
    row = (f"| ring reader | {out['cases']:,} | {out['typed']:,} | {out['read']:,} | {out['untyped']:,} "
           f"| {dt:.0f} s | seed {a.seed} |")
    print(row)
    for e in out["examples"]:
        print("  untyped:", e)
    if a.write:
        sys.path.insert(0, HERE)
        from docsection import replace_section  # noqa: PLC0415

        replace_section(os.path.join(os.path.dirname(HERE), "docs", "hostile-input.md"), "## Fuzzing the ring reader", [
            "`sudo .venv/bin/python bench/fuzz_ring.py --cases N --seed S --write` (the suite runs 100,003",
            "cases with seed 23 on every run: tests/test_hostile_input.py).", "",
            "| target | cases | typed error (RingError) | read cleanly | untyped exceptions | time | |",
            "|---|---|---|---|---|---|---|", row])
    return 1 if out["untyped"] else 0


if __name__ == "__main__":
    sys.exit(main())
