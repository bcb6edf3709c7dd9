#!/usr/bin/env python3
"""Sums the kernel times of whole decode steps in an Nsight Compute CSV written by
`tools/gpu/check.sh profile` (gpu__time_duration per launch). A step starts at the
embedding kernel. Prints, per kernel name, the launches and microseconds per step."""
import collections
import csv
import sys


def steps(path):
    rows = [r for r in csv.reader(open(path)) if len(r) > 14 and r[12] == "gpu__time_duration.sum"]
    current, out = None, []
    for r in rows:
        name = r[4].split("(")[0].replace("void ", "").replace("unnamed>::", "")
        if "embed" in name:
            current = collections.defaultdict(lambda: [0, 0.0])
            out.append(current)
        if current is not None:
            current[name][0] += 1
            current[name][1] += float(r[14].replace(",", "")) / 1000.0
    # The last step may be cut off, unless the run ended within the launches profiled (a prefill's).
    return out if "prefill" in path else out[:-1]


for path in sys.argv[1:]:
    whole = steps(path)
    if not whole:
        print(path, "no whole step")
        continue
    # The last step (decode), or the longest (a prefill among decode steps) when the name says prefill.
    step = max(whole, key=lambda st: sum(t for _, t in st.values())) if "prefill" in path else whole[-1]
    total = sum(t for _, t in step.values())
    print(f"== {path}: {len(whole)} whole steps; this one: {sum(n for n, _ in step.values())} launches, {total:.1f} us")
    for name, (n, t) in sorted(step.items(), key=lambda kv: -kv[1][1]):
        print(f"  {t:9.1f} us  {n:4d} x {t / n:7.2f}  {name}")
