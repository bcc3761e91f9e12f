#!/usr/bin/env bash
# Campaign throughput against the solver's own: the quickstart campaign (PSC-M1 f32 + f64
# refinement, n = 256, 32 time steps in batches of 8) and its multigrid twin (H_MG with
# refinement, same mesh, batches and stopping rule) with a warm operator cache, on 1 and 2
# ranks of this machine (threads per rank: the cores divided by the ranks), each campaign
# REPEATS times; the table shows the run of median campaign throughput, the range over the
# runs, and the stage split per rank.
#
# "solver-only" is `tensorfem bench` on the same solves: `bench psc --refine` (M1 f32 inside
# f64 refinement to rtol 1e-12, 8 right-hand sides) and `bench mg --variant H_MG --nrhs 8`
# (refinement to the same absolute 1e-9), set-up excluded, one bench process per rank
# running at the same time with the same threads as the campaign's ranks; "solve stage" is
# the campaign's own solve time. "campaign" divides the unknowns × columns a rank solved by
# the run's wall time (queue start to last batch written; the merge is listed apart).
#
# Usage:
#   scripts/bench/campaign-throughput.sh [STEPS] [REPEATS]
#       STEPS: time steps (default 32, the quickstart's); REPEATS: runs of each campaign
#       (default 3).
#
# Needs: the release binary (make build), mpirun, h5py and numpy.
# Runtime: a few minutes on 2 cores with the defaults (12 campaigns of a few seconds each,
# and the solver-only benches).
# Output: each run's config, log and campaign.h5 under out/throughput/ (NAME-K.toml,
# NAME-K.log, NAME-K/; the solver alone in NAME.bench.jsonl); the Markdown table is printed
# (again: python3 scripts/bench/table.py throughput out/throughput/psc-r1 …); keep it under
# docs/perf/<device>/ with the command.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-32}"
repeats="${2:-3}"
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
        rm -rf "$out/$name"-[0-9]*    # runs of an earlier invocation
        for rep in $(seq "$repeats"); do
            if [[ $method == psc ]]; then
                config "$name-$rep" 'method = "psc-m1"'
            else
                config "$name-$rep" 'method = "mg"\nvariant = "H_MG"'
                sed -i -e '/^precision = /d' -e '/^h0 = /d' -e '/^cache_dir = /d' "$out/$name-$rep.toml"
            fi
            # No binding: mpirun's default (a core per rank) would leave one rank one thread.
            RAYON_NUM_THREADS=$(( $(nproc) / p > 0 ? $(nproc) / p : 1 )) \
                mpirun --bind-to none --oversubscribe -x RAYON_NUM_THREADS -n "$p" "$bin" run --fresh "$out/$name-$rep.toml" > "$out/$name-$rep.log"
        done
        # The solver alone: one bench process per rank, side by side, same threads.
        if [[ $method == psc ]]; then
            bench=(bench psc --n 256 --n0 16 --nrhs 8 --precision f32 --refine --cache-dir "$out/psc-cache" --json)
        else
            bench=(bench mg --n 256 --variant H_MG --nrhs 8 --json)
        fi
        rm -f "$out/$name.bench.jsonl"
        for _ in $(seq "$p"); do
            RAYON_NUM_THREADS=$(( $(nproc) / p > 0 ? $(nproc) / p : 1 )) "$bin" "${bench[@]}" >> "$out/$name.bench.jsonl" &
        done
        wait
        runs+=("$out/$name")
    done
done
python3 scripts/bench/table.py throughput "${runs[@]}"
