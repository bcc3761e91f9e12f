#!/usr/bin/env python3
"""Compares the seeded outputs of two test runs, written with TENSORFEM_TEST_OUTPUTS=<dir>
(tests/common/outputs.rs): a GPU run's against the CUDA stand-in's, or any two runs.

    python3 scripts/compare-test-outputs.py A B [--tolerance f16=1e-2 ...]

Each output of A is compared with the same output of B (the same test, the same name, the
same occurrence): the same length, the same non-finite entries, and every finite entry
within tolerance × the largest magnitude of B's values. Where a run kept every step-th
entry (TENSORFEM_TEST_OUTPUTS_LIMIT), the entries both runs kept are compared. The tolerance is the one the test
records for the output's precision; `--tolerance PRECISION=TOL` replaces it for every output
of that precision. Prints the outputs that differ (first differing entry), a table per
precision (outputs compared, largest relative difference, tolerances) and the tests only
one side ran.

Exit status: 0 when every output both runs wrote agrees, 1 when one differs (or a test
wrote a different number of outputs, or the runs have no test in common), 2 for unreadable
input.
"""

import argparse
import base64
import json
import math
import os
import struct
import sys

PRECISIONS = ("f16", "tf32", "f32", "f64")


class InputError(Exception):
    pass


def read_run(directory):
    """{(binary, test): [record, ...]} of a run's directory."""
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: not a directory of test outputs")
    run = {}
    for binary in sorted(os.listdir(directory)):
        folder = os.path.join(directory, binary)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(folder, name)
            records = []
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    try:
                        record = json.loads(line)
                        records.append(
                            (record["what"], record["precision"], float(record["tolerance"]),
                             int(record["length"]), int(record["step"]), decode(record))
                        )
                    except (ValueError, KeyError, TypeError, struct.error) as e:
                        raise InputError(f"{path}:{number}: not a test output ({e})") from e
            run[(binary, name[: -len(".jsonl")])] = records
    if not run:
        raise InputError(f"{directory}: no test outputs (<binary>/<test>.jsonl)")
    return run


def decode(record):
    """The kept entries of a record: base64 of little-endian f16, f32 or f64."""
    code = {"f16": "e", "f32": "f", "f64": "d"}[record["encoding"]]
    data = base64.b64decode(record["values"], validate=True)
    return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))


def common_entries(a, b):
    """The entries both sides kept (a and b are (step, values)): got, want and their step."""
    (sa, va), (sb, vb) = a, b
    step = sa * sb // math.gcd(sa, sb)
    return va[:: step // sa], vb[:: step // sb], step


def relative_difference(got, want, step):
    """(largest |got − want| / max |want|, the entry where it is), or (None, why) for
    entries that cannot be compared (lengths, non-finite entries); entry i of the lists is
    entry i·step of the output."""
    if len(got) != len(want):
        return None, f"lengths {len(got)} and {len(want)}"
    scale = max((abs(w) for w in want if math.isfinite(w)), default=0.0) or 1e-300
    worst, where = 0.0, 0
    for i, (g, w) in enumerate(zip(got, want)):
        if not (math.isfinite(g) and math.isfinite(w)):
            if not (g == w or (math.isnan(g) and math.isnan(w))):
                return None, f"entry {i * step}: {g!r} and {w!r}"
            continue
        d = abs(g - w) / scale
        if d > worst:
            worst, where = d, i
    return worst, where


def tolerance_option(text):
    precision, _, tol = text.partition("=")
    if precision not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"{text!r}: precision is one of {', '.join(PRECISIONS)}")
    try:
        value = float(tol)
    except ValueError:
        value = -1.0
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"{text!r}: the tolerance is a positive number")
    return precision, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="a run's TENSORFEM_TEST_OUTPUTS directory (e.g. the GPU's)")
    parser.add_argument("b", help="the run to compare it with (e.g. the stand-in's)")
    parser.add_argument("--tolerance", type=tolerance_option, action="append", default=[],
                        metavar="PRECISION=TOL", help="replaces the recorded tolerance")
    args = parser.parse_args()
    overrides = dict(args.tolerance)
    try:
        a, b = read_run(args.a), read_run(args.b)
    except (InputError, OSError) as e:
        print(f"compare-test-outputs: {e}", file=sys.stderr)
        return 2

    common = sorted(set(a) & set(b))
    differ = 0
    table = {}  # precision -> [outputs, worst, smallest tolerance, largest tolerance]
    for key in common:
        test = "/".join(key)
        if len(a[key]) != len(b[key]):
            print(f"DIFFERS {test}: {len(a[key])} outputs in A, {len(b[key])} in B")
            differ += 1
            continue
        for record_a, record_b in zip(a[key], b[key]):
            what, precision, tol_a, length_a, step_a, got = record_a
            what_b, _, tol_b, length_b, step_b, want = record_b
            if what != what_b:
                print(f"DIFFERS {test}: output {what!r} in A where B has {what_b!r}")
                differ += 1
                continue
            tol = overrides.get(precision, max(tol_a, tol_b))
            if length_a != length_b:
                worst, where = None, f"lengths {length_a} and {length_b}"
            else:
                got, want, step = common_entries((step_a, got), (step_b, want))
                worst, where = relative_difference(got, want, step)
            row = table.setdefault(precision, [0, 0.0, math.inf, 0.0])
            row[0] += 1
            row[2], row[3] = min(row[2], tol), max(row[3], tol)
            if worst is None:
                print(f"DIFFERS {test}: {what}: {where}")
                differ += 1
            elif worst > tol:
                row[1] = max(row[1], worst)
                print(f"DIFFERS {test}: {what}: entry {where * step}: {got[where]!r} and "
                      f"{want[where]!r} (relative {worst:.2e} > {tol:.1e})")
                differ += 1
            else:
                row[1] = max(row[1], worst)

    print(f"{'precision':<10} {'outputs':>8} {'largest rel. diff.':>19} {'tolerance':>19}")
    for precision in sorted(table, key=lambda p: PRECISIONS.index(p) if p in PRECISIONS else 9):
        n, worst, low, high = table[precision]
        tol = f"{low:.0e}" if low == high else f"{low:.0e}–{high:.0e}"
        print(f"{precision:<10} {n:>8} {worst:>19.2e} {tol:>19}")
    for side, run, other in (("A", a, b), ("B", b, a)):
        only = sorted("/".join(k) for k in set(run) - set(other))
        if only:
            print(f"only in {side} ({len(only)} tests): {', '.join(only)}")
    compared = sum(row[0] for row in table.values())
    if not common:
        print("compare-test-outputs: the two runs have no test in common", file=sys.stderr)
        return 1
    print(f"{len(common)} tests, {compared} outputs: "
          + (f"{differ} differ" if differ else "all within tolerance"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
