#!/usr/bin/env bash
# PSC on the flow around a square (P1, Dirichlet everywhere as in the published counts):
# `tensorfem psc-info` at fine level L (default 7) for each coarse level L0 (default 0 1 2 3),
# one process after the other, each with this machine's cores. Prints a Markdown table
# (docs/performance.md) and keeps every run's JSON in out/psc-info-flow/.
#
#   scripts/bench/psc-info-flow.sh [L [L0 …]]
#
# Needs: the release binary (make build).
# Runtime: about 40 minutes on 2 cores for 7 0 1 2 3, most of it L0 = 3 (13 GB peak memory).
# Output: out/psc-info-flow/L<L>-L0<L0>.json; the table (again: python3
# scripts/bench/table.py psc-info out/psc-info-flow/L7-L0*.json) is worth keeping under
# docs/perf/<device>/ with the raw JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
levels="${1:-7}"
shift || true
coarse=("${@:-0 1 2 3}")
coarse=(${coarse[*]})
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: make build" >&2; exit 1; }
out=out/psc-info-flow
mkdir -p "$out"
for l0 in "${coarse[@]}"; do
  RUST_LOG=warn "$bin" psc-info --mesh flow-around-square --levels "$levels" \
    --coarse-levels "$l0" --json > "$out/L$levels-L0$l0.json"
done
runs=("${coarse[@]/#/$out/L$levels-L0}")
python3 scripts/bench/table.py psc-info "${runs[@]/%/.json}"
