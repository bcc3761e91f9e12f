#!/usr/bin/env bash
# Multigrid against the C + OpenMP geometric multigrid of ../shared/peers/ (same algorithm:
# Q1 unit square, bilinear transfers, damped Jacobi V-cycles), side by side in one run:
# n = 1024 (1023² unknowns), 1 and 64 right-hand sides of standard normal loads, from zero,
# to relative residual 1e-6 in every column, with the peer's two cycles V(2,2) ω = 0.9 and
# V(3,3) ω = 2/3. The peer runs from its own directory with its own driver (it is not part
# of the project; its driver needs gcc, numpy and scipy, installed for the user's python3
# when missing); tensorfem runs `bench mg --rhs random --rtol 1e-6` with the same cycle, all
# variants. One case at a time, the peer first and tensorfem right after it; both use every
# core (OMP_NUM_THREADS / rayon).
#
# Usage:
#   scripts/bench/mg-peer.sh [OUTPUT.jsonl]
# Environment:
#   PEERS        directory holding peer_gmg_c.py (default ../shared/peers beside the repository)
#   N            cells per direction (default 1024)
#   REPEATS      solves per case, the fastest kept (default 3)
#   PERF_DEVICE  folder under docs/perf/ of the default output (default cpu-vm)
# Runtime: the set-ups and solves of a recorded run (peer and tensorfem) add up to about 3
# minutes on 2 cores. Builds the release binary first (cargo build --release); exits 2
# without the peer.
# Output: raw JSON lines (the peer's and tensorfem's, tagged "solver" and "cycle") in
# OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/mg-peer-<date>.jsonl); the table is printed
# (again: python3 scripts/bench/table.py mg-peer OUTPUT.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
peers=${PEERS:-$root/../shared/peers}
n=${N:-1024}
repeats=${REPEATS:-3}
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/mg-peer-$(date +%Y%m%d).jsonl}
if [[ ! -f $peers/peer_gmg_c.py ]]; then
  echo "mg-peer.sh: no peer_gmg_c.py in $peers (set PEERS)" >&2
  exit 2
fi
command -v gcc >/dev/null || { echo "mg-peer.sh: the peer needs gcc" >&2; exit 1; }
# The peer's driver needs numpy and scipy (installed here for the user's python3 when missing).
python3 -c "import numpy, scipy" 2>/dev/null || python3 -m pip install --quiet numpy scipy
cargo build --release --quiet
bin=$root/target/release/tensorfem
mkdir -p "$(dirname "$out")"
: > "$out"
threads=$(nproc)
peer_log=$(mktemp)
trap 'rm -f "$peer_log"' EXIT
# One case at a time, the peer first and tensorfem right after it.
for nrhs in 1 64; do
  for cycle in "jac0.9 0.9 2 0.9" "jac2/3 0.6666666666666666 3 2/3"; do
    read -r smoother omega steps label <<< "$cycle"
    : > "$peer_log"
    (cd "$peers" && OMP_NUM_THREADS=$threads PEERS_RESULTS=$peer_log \
      python3 peer_gmg_c.py --ns "$n" --nrhs "$nrhs" --reps "$repeats" --smoothers "$smoother" --tol 1e-6 >&2)
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); r["solver"] = "peer"; r["cycle"] = sys.argv[2]; print(json.dumps(r))' \
      "$peer_log" "V($steps,$steps) ω=$label" >> "$out"
    "$bin" bench mg --n "$n" --nrhs "$nrhs" --variant all --rhs random --rtol 1e-6 \
      --omega "$omega" --pre-smoothing "$steps" --post-smoothing "$steps" --repeats "$repeats" --json \
      | python3 -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line); r["solver"] = "tensorfem"; r["cycle"] = sys.argv[1]; print(json.dumps(r))' \
      "V($steps,$steps) ω=$label" >> "$out"
  done
done
python3 scripts/bench/table.py mg-peer "$out"
