#!/usr/bin/env bash
# Old code against new on a noisy machine: builds the commit OLD from its exported tree (no
# worktree left behind) with its own target directory, builds the working tree, then runs
# every case with the old and the new binary alternately (which goes first alternates too),
# REPEATS times: bench psc (h = 1/256 and 1/512, h0 = 1/16; f32 and f16 with 1 and 64
# right-hand sides, f64 with 1), bench mg (2D n = 2048 and 3D n = 128, D_MG and H_MG),
# bench stokes (n = 512, Braess-Sarazin and tuned Vanka); the multigrid and Stokes cases
# time 3 solves in each process and keep the fastest (their --repeats: a solve of a few
# seconds spreads by ±20 % on a shared machine). Each build fills its own PSC operator
# cache first, untimed. The table gives per case the median over the repeats of old time /
# new time (above 1: the new code is faster), the smallest and largest ratio, and the
# median times.
#
# Usage:
#   scripts/bench/compare-speed.sh [OUTPUT.jsonl]
#   OLD=<commit> REPEATS=<n> scripts/bench/compare-speed.sh
#   ONLY='^psc .*nrhs=1 ' scripts/bench/compare-speed.sh   # the cases whose names match (grep -E)
# Environment:
#   OLD          the commit to compare with (default HEAD: the working tree's changes)
#   REPEATS      old/new pairs per case (default 5)
#   ONLY         an extended regular expression on the case names
#   PERF_DEVICE  folder under docs/perf/ of the default output (default cpu-vm)
# Runtime on 2 cores: two release builds, then about 45 minutes for every case with 5
# repeats (ONLY='^psc .*nrhs=1 ': a few minutes).
# Output: raw JSON lines tagged with "case", "build" (old, new) and "repeat" in
# OUTPUT.jsonl (default docs/perf/$PERF_DEVICE/compare-<date>.jsonl); the table is printed
# (again: python3 scripts/bench/table.py compare OUTPUT.jsonl). Builds go to
# target/compare/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
old_commit=${OLD:-HEAD}
repeats=${REPEATS:-5}
work=$root/target/compare
out=${1:-docs/perf/${PERF_DEVICE:-cpu-vm}/compare-$(date +%Y%m%d).jsonl}
mkdir -p "$work" "$(dirname "$out")"

# The old code: the commit's tree exported (no worktree left behind), built into its own
# target directory, once per commit (the commit built last is recorded beside it).
old_hash=$(git rev-parse "$old_commit")
if [[ $(cat "$work/old-commit" 2>/dev/null) != "$old_hash" || ! -x $work/old-target/release/tensorfem ]]; then
  rm -rf "$work/old-src" "$work/old-commit"
  mkdir -p "$work/old-src"
  git archive "$old_hash" | tar -x -C "$work/old-src"
  # GIT_CEILING_DIRECTORIES: the exported tree is no repository, and its build must not
  # take this one's revision for its own.
  (cd "$work/old-src" && GIT_CEILING_DIRECTORIES=$work CARGO_TARGET_DIR=$work/old-target \
    cargo build --release --quiet)
  echo "$old_hash" > "$work/old-commit"
fi
cargo build --release --quiet
old=$work/old-target/release/tensorfem
# A copy, so that a build during the runs does not replace the new binary.
new=$work/new-tensorfem
cp "$root/target/release/tensorfem" "$new"

cases=()
for n in 256 512; do
  for nrhs in 1 64; do
    for p in f64 f32 f16; do
      # f64 only with one right-hand side (the memory-bound apply).
      [[ $p == f64 && $nrhs != 1 ]] && continue
      cases+=("psc n=$n nrhs=$nrhs $p|bench psc --n $n --n0 16 --nrhs $nrhs --precision $p --json --cache-dir")
    done
  done
done
for problem in "2 2048" "3 128"; do
  set -- $problem
  for variant in D_MG H_MG; do
    cases+=("mg ${1}D n=$2 $variant|bench mg --dim $1 --n $2 --variant $variant --repeats 3 --json")
  done
done
for precond in braess-sarazin vanka-tuned; do
  cases+=("stokes n=512 $precond|bench stokes --n 512 --precond $precond --repeats 3 --json")
done
if [[ -n ${ONLY:-} ]]; then
  kept=()
  for entry in "${cases[@]}"; do
    grep -Eq -- "$ONLY" <<< "${entry%%|*}" && kept+=("$entry")
  done
  cases=("${kept[@]}")
fi

# Each build fills its own operator cache first (the formats may differ), untimed.
declare -A filled=()
for build in old new; do
  bin=${!build}
  for entry in "${cases[@]}"; do
    [[ $entry == psc* ]] || continue
    set -- ${entry%%|*} # psc n=N nrhs=K P
    [[ -n ${filled[$build $2 $4]:-} ]] && continue
    filled[$build $2 $4]=1
    "$bin" bench psc --n "${2#n=}" --n0 16 --precision "$4" --cache-dir "$work/cache-$build" --json > /dev/null
  done
done

: > "$out"
run() { # build, repeat, case name, command
  local build=$1 repeat=$2 name=$3 command=$4 bin=${!1}
  local args=($command)
  [[ ${args[-1]} == --cache-dir ]] && args+=("$work/cache-$build")
  "$bin" "${args[@]}" | while IFS= read -r line; do
    [[ $line == \{* ]] || continue
    printf '{"case":"%s","build":"%s","repeat":%d,%s\n' "$name" "$build" "$repeat" "${line#\{}"
  done >> "$out"
}
for repeat in $(seq 1 "$repeats"); do
  for entry in "${cases[@]}"; do
    name=${entry%%|*}
    command=${entry#*|}
    echo "repeat $repeat/$repeats: $name" >&2
    # Alternate which build goes first, so neither always runs on a warmer machine.
    if (( repeat % 2 )); then
      run old "$repeat" "$name" "$command"
      run new "$repeat" "$name" "$command"
    else
      run new "$repeat" "$name" "$command"
      run old "$repeat" "$name" "$command"
    fi
  done
done
python3 scripts/bench/table.py compare "$out"
