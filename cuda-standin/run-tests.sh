#!/usr/bin/env bash
# The CUDA backend's tests executed on the CPU by the stand-in. Prints
# `cuda stand-in: N passed, M failed, K skipped` and fails if any failed.
#
# Usage: cuda-standin/run-tests.sh [--quick | --all]
#   --quick  (`make test`) tests/gpu.rs (every kernel against the CPU backend), the `::cuda`
#            variants of tests/kernels.rs (kernels against naive loops) and bench smoke
#            runs with `--backend cuda`: about a minute
#   (none)   (`make test-standin`) also every `::cuda` solver test (tests/psc.rs, mg.rs,
#            mg_meshes.rs, stokes.rs) but those of SLOW: about 10 minutes on 2 cores
#   --all    SLOW too (each over 5 minutes on the stand-in, where its CPU variant takes
#            seconds)
#
# Only this script puts the stand-in (target/cuda-standin: libcuda.so, libcublas.so,
# libcusolver.so) on the loader path, with TENSORFEM_CUDA_STANDIN=1, without which it
# refuses to initialise. The PTX is compiled once by NVRTC for sm_90, as for a GPU node
# without NVRTC, and read from TENSORFEM_PTX_DIR by every test process.
set -uo pipefail
cd "$(dirname "$0")/.."
# 2D multigrid at 1025² nodes, 3 columns, every variant twice: over 400 s on the stand-in.
SLOW=(variants_converge_in_2d_with_published_iteration_counts::cuda)
mode=${1:-}
skip=()
if [[ $mode != --all ]]; then
  for name in "${SLOW[@]}"; do skip+=(--skip "$name"); done
fi
solvers=(--test psc --test mg --test mg_meshes --test stokes)
if [[ $mode == --quick ]]; then
  skip=()
  solvers=()
fi
root=$(pwd)
out=$root/target/cuda-standin
make -s -C cuda-standin OUT="$out" || exit 1
cargo build --release --quiet || exit 1
target/release/tensorfem kernels --arch sm_90 --ptx-dir "$out/ptx" > /dev/null || exit 1

export LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TENSORFEM_CUDA_STANDIN=1 TENSORFEM_REQUIRE_CUDA=1 TENSORFEM_PTX_DIR=$out/ptx
log=$out/tests.log
: > "$log"
start=$SECONDS
passed=0
failed=0
count() { # the "test result:" lines of a cargo test run in $1
  local p f
  p=$(grep -o '[0-9]* passed' "$1" | awk '{s += $1} END {print s + 0}')
  f=$(grep -o '[0-9]* failed' "$1" | awk '{s += $1} END {print s + 0}')
  passed=$((passed + p))
  failed=$((failed + f))
}

part=$out/part.log
cargo test --release --test gpu > "$part" 2>&1
cat "$part" >> "$log"
count "$part"
cargo test --release --test kernels "${solvers[@]}" -- ::cuda "${skip[@]}" > "$part" 2>&1
cat "$part" >> "$log"
count "$part"

# Each bench on the stand-in device, small: it must finish and name the stand-in. (bench psc
# measures the device's GEMM peak at full size in the same run: too long here.)
smoke() {
  if target/release/tensorfem "$@" --backend cuda > "$part" 2>&1 && grep -q "stand-in" "$part"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "cuda stand-in: failed: tensorfem $* --backend cuda" >&2
    tail -5 "$part" >&2
  fi
  cat "$part" >> "$log"
}
smoke bench mg --dim 2 --n 32 --variant D_MG,H_MG
smoke bench stokes --n 16

grep -E '^test .*FAILED|^---- |panicked' "$log" | head -40 >&2
skipped=$((${#skip[@]} / 2))
scope=""
[[ $mode == --quick ]] && scope="; kernels only: make test-standin runs the solver tests"
echo "cuda stand-in: $passed passed, $failed failed, $skipped skipped ($((SECONDS - start)) s$scope; log: ${log#"$root"/})"
((failed == 0 && passed > 0))
