#!/usr/bin/env bash
# The PSC methods side by side (docs/performance.md, "PSC methods and PSC-IR"): 64
# right-hand sides to a relative residual of 1e-10 at h = 1/512 (h0 = 1/16) with M1, M2 and
# M3, and M3 alone at h = 1/1024 (h0 = 1/32), where M1 and M2 cannot be set up on a 24 GiB
# machine (their dense |E|×|E| operators: 61,504² f64 = 30 GB each). Each method runs in
# f64 on its own (M3: CG to 1e-10) and in f32 inside PSC-IR; one process per case, so its
# peak memory is the case's. Then M1 and M3 in f32 PSC-IR at h = 1/512 once more, each
# beside the sparse Cholesky's solve of the same block (factorisation excluded).
#
# Usage:
#   scripts/bench/psc-methods.sh [OUTPUT.jsonl]
# Environment:
#   PERF_DEVICE  folder under docs/perf/ of the default output (default cpu-vm)
# Runtime on 2 cores: the set-ups and solves of a recorded run add up to about 9 minutes
# (each h = 1/1024 solve about a minute); the whole run takes longer.
# Output: raw JSON lines in OUTPUT.jsonl (default
# docs/perf/$PERF_DEVICE/psc-methods-<date>.jsonl); the tables are printed (again:
# python3 scripts/bench/table.py psc-methods OUTPUT.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/tensorfem
[[ -x $bin ]] || cargo build --release
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/psc-methods-$(date +%Y%m%d).jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
case_() { # n n0 method runs
  $bin bench psc --n "$1" --n0 "$2" --nrhs 64 --method "$3" --runs "$4" \
    --precision f64 --rtol 1e-10 --json >> "$out"
  $bin bench psc --n "$1" --n0 "$2" --nrhs 64 --method "$3" --runs "$4" \
    --precision f32 --refine --rtol 1e-10 --json >> "$out"
}
for method in m1 m2 m3; do
  case_ 512 16 "$method" 3
done
# One timed solve after the warm-up: each takes about a minute on 2 cores.
case_ 1024 32 m3 1
# PSC-IR beside the sparse Cholesky's solve of the same 64 columns (its own
# process: the factor would add to the rows' peak memory above).
for method in m1 m3; do
  $bin bench psc --n 512 --n0 16 --nrhs 64 --method "$method" --runs 3 \
    --precision f32 --refine --rtol 1e-10 --reference --json >> "$out"
done
python3 scripts/bench/table.py psc-methods "$out"
