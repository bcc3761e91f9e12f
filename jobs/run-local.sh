#!/usr/bin/env bash
# Local launcher: a campaign on P MPI ranks of this machine (oversubscribed when P exceeds
# the cores), then the report of its campaign.h5.
#
#   jobs/run-local.sh [-n P] [CONFIG] [--fresh | --retry-failed]
#                                                    (default: -n 2 inputs/quickstart.toml)
#
# Threads per rank: the cores divided by the ranks (RAYON_NUM_THREADS overrides).
# Ctrl-C (or SIGTERM to this script) stops the campaign cleanly after the batches in
# progress (exit 75; run it again to resume); a second Ctrl-C stops at once. OpenMPI's
# mpirun would kill the ranks on SIGINT/SIGTERM within a second, but forwards SIGUSR1, so
# mpirun runs in a session of its own and this script hands it SIGUSR1.
# Exit status: tensorfem's (0 complete, 75 stopped, 2 bad input, 1 failures); the report
# is written whenever campaign.h5 exists.
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
setsid mpirun --oversubscribe --bind-to none -n "$ranks" "$bin" run "$config" "$@" &
mpirun_pid=$!
stops=0
stop() {
    stops=$((stops + 1))
    if ((stops == 1)); then
        kill -USR1 "$mpirun_pid" 2>/dev/null || true
    else
        echo "run-local: stopping at once (the batches finished so far are journaled)" >&2
        kill -TERM "$mpirun_pid" 2>/dev/null || true
    fi
}
trap stop INT TERM
status=0
while :; do
    wait "$mpirun_pid" && status=0 || status=$?
    kill -0 "$mpirun_pid" 2>/dev/null || break
done
trap - INT TERM
# Stopped at once on request: mpirun reports the ranks it killed as a failure.
if ((stops > 1 && status != 0)); then status=75; fi
# The report, when the config is a campaign that was merged (complete, or with failed
# columns).
dir=$(python3 - "$config" <<'PY'
import os, sys, tomllib
with open(sys.argv[1], "rb") as f:
    directory = tomllib.load(f).get("campaign", {}).get("directory", "")
if directory:  # relative to the config's folder, as tensorfem reads it
    print(os.path.join(os.path.dirname(sys.argv[1]), directory))
PY
)
if [[ -n "$dir" && -f "$dir/campaign.h5" && ( $status == 0 || $status == 1 ) ]]; then
    python3 postprocess/report.py "$dir/campaign.h5" || status=1
fi
exit "$status"
