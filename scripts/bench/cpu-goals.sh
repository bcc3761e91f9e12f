#!/usr/bin/env bash
# The CPU kernels' goals (docs/performance.md, "The CPU goals in one run"), each measured
# side by side with its ceiling or its competitor in one run of this script, and the table
# of which were met:
#
#   - H_MG against D_MG, time to solution with one right-hand side: 2D 4097² nodes ≥ 1.8×,
#     3D 129³ ≥ 1.5× (bench mg --variant D_MG,H_MG, one process per case);
#   - every f64 multigrid kernel on the finest two levels at ≥ 60 % of the triad measured in
#     the same process (bench mg --kernels, 2D n = 4096 and 3D n = 128);
#   - PSC-M1 at h = 1/256 (h0 = 1/16): f32 with 64 right-hand sides at ≥ 70 % of the f32
#     GEMM peak of the same process (flops by the formula of docs/mathematics.md §3); one
#     right-hand side at ≥ 70 % of the triad (operator bytes actually read) in f64, f32 and
#     f16, and the same at h = 1/512 for the record;
#   - Stokes FGMRES + Braess-Sarazin and + tuned Vanka, preconditioners in f32, 1024²:
#     ≤ 0.008 ms per element per solve;
#   - multigrid with 64 random right-hand sides at n = 1024 to relative residual 1e-6
#     against the C + OpenMP peer in ../shared/peers (scripts/bench/mg-peer.sh, the peer run
#     first and tensorfem right after it, per cycle): H_MG ≥ 1.5× the peer's MDof/s in
#     V(2,2) ω = 0.9 and V(3,3) ω = 2/3, and its time per column with 64 columns at most
#     half of its time with one;
#   - PSC-IR (M1 in f32) at h = 1/512 with 64 right-hand sides to 1e-10 beside the
#     `cholesky` method's solve of the same block (reported; no threshold), with its times
#     to 1e-6 and 1e-10.
#
# Usage:
#   scripts/bench/cpu-goals.sh [OUTPUT.jsonl]
# Environment:
#   PERF_DEVICE      folder under docs/perf/ of the default output (default cpu-vm)
#   PSC_BENCH_CACHE  PSC operator cache (default out/bench-cache)
#   PEERS            as for scripts/bench/mg-peer.sh
# Runtime: about 25 minutes on 2 cores, plus 1–2 minutes the first time to fill the PSC
# operator cache. Builds the release binary first (cargo build --release).
# Output: raw JSON lines, each tagged with its "case" (the peer's lines too), in
# OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/cpu-goals-<date>.jsonl); the table is printed
# at the end (again: python3 scripts/bench/table.py cpu-goals OUTPUT.jsonl), and the script
# exits 1 if a goal's measurement is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/tensorfem
cargo build --release --quiet
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/cpu-goals-$(date +%Y%m%d).jsonl}
cache=${PSC_BENCH_CACHE:-out/bench-cache}
mkdir -p "$(dirname "$out")"
: > "$out"

# Appends stdin's JSON lines to $out with "case": $1 added.
tag() {
  python3 -c 'import json, sys
for line in sys.stdin:
    if line.strip():
        r = json.loads(line); r["case"] = sys.argv[1]; print(json.dumps(r))' "$1" >> "$out"
}

$bin bench machine --json | tag machine
$bin bench mg --dim 2 --n 4096 --variant D_MG,H_MG --repeats 3 --json | tag "mg 2d"
$bin bench mg --dim 3 --n 128 --variant D_MG,H_MG --repeats 3 --json | tag "mg 3d"
$bin bench mg --dim 2 --n 4096 --kernels --json | tag "mg kernels 2d"
$bin bench mg --dim 3 --n 128 --kernels --json | tag "mg kernels 3d"
$bin bench psc --n 256 --n0 16 --nrhs 64 --precision f32 --cache-dir "$cache" --json | tag "psc 64"
for n in 256 512; do
  $bin bench psc --n "$n" --n0 16 --nrhs 1 --precision f64,f32,f16 --cache-dir "$cache" --json \
    | tag "psc 1"
done
$bin bench stokes --n 1024 --precond vanka-tuned,braess-sarazin --precision f32 --json | tag stokes
$bin bench psc --n 512 --n0 16 --nrhs 64 --precision f32 --refine --rtol 1e-10 --runs 3 \
  --reference --cache-dir "$cache" --json | tag "psc-ir"
peer=$(mktemp)
trap 'rm -f "$peer"' EXIT
scripts/bench/mg-peer.sh "$peer" > /dev/null
tag peer < "$peer"
python3 scripts/bench/table.py cpu-goals "$out"
