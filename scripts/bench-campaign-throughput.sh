#!/usr/bin/env bash
# Campaign throughput against the solver's own: the quickstart campaign (PSC-M1 f32 + f64
# refinement, n = 256, 32 time steps in batches of 8) and its multigrid twin (H_MG with
# refinement, same mesh, batches and stopping rule) with a warm operator cache, on 1 and 2
# ranks of this machine (threads per rank: the cores divided by the ranks). Prints a
# Markdown table (docs/performance.md) with the stage split per rank.
#
#   scripts/bench-campaign-throughput.sh [STEPS]     (default 32, the quickstart's)
#
# "solver-only" is the solve stage of the same run: the same solves (method, precision,
# refinement, block size, threads) without set-up, right-hand sides, verification or I/O.
# "campaign" divides the unknowns × columns a rank solved by the run's wall time (from the
# queue's start to the last batch written; the merge into campaign.h5 is listed apart).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-32}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RUST_LOG=warn
bin=target/release/tensorfem
[[ -x "$bin" ]] || { echo "error: $bin is missing: make build" >&2; exit 1; }
out=out/throughput
mkdir -p "$out"
config() {  # NAME METHOD-LINES: the quickstart with its own directory and a shared cache
    sed -e "s|^method = \"psc-m1\"|$2|" -e "s|^directory = .*|directory = \"$1\"|" \
        -e "/^\[solver\]/a cache_dir = \"psc-cache\"" \
        -e "s|^steps = .*|steps = $steps|" inputs/quickstart.toml > "$out/$1.toml"
}
config warm 'method = "psc-m1"'
"$bin" run --fresh "$out/warm.toml" > /dev/null    # builds the operator cache
runs=()
for method in psc mg; do
    for p in 1 2; do
        name="$method-r$p"
        if [[ $method == psc ]]; then
            config "$name" 'method = "psc-m1"'
        else
            config "$name" 'method = "mg"\nvariant = "H_MG"'
            sed -i -e '/^precision = /d' -e '/^h0 = /d' -e '/^cache_dir = /d' "$out/$name.toml"
        fi
        # No binding: mpirun's default (a core per rank) would leave one rank one thread.
        RAYON_NUM_THREADS=$(( $(nproc) / p > 0 ? $(nproc) / p : 1 )) \
            mpirun --bind-to none --oversubscribe -x RAYON_NUM_THREADS -n "$p" "$bin" run --fresh "$out/$name.toml" > "$out/$name.log"
        runs+=("$out/$name")
    done
done
python3 scripts/throughput_table.py "${runs[@]}"
