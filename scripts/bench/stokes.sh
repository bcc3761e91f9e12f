#!/usr/bin/env bash
# Runs the Stokes table of docs/performance.md on this machine: the preconditioners side by
# side in one process per mesh (bench stokes), FGMRES(30) to 1e-8, at 128², 256², 512²
# (all five, preconditioner in f32) and 1024² (tuned Vanka and Braess-Sarazin, in f32 and
# f64), with the time per element per solve beside the published single-core Vanka figure.
#
#   scripts/bench/stokes.sh [OUTPUT.jsonl]
#
# Environment: PERF_DEVICE, the folder of the default output under docs/perf/ (cpu-vm).
# Runtime: about 13 minutes of set-ups and solves on 2 cores.
# Output: raw JSON lines in OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/stokes-<date>.jsonl);
# the markdown table is printed (again: python3 scripts/bench/table.py stokes OUTPUT.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/tensorfem
[[ -x $bin ]] || cargo build --release
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/stokes-$(date +%Y%m%d).jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
for n in 128 256 512; do
    $bin bench stokes --n "$n" --precond all --precision f32 --json >> "$out"
done
$bin bench stokes --n 1024 --precond vanka-tuned,braess-sarazin --precision f32 --json >> "$out"
$bin bench stokes --n 1024 --precond vanka-tuned,braess-sarazin --precision f64 --json >> "$out"
python3 scripts/bench/table.py stokes "$out"
