#!/usr/bin/env bash
# Strong scaling of the quickstart-sized campaign (inputs/quickstart.toml: 32 time steps,
# 4 batches of 8, PSC-M1 f32 + IR, n = 256) over 1, 2 and 4 ranks of this machine, with a
# warm operator cache (the set-up is loaded, as in any campaign after the first). Prints a
# Markdown table (docs/performance.md) and keeps each run's campaign.h5 under out/scaling/.
#
#   scripts/bench/campaign-scaling.sh [RANKS...]      (default: 1 2 4)
#
# Needs: the release binary (make build), mpirun, h5py.
# Runtime: under a minute on 2 cores (recorded campaigns: 4–7 s of wall time each).
# Output: out/scaling/rK.toml, rK.log and rK/campaign.h5; the table (again:
# python3 scripts/bench/table.py campaign out/scaling/r1 out/scaling/r2 …) is worth keeping
# under docs/perf/<device>/ with the command.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RUST_LOG=warn
ranks=("${@:-1 2 4}")
[[ $# -gt 0 ]] || ranks=(1 2 4)
mkdir -p out/scaling
config() {  # the quickstart with its own directory and a shared cache
    sed -e "s|^directory = .*|directory = \"r$1\"|" \
        -e "s|^rtol = 1e-12.*|rtol = 1e-12\ncache_dir = \"psc-cache\"|" \
        inputs/quickstart.toml > "out/scaling/r$1.toml"
}
config warm
target/release/tensorfem run --fresh out/scaling/rwarm.toml > /dev/null   # builds the cache
for p in "${ranks[@]}"; do
    config "$p"
    mpirun --oversubscribe -n "$p" target/release/tensorfem run --fresh "out/scaling/r$p.toml" > "out/scaling/r$p.log"
done
python3 scripts/bench/table.py campaign "${ranks[@]/#/out/scaling/r}"
