#!/usr/bin/env bash
# Runs the PSC benchmark table of docs/performance.md on this machine: bench machine, then
# bench psc for h = 1/256 and 1/512, Nrhs = 1, 64, 256, precisions f64/f32/f16, one process
# per case, each rate also as a fraction of the ceiling that process measured.
#
#   scripts/bench/psc.sh [OUTPUT.jsonl]
#
# Environment: PSC_BENCH_CACHE, the PSC operator cache (default out/bench-cache; the first
# run fills it); PERF_DEVICE, the folder of the default output under docs/perf/ (cpu-vm).
# Runtime: the set-ups, cache loads and solves of a recorded run add up to about 3 minutes
# on 2 cores; each process also measures its ceilings.
# Output: raw JSON lines in OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/psc-<date>.jsonl;
# the ceilings' line tagged "bench": "machine"); the markdown table is printed (again:
# python3 scripts/bench/table.py psc OUTPUT.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/tensorfem
[[ -x $bin ]] || cargo build --release
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/psc-$(date +%Y%m%d).jsonl}
mkdir -p "$(dirname "$out")"
cache=${PSC_BENCH_CACHE:-out/bench-cache}
: > "$out"
$bin bench machine --json | sed 's/^/{"bench":"machine",/; s/^{"bench":"machine",{/{"bench":"machine",/' >> "$out"
# h0 per size: 1/16 is flop-optimal at h = 1/256 (h0 = √h). At 1/512 the formula prefers
# h0 = 1/32 (12 vs 18 N^{3/2}), but its |E| = 29,760 needs ~7 GB per dense f64 |E|² matrix
# and several of them in the set-up: more than this 24 GiB machine has; 1/16 is used.
for case in "256 16" "512 16"; do
  set -- $case
  for nrhs in 1 64 256; do
    for p in f64 f32 f16; do
      $bin bench psc --n "$1" --n0 "$2" --nrhs "$nrhs" --precision "$p" --cache-dir "$cache" --json >> "$out"
    done
  done
done
python3 scripts/bench/table.py psc "$out"
