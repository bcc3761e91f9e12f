#!/usr/bin/env bash
# Runs the multigrid table of docs/performance.md on this machine: every variant (D_MG,
# H_MG, DSH_MG, HSD_MG and the stand-alone F64_MG) side by side in one process per case,
# 2D on 4097² nodes (10 levels) and 3D on 129³ nodes (5 levels), k = 1, one right-hand
# side, the fastest of 3 solves. Raw JSON lines go to docs/perf/mg-cpu-<host>-<date>.jsonl; the markdown table is
# printed.
#
#   scripts/bench-mg-table.sh [output.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/tensorfem
[[ -x $bin ]] || cargo build --release
out=${1:-docs/perf/mg-cpu-$(hostname)-$(date +%Y%m%d).jsonl}
: > "$out"
$bin bench mg --dim 2 --n 4096 --variant all --repeats 3 --json >> "$out"
$bin bench mg --dim 3 --n 128 --variant all --repeats 3 --json >> "$out"
python3 scripts/mg_table.py "$out"
