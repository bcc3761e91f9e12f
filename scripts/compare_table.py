#!/usr/bin/env python3
"""The old-against-new table of scripts/compare-speed.sh: per case, the median over the
repeats of old time / new time of the solve (above 1: the new code is faster), with the
smallest and largest ratio of the pairs, and the median times themselves.

    python3 scripts/compare_table.py docs/perf/compare-<host>-<date>.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def solve_seconds(record):
    """The timed solve of one JSON line: PSC's solve, multigrid's and Stokes' time to
    solution."""
    for key in ("solve_seconds", "seconds"):
        if key in record:
            return record[key]
    raise KeyError(f"no solve time in {record}")


def main(path):
    times = defaultdict(dict)  # case -> {(build, repeat): seconds}
    order = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            case = record["case"]
            if case not in times:
                order.append(case)
            times[case][(record["build"], record["repeat"])] = solve_seconds(record)
    print("| case | old s (median) | new s (median) | old/new median | min | max | pairs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worst = None
    for case in order:
        t = times[case]
        repeats = sorted({r for (_, r) in t})
        pairs = [(t[("old", r)], t[("new", r)]) for r in repeats if ("old", r) in t and ("new", r) in t]
        ratios = [o / n for o, n in pairs]
        if not ratios:
            continue
        median = statistics.median(ratios)
        worst = median if worst is None else min(worst, median)
        print(
            f"| {case} | {statistics.median(o for o, _ in pairs):.4g} | "
            f"{statistics.median(n for _, n in pairs):.4g} | {median:.3f} | "
            f"{min(ratios):.3f} | {max(ratios):.3f} | {len(pairs)} |"
        )
    print(f"\nsmallest median ratio: {worst:.3f} (goal: ≥ 0.95)")


if __name__ == "__main__":
    main(sys.argv[1])
