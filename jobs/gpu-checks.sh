#!/usr/bin/env bash
# The GPU checks of issue 15/16 in one call on a lent GPU machine (no Rust there): unpack
# the bundle (make bundle, carried as target/bundle/tensorfem-gpu.tar.gz), run the CUDA
# tests against the CPU, then the ceilings, the PSC benchmark and the three PSC methods side
# by side on the device. Every
# output goes to ${OUT:-out/gpu-checks}/, named by step.
#
#   jobs/gpu-checks.sh [SIZES]      SIZES: "n:n0" pairs for bench psc (default 256:16 512:32)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-checks}
mkdir -p "$out"
work=$(mktemp -d)
tar -xzf target/bundle/tensorfem-gpu.tar.gz -C "$work"
b="$work/tensorfem-gpu"
{ nvidia-smi || true; "$b/run" info; } > "$out/00-device.txt" 2>&1
"$b/test-gpu" > "$out/10-test-gpu.txt" 2>&1
echo "test-gpu exit $?" >> "$out/10-test-gpu.txt"
"$b/run" kernels --arch sm_90 > "$out/20-kernels.txt" 2>&1 || true
"$b/run" bench machine --backend cuda > "$out/30-machine.txt" 2>&1
for size in ${1:-256:16 512:32}; do
  n=${size%%:*} n0=${size##*:}
  for p in f16 f32 f64; do
    for nrhs in 1 64 1024; do
      "$b/run" bench psc --backend cuda --n "$n" --n0 "$n0" --nrhs "$nrhs" --precision "$p" --json \
        >> "$out/40-bench-psc.jsonl" 2>> "$out/40-bench-psc.err"
    done
  done
done
# The PSC methods side by side (issue 18): 64 columns to 1e-10, f64 alone and f16 inside
# PSC-IR; M3 alone at h = 1/1024 (M1's set-up there needs ~120 GB of host memory).
for spec in 512:16:m1 512:16:m2 512:16:m3 1024:32:m3; do
  IFS=: read -r n n0 method <<< "$spec"
  for mode in "--precision f64" "--precision f16 --refine"; do
    "$b/run" bench psc --backend cuda --n "$n" --n0 "$n0" --nrhs 64 --method "$method" \
      $mode --rtol 1e-10 --runs 1 --json >> "$out/50-psc-methods.jsonl" 2>> "$out/50-psc-methods.err"
  done
done
tail -3 "$out/10-test-gpu.txt"; cat "$out/30-machine.txt"; wc -l "$out/40-bench-psc.jsonl" "$out/50-psc-methods.jsonl"
