#!/usr/bin/env bash
# The example campaign of inputs/pressure-around-square.toml: the mesh it solves on, its
# right-hand sides (postprocess/build_rhs.py), the campaign on RANKS MPI ranks and the report.
#
#   inputs/pressure-around-square.sh [RANKS]      (default 2; after `make build`)
#
# Source f: two vortices of opposite sign shed behind the obstacle and carried downstream
# (the divergence of a tentative velocity), the inflow flux ∂p/∂n pulsating in time.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-2}"
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: run 'make build' first" >&2; exit 1; }
config=inputs/pressure-around-square.toml
mkdir -p out
"$bin" mesh --config "$config" --output out/pressure-around-square-mesh.h5
vortex='40*exp(-((x-1.9-2*((t+{s})%1))**2+(y-0.5{sign}0.12*sin(2*pi*t))**2)/0.01)'
f="${vortex//\{s\}/0}"
f="${f//\{sign\}/-}"
g="${vortex//\{s\}/0.5}"
g="${g//\{sign\}/+}"
python3 postprocess/build_rhs.py --mesh out/pressure-around-square-mesh.h5 \
    --output out/pressure-around-square-rhs.h5 \
    --f "$f - $g" \
    --neumann "inflow=-(1+0.5*sin(2*pi*t))*4*y*(1-y)" \
    --steps 24 --t-end 2
jobs/run-local.sh -n "$ranks" "$config" --fresh
