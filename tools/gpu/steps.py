#!/usr/bin/env python3
"""Sums the kernel times of whole decode steps in an Nsight Compute CSV written by
`tools/gpu/check.sh` (its profile and gguf steps: gpu__time_duration per launch). A step starts at the
embedding kernel. Prints, per kernel name (and with --grid per grid and block too, so that
one kernel's launches of different shapes, say gate/up against o, stay apart), the launches
and microseconds per step."""
import argparse
import collections
import csv


def steps(path, by_grid):
    rows = [r for r in csv.reader(open(path)) if len(r) > 14 and r[12] == "gpu__time_duration.sum"]
    current, out = None, []
    for r in rows:
        name = r[4].replace("void ", "").replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
        name = name.split("(")[0]
        if "embed" in name:
            current = collections.defaultdict(lambda: [0, 0.0])
            out.append(current)
        if by_grid:
            name += f" grid {r[8]} block {r[7]}"
        if current is not None:
            current[name][0] += 1
            current[name][1] += float(r[14].replace(",", "")) / 1000.0
    # The last step may be cut off, unless the run ended within the launches profiled (a prefill's).
    return out if "prefill" in path else out[:-1]


parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("csv", nargs="+", help="Nsight Compute CSVs (--metrics gpu__time_duration.sum --csv)")
parser.add_argument("--grid", action="store_true", help="sum per kernel, grid and block")
args = parser.parse_args()
for path in args.csv:
    whole = steps(path, args.grid)
    if not whole:
        print(path, "no whole step")
        continue
    # The last step (decode), or the longest (a prefill among decode steps) when the name says prefill.
    step = max(whole, key=lambda st: sum(t for _, t in st.values())) if "prefill" in path else whole[-1]
    total = sum(t for _, t in step.values())
    print(f"== {path}: {len(whole)} whole steps; this one: {sum(n for n, _ in step.values())} launches, {total:.1f} us")
    for name, (n, t) in sorted(step.items(), key=lambda kv: -kv[1][1]):
        print(f"  {t:9.1f} us  {n:4d} x {t / n:7.2f}  {name}")
