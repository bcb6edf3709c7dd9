#!/usr/bin/env python3
"""Prints peer_bench.sh's results as markdown: the run's facts (read as "key: value"
lines from stdin), every round, and the ratios tessera / llama.cpp per dtype and test
(of the medians over rounds, then of each round). Standard library only.

    report.py RESULTS.tsv < facts
RESULTS.tsv rows: round, engine, dtype, test, tokens/s, note (tab-separated).
"""

import statistics
import sys


def main():
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            round_, engine, dtype, test, tps, note = line.rstrip("\n").split("\t")
            rows.append((int(round_), engine, dtype, test, float(tps), note))

    for line in sys.stdin:
        if line.strip():
            key, _, value = line.partition(":")
            print(f"- {key.strip()}: {value.strip()}")
    print()

    print("| round | engine | dtype | test | tok/s | note |")
    print("|---|---|---|---|---|---|")
    for round_, engine, dtype, test, tps, note in rows:
        print(f"| {round_} | {engine} | {dtype} | {test} | {tps:.2f} | {note} |")
    print()

    print("| dtype | test | tessera, median | llama.cpp, median | tessera / llama.cpp | each round |")
    print("|---|---|---|---|---|---|")
    keys = []
    for _, _, dtype, test, _, _ in rows:
        if (dtype, test) not in keys:
            keys.append((dtype, test))
    for dtype, test in keys:
        ours = {r: tps for r, e, d, t, tps, _ in rows if (e, d, t) == ("tessera", dtype, test)}
        peer = {r: tps for r, e, d, t, tps, _ in rows if (e, d, t) == ("llama.cpp", dtype, test)}
        if not ours or not peer:
            continue
        ours_median, peer_median = statistics.median(ours.values()), statistics.median(peer.values())
        each = ", ".join(f"{ours[r] / peer[r]:.2f}" for r in sorted(ours) if r in peer)
        print(f"| {dtype} | {test} | {ours_median:.2f} | {peer_median:.2f} | "
              f"**{ours_median / peer_median:.2f}x** | {each} |")


if __name__ == "__main__":
    main()
