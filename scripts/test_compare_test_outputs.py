#!/usr/bin/env python3
"""Test of scripts/compare-test-outputs.py (make test): runs that agree within each
precision's tolerance pass, a difference beyond it, a changed NaN, a changed length or a
missing output fails naming the test and output, overrides apply per precision, and bad
input exits 2.

    python3 scripts/test_compare_test_outputs.py
"""

import base64
import json
import os
import struct
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare-test-outputs.py")


def write_run(root, name, tests, step=1):
    """tests: {(binary, test): [(what, precision, tolerance, values), ...]}; every step-th
    value kept, as tests/common/outputs.rs writes them (here always in f64)."""
    run = os.path.join(root, name)
    for (binary, test), records in tests.items():
        os.makedirs(os.path.join(run, binary), exist_ok=True)
        with open(os.path.join(run, binary, test + ".jsonl"), "w", encoding="utf-8") as f:
            for what, precision, tol, values in records:
                kept = values[::step]
                data = base64.b64encode(struct.pack(f"<{len(kept)}d", *kept)).decode()
                line = {"what": what, "precision": precision, "tolerance": tol,
                        "length": len(values), "step": step, "encoding": "f64", "values": data}
                f.write(json.dumps(line) + "\n")
    return run


def compare(a, b, *options):
    p = subprocess.run([sys.executable, SCRIPT, a, b, *options],
                       capture_output=True, text=True, check=False)
    return p.returncode, p.stdout + p.stderr


def expect(condition, message, output):
    if not condition:
        print(f"FAILED: {message}\n{output}")
        sys.exit(1)


def main():
    base = {
        ("gpu", "axpby"): [("axpby (f16)", "f16", 2e-3, [1.0, -2.0, float("nan")]),
                           ("axpby (f64)", "f64", 1e-13, [1.0, -2.0, 4.0])],
        ("psc", "solve.cuda"): [("M1 solution", "f32", 1e-5, [0.5, 0.25])],
    }
    with tempfile.TemporaryDirectory() as root:
        a = write_run(root, "a", base)
        close = dict(base)
        close[("gpu", "axpby")] = [("axpby (f16)", "f16", 2e-3, [1.0, -2.0 + 3e-3, float("nan")]),
                                   ("axpby (f64)", "f64", 1e-13, [1.0, -2.0, 4.0 + 1e-13])]
        b = write_run(root, "b", close)
        code, out = compare(a, b)
        expect(code == 0 and "all within tolerance" in out, "close runs pass", out)
        expect("f16" in out and "1.50e-03" in out, "the table gives f16's largest difference", out)

        code, out = compare(a, b, "--tolerance", "f16=1e-4")
        expect(code == 1 and "DIFFERS gpu/axpby: axpby (f16): entry 1" in out,
               "an override tightens f16 alone", out)

        far = dict(base)
        far[("psc", "solve.cuda")] = [("M1 solution", "f32", 1e-5, [0.5, 0.2501])]
        code, out = compare(a, write_run(root, "far", far))
        expect(code == 1 and "DIFFERS psc/solve.cuda: M1 solution: entry 1" in out,
               "a difference beyond f32's tolerance fails", out)

        nan = dict(base)
        nan[("gpu", "axpby")] = [("axpby (f16)", "f16", 2e-3, [1.0, -2.0, 7.0]), base[("gpu", "axpby")][1]]
        code, out = compare(a, write_run(root, "nan", nan))
        expect(code == 1 and "entry 2: nan and 7.0" in out, "a NaN that became a number fails", out)

        short = dict(base)
        short[("gpu", "axpby")] = [("axpby (f16)", "f16", 2e-3, [1.0, -2.0]), base[("gpu", "axpby")][1]]
        code, out = compare(a, write_run(root, "short", short))
        expect(code == 1 and "lengths 3 and 2" in out, "a changed length fails", out)

        # A run that kept every other entry: compared on the entries both kept.
        sampled = write_run(root, "sampled", close, step=2)
        code, out = compare(a, sampled)
        expect(code == 0 and "all within tolerance" in out, "a sampled run compares", out)
        odd = dict(base)
        odd[("gpu", "axpby")] = [base[("gpu", "axpby")][0],
                                 ("axpby (f64)", "f64", 1e-13, [1.0, -2.0, 4.5])]
        code, out = compare(write_run(root, "odd", odd, step=2), a)
        expect(code == 1 and "axpby (f64): entry 2: 4.5 and 4.0" in out,
               "a sampled run's kept entries are compared", out)

        fewer = {("gpu", "axpby"): base[("gpu", "axpby")][:1]}
        code, out = compare(a, write_run(root, "fewer", fewer))
        expect(code == 1 and "2 outputs in A, 1 in B" in out, "a missing output fails", out)
        expect("only in A (1 tests): psc/solve.cuda" in out, "tests one side ran are listed", out)

        other = write_run(root, "other", {("mg", "x"): [("u", "f64", 1e-6, [1.0])]})
        code, out = compare(a, other)
        expect(code == 1 and "no test in common" in out, "disjoint runs fail", out)

        code, out = compare(a, os.path.join(root, "missing"))
        expect(code == 2 and "not a directory" in out, "a missing directory exits 2", out)
        with open(os.path.join(b, "gpu", "axpby.jsonl"), "a", encoding="utf-8") as f:
            f.write("{not json\n")
        code, out = compare(a, b)
        expect(code == 2 and "axpby.jsonl:3: not a test output" in out, "bad JSON exits 2", out)
        code, out = compare(a, a, "--tolerance", "f17=1")
        expect(code == 2 and "precision is one of" in out, "a bad override exits 2", out)
    print("compare-test-outputs: every check passed")


if __name__ == "__main__":
    main()
