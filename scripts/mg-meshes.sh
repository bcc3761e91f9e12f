#!/usr/bin/env bash
# Multigrid on the refined meshes (docs/performance.md): `tensorfem run` with method mg
# (DSH_MG down to the coarse mesh, k = 1, ‖r‖₂ ≤ 1e-9) on the flow around a square and the
# Gmsh channel at several refinement levels, with the pressure's mixed conditions (Dirichlet
# outflow) and pure Neumann, one process after the other. Prints a Markdown table of the
# refinement steps, solve time and L2 error; keeps every run's output in out/mg-meshes/.
#
# With KRYLOV = cg the cycle preconditions flexible CG (solver.krylov) instead of plain
# refinement.
#
#   scripts/mg-meshes.sh [VARIANT [KRYLOV]]
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${1:-DSH_MG}"
krylov="${2:-none}"
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: make build" >&2; exit 1; }
out=out/mg-meshes-$krylov
mkdir -p "$out"
channel="$PWD/inputs/meshes/channel-cylinder.msh"
echo "| mesh | refinements | conditions | unknowns | levels | steps | solve [s] | s / step | L2 error |"
echo "|---|---|---|---|---|---|---|---|---|"
for mesh in flow-around-square gmsh; do
  case "$mesh" in
    flow-around-square) levels=(4 5 6); file="" ;;
    gmsh) levels=(3 4 5); file="file = \"$channel\"" ;;
  esac
  for l in "${levels[@]}"; do
    for outflow in dirichlet neumann; do
      name="$mesh-L$l-$outflow"
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
[output]
path = "$name.h5"
EOF
      RUST_LOG=warn "$bin" run "$out/$name.toml" > "$out/$name.txt"
      python3 - "$out/$name.txt" "$mesh" "$l" "$outflow" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
unknowns = int(re.search(r"unknowns\s+(\d+)", text).group(1))
levels = re.search(r"set-up\s+(\d+) levels", text).group(1)
steps = int(re.search(r"iterations\s+(\d+)", text).group(1))
solve = float(re.search(r"solve ([0-9.]+)", text).group(1))
row = text.split("rel. residual (f64)")[1].split("\n")[1].split()
conditions = "mixed (Dirichlet outflow)" if sys.argv[4] == "dirichlet" else "pure Neumann"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {conditions} | {unknowns:,} | {levels} | {steps} | "
      f"{solve:.3f} | {solve / steps:.4f} | {float(row[2]):.3e} |")
PY
    done
  done
done
