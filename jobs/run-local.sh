#!/usr/bin/env bash
# Local launcher: a campaign on P MPI ranks of this machine (oversubscribed when P exceeds
# the cores), then the report of its campaign.h5.
#
#   jobs/run-local.sh [-n P] [CONFIG] [--fresh]      (default: -n 2 inputs/quickstart.toml)
#
# Threads per rank: the cores divided by the ranks (RAYON_NUM_THREADS overrides).
# Runs from any directory: CONFIG is taken relative to where it is called, and the config's
# own relative paths relative to the config's folder.
set -euo pipefail
ranks=2
if [[ "${1:-}" == "-n" ]]; then ranks="$2"; shift 2; fi
config="${1:-}"
shift || true
if [[ -n "$config" ]]; then
    [[ -f "$config" ]] || { echo "error: config $config: no such file" >&2; exit 2; }
    config=$(realpath "$config")
fi
cd "$(dirname "$0")/.."
config="${config:-$PWD/inputs/quickstart.toml}"
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: run 'make build' first" >&2; exit 1; }
# OpenMPI refuses to run as root without these (containers, CI); harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
# No core binding: tensorfem gives each rank its share of the cores (cores / ranks per host)
# and lends a waiting rank's cores to the one building a set-up; mpirun's default binding
# would pin each rank (and all its threads) to one core.
mpirun --oversubscribe --bind-to none -n "$ranks" "$bin" run "$config" "$@"
# The report, when the config is a campaign that completed.
dir=$(python3 - "$config" <<'PY'
import os, sys, tomllib
with open(sys.argv[1], "rb") as f:
    directory = tomllib.load(f).get("campaign", {}).get("directory", "")
if directory:  # relative to the config's folder, as tensorfem reads it
    print(os.path.join(os.path.dirname(sys.argv[1]), directory))
PY
)
if [[ -n "$dir" && -f "$dir/campaign.h5" ]]; then
    python3 postprocess/report.py "$dir/campaign.h5"
fi
