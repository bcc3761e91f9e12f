#!/usr/bin/env bash
# Runs the multigrid table of docs/performance.md on this machine: every variant (D_MG,
# H_MG, DSH_MG, HSD_MG and the stand-alone F64_MG) side by side in one process per case,
# 2D on 4097² nodes (10 levels) and 3D on 129³ nodes (5 levels), k = 1, one right-hand
# side, the fastest of 3 solves. Then every kernel alone on the finest two levels (bench mg
# --kernels), against the triad of the same process.
#
#   scripts/bench/mg.sh [OUTPUT.jsonl]
#
# Environment: PERF_DEVICE, the folder of the default output under docs/perf/ (cpu-vm).
# Runtime: about 5 minutes of set-ups and solves on 2 cores, and the kernels.
# Output: raw JSON lines in OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/mg-<date>.jsonl),
# the kernels' in OUTPUT-kernels.jsonl; the tables (scripts/bench/table.py mg, mg-kernels).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/tensorfem
[[ -x $bin ]] || cargo build --release
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/mg-$(date +%Y%m%d).jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
$bin bench mg --dim 2 --n 4096 --variant all --repeats 3 --json >> "$out"
$bin bench mg --dim 3 --n 128 --variant all --repeats 3 --json >> "$out"
python3 scripts/bench/table.py mg "$out"
# Each kernel alone on the finest two levels (f64, f32, f16) against the triad of the same
# run: JSON lines next to the table's, the table printed.
kernels=${out%.jsonl}-kernels.jsonl
: > "$kernels"
for case in "--dim 2 --n 4096" "--dim 3 --n 128"; do
  # shellcheck disable=SC2086 # the case is two flags
  $bin bench mg $case --kernels --json >> "$kernels"
done
echo
python3 scripts/bench/table.py mg-kernels "$kernels"
