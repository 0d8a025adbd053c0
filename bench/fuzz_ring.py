"""The ring reader, `compare` and the GPU agent's region against hostile input, at a larger
scale than the suite.

The cases are tests/ring_fuzz.py's (a real lapped ring: random bytes, truncations, byte
flips, header fields at extremes) and compare's mutated summaries (a field of the wrong
type), and tests/region_fuzz.py's forged GPU agent regions, read as a session reads them.
Anything but RingError / UsageError / RegionError / LayoutError is a defect (so is a table
that grows with a forged value); the first few are printed.

usage: sudo .venv/bin/python bench/fuzz_ring.py [--cases 1000000] [--seed 1] [--write]
(compare and the region run cases/10)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import region_fuzz  # noqa: E402
from ring_fuzz import fuzz, fuzz_compare  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="put the table in docs/security.md")
    a = ap.parse_args()
    rows, untyped = [], 0
    for name, run in (("ring reader (RingError)", lambda d: fuzz(os.path.join(d, "ring.bin"), a.cases, a.seed)),
                      ("compare's summary loading (UsageError)", lambda d: fuzz_compare(d, a.cases // 10, a.seed)),
                      ("GPU agent region, read as a session does (RegionError, LayoutError)",
                       lambda d: region_fuzz.fuzz(os.path.join(d, "region.bin"), a.cases // 10, a.seed))):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as d:
            out = run(d)
        rows.append(f"| {name} | {out['cases']:,} | {out['typed']:,} | {out['read']:,} | {out['untyped']:,} "
                    f"| {time.monotonic() - t0:.0f} s | seed {a.seed} |")
        print(rows[-1])
        for e in out["examples"]:
            print("  untyped:", e)
        untyped += out["untyped"]
    if a.write:
        sys.path.insert(0, HERE)
        from docsection import replace_section  # noqa: PLC0415

        replace_section(os.path.join(os.path.dirname(HERE), "docs", "security.md"), "## Fuzzing", [
            f"`sudo .venv/bin/python bench/fuzz_ring.py --cases {a.cases} --seed {a.seed} --write` (compare and the "
            "region get a tenth of the cases: each renders a table, or reads, decodes, joins and counts). The suite "
            "runs 100,003 ring cases (seed 23), 10,007 compare cases (seed 1009) and 100,003 region cases (seed 29) "
            "on every run: tests/test_hostile_input.py.", "",
            "| target | cases | typed error | read cleanly | untyped exceptions | time | |",
            "|---|---|---|---|---|---|---|", *rows])
    return 1 if untyped else 0


if __name__ == "__main__":
    sys.exit(main())
