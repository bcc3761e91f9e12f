#!/usr/bin/env python3
"""The time of one PSC apply on the GPU split by stage, from Nsight Compute's CSV.

    python3 scripts/bench/ncu-stages.py PROFILE.csv

PROFILE.csv is what `jobs/gpu-checks.sh` writes with PARTS=profile
(60-profile-nrhs1024.csv and 60-profile-nrhs1.csv: ncu --metrics gpu__time_duration.sum
--csv over `tensorfem bench psc --backend cuda`). It reads CSV, not JSON lines, so it stays
apart from scripts/bench/table.py. Runs in a second; needs only Python. An apply runs from
its first hierarchical-transform launch to the stats_reduce that ends it; the last complete
one (warm) is reported, each kernel with its duration, then the stages: dense products
(cuBLAS), sparse products (D, Dᵀ), hierarchical transforms, C/E/I gather and scatter, and
vector passes (precision conversions, axpby, statistics).
"""
import csv
import sys

STAGES = [
    ("dense products (cuBLAS)", ("nvjet", "cutlass", "cublas", "gemm", "sm90_xmma", "splitK")),
    ("sparse products (D, Dᵀ)", ("csr_",)),
    ("hierarchical transforms", ("hierarchical_", "row_update")),
    ("C/E/I gather and scatter", ("psc_gather", "psc_scatter")),
    ("vector passes", ("convert", "axpby", "column_", "stats_reduce", "scale", "relayout", "fill")),
]


def stage_of(kernel):
    for name, keys in STAGES:
        if any(k in kernel for k in keys):
            return name
    return "other"


def launches(path):
    with open(path, errors="replace") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    header, rows = rows[0], [r for r in rows[1:] if r[0] != "ID"]
    name, value = header.index("Kernel Name"), header.index("Metric Value")
    return [(r[name], float(r[value].replace(",", "")) * 1e-6) for r in rows]  # ms


def last_apply(seq):
    applies, start = [], None
    for i, (kernel, _) in enumerate(seq):
        if start is None and kernel.startswith(("hierarchical_", "row_update")):
            start = i
        elif start is not None and kernel == "stats_reduce":
            applies.append(seq[start : i + 1])
            start = None
    if not applies:
        sys.exit("no complete apply in the profile")
    return applies[-1], len(applies)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    apply, count = last_apply(launches(sys.argv[1]))
    total = sum(ms for _, ms in apply)
    print(f"apply {count} of {count}: {len(apply)} launches, {total:.3f} ms")
    for kernel, ms in apply:
        print(f"  {ms:8.3f} ms  {kernel[:90]}")
    print(f"\n| stage | ms | share |\n|---|---:|---:|")
    for name, _ in STAGES + [("other", ())]:
        ms = sum(t for k, t in apply if stage_of(k) == name)
        if ms > 0:
            print(f"| {name} | {ms:.2f} | {100 * ms / total:.0f} % |")
    print(f"| total | {total:.2f} | |")


if __name__ == "__main__":
    main()
