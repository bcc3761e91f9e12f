#!/usr/bin/env bash
# PSC on the flow around a square (P1, Dirichlet everywhere as in the published counts):
# `tensorfem psc-info` at fine level L (default 7) for each coarse level L0 (default 0 1 2 3),
# one process after the other, each with this machine's cores. Prints a Markdown table
# (docs/performance.md) and keeps every run's JSON in out/psc-info-flow/.
#
#   scripts/psc-info-flow.sh [L [L0 …]]
set -euo pipefail
cd "$(dirname "$0")/.."
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
python3 - "$out" "$levels" "${coarse[@]}" <<'PY'
import json, sys
out, levels, coarse = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"| L0 | N | \\|C\\| | \\|E\\| | \\|I\\| | group members | κ(C_i) | κ(Π) | NNZ(C_i⁻¹)/NNZ_FEM | NNZ(Π⁻¹)/NNZ_FEM | set-up [s] | figures [s] | peak memory [GB] |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for l0 in coarse:
    v = json.load(open(f"{out}/L{levels}-L0{l0}.json"))
    members = " + ".join(str(g["members"]) for g in v["group_blocks"])
    peak = v.get("peak_memory_bytes")
    print(f"| {l0} | {v['N']:,} | {v['C']:,} | {v['E']:,} | {v['I']:,} | {members} | "
          f"{v['kappa_Ci']:.1f} | {v['kappa_Pi']:.1f} | {v['nnz_Ci_inv_over_fem']:.3f} | "
          f"{v['nnz_Pi_inv_over_fem']:.2f} | {v['setup_seconds']:.1f} | {v['info_seconds']:.1f} | "
          f"{peak / 1e9 if peak else float('nan'):.1f} |")
PY
