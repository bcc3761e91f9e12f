#!/usr/bin/env bash
# Multigrid on the refined meshes (docs/performance.md): `tensorfem run` with method mg
# (VARIANT, down to the coarse mesh, k = 1, ‖r‖₂ ≤ 1e-9) on the flow around a square
# (refined 4, 5, 6 times) and the Gmsh channel inputs/meshes/channel-cylinder.msh (3, 4, 5
# times), with the pressure's mixed conditions (Dirichlet outflow) and pure Neumann. Each
# case runs twice side by side, plain refinement (solver.krylov = "none") then flexible CG
# around the cycle ("cg"), one process after the other: unknowns, levels, steps and solve
# time of each, their ratio, and the L2 error.
#
#   scripts/bench/mg-meshes.sh [VARIANT [SMOOTHER]]   (default: DSH_MG, a run's smoother:
#                                                      chebyshev on these triangles)
#
# Needs: the release binary (make build).
# Runtime: not recorded as a whole; 24 runs, each solve under a second on 2 cores (at most
# 163,711 unknowns), so start-up and set-up dominate.
# Output: every run's config and output in out/mg-meshes/; the Markdown table is printed
# row by row as the cases finish (it is read from the runs' printed summaries, not JSON, so
# it is made here rather than by scripts/bench/table.py); keep it under docs/perf/<device>/
# with the command.
set -euo pipefail
cd "$(dirname "$0")/../.."
variant="${1:-DSH_MG}"
smoother="${2:-}"
smoother_line="${smoother:+smoother = \"$smoother\"}"
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: make build" >&2; exit 1; }
out=out/mg-meshes
mkdir -p "$out"
channel="$PWD/inputs/meshes/channel-cylinder.msh"
echo "| mesh | refinements | conditions | unknowns | levels | refinement: steps | solve [s] | flexible CG: steps | solve [s] | speed-up | L2 error |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for mesh in flow-around-square gmsh; do
  case "$mesh" in
    flow-around-square) levels=(4 5 6); file="" ;;
    gmsh) levels=(3 4 5); file="file = \"$channel\"" ;;
  esac
  for l in "${levels[@]}"; do
    for outflow in dirichlet neumann; do
      for krylov in none cg; do
        name="$mesh-L$l-$outflow-$krylov"
        cat > "$out/$name.toml" <<EOF
backend = "cpu"
[mesh]
kind = "$mesh"
$file
levels = $l
[boundary]
inflow = "neumann"
outflow = "$outflow"
walls = "neumann"
obstacle = "neumann"
[problem]
k = 1
[solver]
method = "mg"
variant = "$variant"
krylov = "$krylov"
$smoother_line
[output]
path = "$name.h5"
EOF
        RUST_LOG=warn "$bin" run "$out/$name.toml" > "$out/$name.txt"
      done
      python3 - "$out/$mesh-L$l-$outflow" "$mesh" "$l" "$outflow" <<'PY'
import re, sys
base, mesh, levels_done, outflow = sys.argv[1:]
def read(krylov):
    text = open(f"{base}-{krylov}.txt").read()
    row = text.split("rel. residual (f64)")[1].split("\n")[1].split()
    return dict(
        unknowns=int(re.search(r"unknowns\s+(\d+)", text).group(1)),
        levels=re.search(r"set-up\s+(\d+) levels", text).group(1),
        steps=int(re.search(r"iterations\s+(\d+)", text).group(1)),
        solve=float(re.search(r"solve ([0-9.]+)", text).group(1)),
        l2=float(row[2]),
    )
plain, fcg = read("none"), read("cg")
conditions = "mixed (Dirichlet outflow)" if outflow == "dirichlet" else "pure Neumann"
print(f"| {mesh} | {levels_done} | {conditions} | {plain['unknowns']:,} | {plain['levels']} | "
      f"{plain['steps']} | {plain['solve']:.3f} | {fcg['steps']} | {fcg['solve']:.3f} | "
      f"{plain['solve'] / fcg['solve']:.1f}× | {plain['l2']:.3e} |")
PY
    done
  done
done
