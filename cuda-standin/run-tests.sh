#!/usr/bin/env bash
# The CUDA backend's tests executed on the CPU by the stand-in. Prints
# `cuda stand-in: N passed, M failed` and fails if any failed.
#
# Run by `make test` and `make test-standin`: the stand-in's own checks (selftest.cpp),
# tests/gpu.rs (every kernel against the CPU backend), every `::cuda` variant of the device
# tests (tests/kernels.rs, psc.rs, mg.rs, mg_meshes.rs, stokes.rs), `tensorfem run` with
# backend = "cuda" (single runs, and a campaign on 2 ranks killed and resumed), the Python
# package with device = "cuda" (python/tests, against the command line), bench smoke
# runs with `--backend cuda`, and the GPU bundle's test runner (its tests' seeded outputs
# compared with the cargo run's): about 10 minutes on 2 cores, of which the 2D multigrid at
# 1025² nodes with its published iteration counts takes 4 to 5.
#
# Only this script puts the stand-in (target/cuda-standin: libcuda.so, libcublas.so,
# libcusolver.so) on the loader path, with TENSORFEM_CUDA_STANDIN=1, without which it
# refuses to initialise. The PTX is compiled once by NVRTC for sm_90, as for a GPU node
# without NVRTC, and read from TENSORFEM_PTX_DIR by every test process.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/target/cuda-standin
make -s -C cuda-standin OUT="$out" || exit 1
cargo build --release --quiet || exit 1
# ptxas's registers of each kernel, which the stand-in holds launches to.
mkdir -p "$out/ptx"
target/release/tensorfem kernels --arch sm_90 --ptx-dir "$out/ptx" > "$out/ptx/resources.txt" || exit 1

export LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TENSORFEM_CUDA_STANDIN=1 TENSORFEM_REQUIRE_CUDA=1 TENSORFEM_PTX_DIR=$out/ptx
# Two devices, so that a campaign's two ranks each bind to their own (local_rank % devices).
export TENSORFEM_CUDA_STANDIN_DEVICES=2
export TENSORFEM_CUDA_STANDIN_RESOURCES=$out/ptx/resources.txt
# The CUDA tests' seeded outputs (tests/common/outputs.rs), compared below with those of
# the bundle's test runner.
export TENSORFEM_TEST_OUTPUTS=$out/test-outputs
rm -rf "$TENSORFEM_TEST_OUTPUTS"
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
# The stand-in's own checks (bounds, fresh memory, use after free, double free, launch
# limits) through the driver API: a line and a count each.
"$out/selftest" "$out/ptx" > "$part" 2>&1
cat "$part" >> "$log"
passed=$((passed + $(grep -c '^selftest: ok' "$part")))
failed=$((failed + $(grep -c '^selftest: FAILED' "$part")))
cargo test --release --test gpu > "$part" 2>&1
cat "$part" >> "$log"
count "$part"
# One test at a time: the stand-in runs one launch at a time, on every core.
cargo test --release --test kernels --test psc --test mg --test mg_meshes --test stokes \
  -- ::cuda --test-threads=1 > "$part" 2>&1
cat "$part" >> "$log"
count "$part"
# `tensorfem run` with backend = "cuda": single runs of PSC, multigrid and Stokes against
# the CPU backend, and a campaign on 2 ranks (each on its own stand-in device) killed with
# SIGKILL and resumed.
cargo test --release --test cli --test campaign -- _on_cuda_ > "$part" 2>&1
cat "$part" >> "$log"
count "$part"

# The Python package with device="cuda" (python/tests, the tests marked `device`): numpy
# in and out of the CUDA backend, against `tensorfem run` with backend = "cuda".
# A build, import or collection error, or a crash, leaves no count: its exit status fails.
before=$failed
TENSORFEM_PYTHON_DEVICE=cuda scripts/test-python.sh -m device > "$part" 2>&1
status=$?
cat "$part" >> "$log"
count "$part"
if ((status != 0 && failed == before)); then
  failed=$((failed + 1))
  echo "cuda stand-in: failed: the Python package's device tests (exit $status)" >&2
  tail -5 "$part" >&2
fi
# Counts one check, `what`, by the exit status of the command after it (its output in $part).
tally() {
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "cuda stand-in: failed: $what" >&2
    tail -5 "$part" >&2
  fi
  cat "$part" >> "$log"
}

# Each bench on the stand-in device, small (the GEMM ceilings at 256³): it must finish and
# name the stand-in.
bench_names_standin() {
  target/release/tensorfem "$@" --backend cuda > "$part" 2>&1 && grep -q "stand-in" "$part"
}
smoke() { tally "tensorfem $* --backend cuda" bench_names_standin "$@"; }
smoke bench machine --gemm-size 256
smoke bench psc --n 32 --n0 8 --nrhs 1,8 --precision f16 --runs 1 --gemm-size 256
smoke bench mg --dim 2 --n 32 --variant D_MG,H_MG
smoke bench stokes --n 16

# The GPU bundle (jobs/bundle-gpu.sh) and the test part of its runner (jobs/gpu-checks.sh)
# as a GPU machine runs them, here on the stand-in: the bundle's own binaries, libraries and
# PTX, three of its six test binaries (all of them ran above from cargo). Their seeded
# outputs, brought back as a GPU run's are, must agree with the cargo run's.
bundle_runner() {
  local checks=$out/gpu-checks runner=(gpu kernels mg_meshes)
  rm -rf "$checks"
  jobs/bundle-gpu.sh target/bundle > "$part" 2>&1 &&
    (unset TENSORFEM_PTX_DIR && OUT=$checks PARTS=tests TESTS="${runner[*]}" DEADLINE=400 \
      jobs/gpu-checks.sh) >> "$part" 2>&1 &&
    cat "$checks/00-device.txt" "$checks/10-test-gpu.txt" >> "$part" &&
    grep -q "stand-in" "$checks/00-device.txt" &&
    (($(grep -c '^test-[a-z_]*: exit 0,' "$checks/99-steps.txt") == ${#runner[@]})) &&
    (($(grep -c '^test result: ok' "$checks/10-test-gpu.txt") == ${#runner[@]})) &&
    tar -xzf "$checks/11-test-outputs.tar.gz" -C "$checks" &&
    python3 scripts/compare-test-outputs.py "$checks/test-outputs" "$TENSORFEM_TEST_OUTPUTS" \
      >> "$part" 2>&1
}
tally "the bundle's test runner (jobs/gpu-checks.sh)" bundle_runner

grep -E '^test .*FAILED|^---- |panicked|^selftest: FAILED' -A2 "$log" | head -40 >&2
echo "cuda stand-in: $passed passed, $failed failed ($((SECONDS - start)) s; log: ${log#"$root"/})"
((failed == 0 && passed > 0))
