#!/usr/bin/env bash
# The GPU checks in one call on a lent GPU machine (no Rust there): unpacks the bundle
# (`make bundle`, carried as target/bundle/tensorfem-gpu.tar.gz), runs the CUDA tests
# against the CPU (the kernels one by one, then the ::cuda variants of the solver tests;
# a test binary that meets an illegal address runs again under compute-sanitizer), then on
# the device: the ceilings, the PSC benchmark table, PSC-IR, and with PARTS the PSC
# methods, a kernel profile, multigrid, Stokes and a campaign. Every step has its own time
# limit and the whole stays inside DEADLINE seconds (steps that would start later are
# listed as skipped), so one short call brings back as much as it can even when an early
# step fails.
#
# Usage (from the repository root of the copy on the GPU machine):
#   DEADLINE=540 jobs/gpu-checks.sh [SIZES]      SIZES: "n:n0" pairs for bench psc (default 512:16 256:16)
#   DEADLINE=360 PARTS="tests profile" jobs/gpu-checks.sh
# Environment:
#   DEADLINE  seconds the whole may take (default 360)
#   OUT       output directory (default out/gpu-checks)
#   PARTS     the parts to run (default "tests bench wide refine"):
#     tests (the CUDA tests; their seeded outputs in 11-test-outputs.tar.gz, for
#     scripts/compare-test-outputs.py), bench (ceilings and the Q1 PSC table: every precision, 1, 64
#     and 1024 columns), wide (4096 columns too), p1 (the table for P1), refine (PSC-IR to
#     1e-10 around M1 at the first size and around M3 at h = 1/1024), stages (the stages of
#     one apply timed by the bench itself at h = 1/512, f16, TF32 and f32 on 1 and 1024
#     columns, with the ceilings), profile (the time of every kernel of one f16 M1 apply on
#     1024 columns, by Nsight Compute, and of one apply on 1 column), psc-goals (the apply
#     against its goals: f16 and f32 M1 at h = 1/512 and 1/1024 on 1 and 1024 columns with
#     every stage beside its model, PSC-IR at h = 1/1024 on 1024 columns, both couplings of
#     D; about 6 minutes),
#     methods (M1/M2/M3 side by
#     side, each set up on the host), mg (multigrid on the device: every precision schedule
#     at 4096² with one column, 1024² with 64 columns, 128³; each kernel alone), stokes
#     (every Stokes preconditioner in f32 at 512², tuned Vanka and Braess-Sarazin at
#     1024²), setup (M1 at h = 1/1024, h0 = 1/32: its Π⁻¹ inverted on the GPU with
#     cuSOLVER, then f16 and TF32 applies on 1 and 1024 columns, and PSC-IR against the
#     sparse Cholesky on 64 columns), campaign (the quickstart's campaign at h = 1/512 on
#     the GPU: 4096 time steps in batches of 1024, M1 f16 inside f64 refinement to 1e-10, on
#     one rank and on two sharing the GPU, with the solver alone beside it and a plain
#     sequential write of the output's size to the same disk; its table by
#     `python3 scripts/bench/table.py throughput`, which needs h5py)
#   TESTS     the test binaries of the tests part (default: gpu kernels psc mg mg_meshes
#             stokes)
#   CAMPAIGN_N, CAMPAIGN_STEPS, CAMPAIGN_BATCH, CAMPAIGN_BACKEND  the campaign part's size
#     and device (CAMPAIGN_BACKEND=cpu tries the part on a machine without a GPU)
# Runtime: at most DEADLINE seconds (recorded runs on an H200: 1–8 minutes, by the parts).
# Output: ${OUT:-out/gpu-checks}/, one file per kind of step (00-device … 99-steps: eleven, and
# two CSVs with profile, read by scripts/bench/ncu-stages.py; a lent machine may return
# fewer, so pack $OUT into one archive or split the parts over calls). The bench files hold
# the JSON lines among the logs: `python3 scripts/bench/table.py psc OUT/40-bench-psc.txt`
# prints their table. Keep what a run brought back under docs/perf/<device>/ (docs/perf/h200/
# for the H200), one folder per run.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-checks}
deadline=${DEADLINE:-360}
parts=" ${PARTS:-tests bench wide refine} "
mkdir -p "$out"
touch "$out/10-test-gpu.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf target/bundle/tensorfem-gpu.tar.gz -C "$work"
b="$work/tensorfem-gpu"
log="$out/99-steps.txt"
cache="$work/cache"

# cuBLAS where the loader does not already find it (a toolkit outside /usr/local/cuda, or
# the one inside a Python environment's nvidia wheels); the CUDA stand-in brings its own.
if [[ ${TENSORFEM_CUDA_STANDIN:-} != 1 ]] && ! ldconfig -p | grep -q 'libcublas\.so\.13' && [[ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]]; then
  found=$(find /usr /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
  [[ -n "$found" ]] && export LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# step NAME LIMIT FILE CMD…: runs CMD with its output appended to FILE, unless the deadline
# would pass first; the step's exit status and seconds go to the step log.
step() {
  local name=$1 limit=$2 file=$3
  shift 3
  local left=$((deadline - SECONDS))
  if ((left < 10)); then
    echo "$name: skipped (deadline)" >> "$log"
    return
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS
  echo "== $name: $*" >> "$file"
  timeout "$limit" "$@" >> "$file" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - start)) s" | tee -a "$log" >> "$file"
}

step device 20 "$out/00-device.txt" bash -c "nvidia-smi; echo LD_LIBRARY_PATH=\$LD_LIBRARY_PATH; $b/run info"
# The kernel-by-kernel comparisons first, then the ::cuda variants of the solver tests. A
# test binary that meets an illegal address runs again under compute-sanitizer, which names
# the kernel and the access (the context is lost after the first one).
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[[ $parts == *" tests "* ]] && for t in ${TESTS:-gpu kernels psc mg mg_meshes stokes}; do
  filter=()
  [[ $t != gpu ]] && filter=(cuda)
  tests="source $b/env.sh; export TENSORFEM_REQUIRE_CUDA=1 RUST_BACKTRACE=1"
  tests+=" TENSORFEM_TEST_OUTPUTS=$work/test-outputs TENSORFEM_TEST_OUTPUTS_LIMIT=4096;"
  before=$(wc -l < "$out/10-test-gpu.txt" 2>/dev/null || echo 0)
  step "test-$t" 120 "$out/10-test-gpu.txt" bash -c "$tests $b/tests/$t --test-threads=1 ${filter[*]}"
  if tail -n +$((before + 1)) "$out/10-test-gpu.txt" | grep -q ILLEGAL_ADDRESS && [[ -x $sanitizer ]]; then
    step "sanitize-$t" 90 "$out/10-test-gpu.txt" bash -c \
      "$tests $sanitizer --tool memcheck --print-limit 8 $b/tests/$t --test-threads=1 ${filter[*]}"
  fi
done
# The tests' seeded outputs (about 4096 entries of each, so that the archive stays a few
# MiB) in one archive, to compare with another run's (scripts/compare-test-outputs.py),
# e.g. the CUDA stand-in's.
[[ -d $work/test-outputs ]] && tar -czf "$out/11-test-outputs.tar.gz" -C "$work" test-outputs
# bench_psc NAME LIMIT FILE ARGS…: one `bench psc` on the GPU with the shared operator
# cache (lists of --nrhs and --precision give a row each after one set-up).
bench_psc() {
  local name=$1 limit=$2 file=$3
  shift 3
  step "$name" "$limit" "$file" env RUST_LOG=info "$b/run" bench psc --backend cuda \
    --cache-dir "$cache" --json "$@"
}
[[ $parts =~ \ (bench|stages|mg)\  ]] && step machine 60 "$out/30-machine.txt" "$b/run" bench machine \
  --backend cuda
# The table: Q1 (and P1 with PARTS+=p1) at every size, every precision (tf32 too), 1 to 1024
# columns (4096 with `wide`).
widths=1,64,1024
[[ $parts == *" wide "* ]] && widths=$widths,4096
[[ $parts == *" bench "* ]] && for size in ${1:-512:16 256:16}; do
  n=${size%%:*} n0=${size##*:}
  bench_psc "psc-q1-$n" 200 "$out/40-bench-psc.txt" --n "$n" --n0 "$n0" --nrhs "$widths" \
    --precision f16,tf32,f32,f64
  [[ $parts == *" p1 "* ]] && bench_psc "psc-p1-$n" 120 "$out/40-bench-psc.txt" --element p1 \
    --n "$n" --n0 "$n0" --nrhs 1,64,1024 --precision f16,f32,f64
done
# PSC-IR to 1e-10 around M1 from f16 and f32 (the first size), and around M3 at h = 1/1024
# (M1's set-up there is the host's |E|³ inversion, minutes).
first=${1:-512:16}
first=${first%% *}
[[ $parts == *" refine "* ]] && bench_psc "psc-ir-${first%%:*}" 90 "$out/50-psc-methods.txt" \
  --n "${first%%:*}" --n0 "${first##*:}" --nrhs 1,64,1024 --precision f16,tf32,f32 --refine \
  --rtol 1e-10 --runs 1
[[ $parts == *" refine "* ]] && bench_psc "psc-ir-m3-1024" 120 "$out/50-psc-methods.txt" \
  --n 1024 --n0 32 --method m3 --nrhs 64 --precision f16,f32 --refine --rtol 1e-10 --runs 1
# M1 at h = 1/1024 (|E| = 61,504): the set-up's 30 GB Π⁻¹ on the GPU (setup_seconds), then
# the applies. No operator cache: its f64 copy alone would take half the disk.
[[ $parts == *" setup "* ]] && step "psc-m1-1024" 420 "$out/60-psc-m1-1024.txt" env RUST_LOG=info \
  "$b/run" bench psc --backend cuda --json --n 1024 --n0 32 --nrhs 1,1024 \
  --precision f16,tf32 --runs 1
# PSC-IR from f16 at h = 1/1024 against the f64 sparse Cholesky on the host
# (`reference_difference`: ‖x − x_ref‖₂/‖x_ref‖₂), the set-up computed again.
[[ $parts == *" setup "* ]] && step "psc-ir-1024" 240 "$out/60-psc-m1-1024.txt" env RUST_LOG=info \
  "$b/run" bench psc --backend cuda --json --n 1024 --n0 32 --nrhs 64 --precision f16 \
  --refine --rtol 1e-10 --reference --runs 1
# Profile: every kernel of the first M1 applies (cuBLAS's and ours) with its duration, the
# launches of the ceilings' measurements first (Nsight Compute, clocks as they are).
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ $parts == *" profile "* && -n $ncu ]] && for nrhs in 1024 1; do
  step "profile-$nrhs" 90 "$out/60-profile-nrhs$nrhs.csv" bash -c \
    "source $b/env.sh; $ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 400 \
     --csv --print-units base $b/bin/tensorfem bench psc --backend cuda --cache-dir $cache --n 512 \
     --n0 16 --nrhs $nrhs --precision f16 --runs 1"
done
# The stages of one apply timed by the bench itself (a synchronisation after each), 1 and
# 1024 columns.
[[ $parts == *" stages "* ]] && bench_psc "stages-512" 150 "$out/50-psc-methods.txt" --n 512 \
  --n0 16 --nrhs 1,1024 --precision f16,tf32,f32 --stages --runs 1
# The PSC apply against its goals in one run: f16 and f32 M1 at h = 1/512 and 1/1024 on 1
# and 1024 columns with every stage beside its model (`python3 scripts/bench/table.py
# psc-stages FILE`), and PSC-IR from f16 to 1e-10 at h = 1/1024 on 1024 columns (its cost
# per step beyond M1); each with both couplings of D side by side. h = 1/1024 sets up twice
# without a cache (46 s each on an H200).
if [[ $parts == *" psc-goals "* ]]; then
  bench_psc "goals-512" 90 "$out/55-psc-goals.txt" --n 512 --n0 16 --nrhs 1,1024 \
    --precision f16,f32 --coupling csr,element --stages --runs 3
  step "goals-1024" 240 "$out/55-psc-goals.txt" env RUST_LOG=info "$b/run" bench psc \
    --backend cuda --json --n 1024 --n0 32 --nrhs 1,1024 --precision f16,f32 --coupling csr,element --stages \
    --runs 3
  step "goals-ir-1024" 180 "$out/55-psc-goals.txt" env RUST_LOG=info "$b/run" bench psc \
    --backend cuda --json --n 1024 --n0 32 --nrhs 1024 --precision f16 --refine --rtol 1e-10 \
    --coupling csr,element --stages --runs 1
fi
# The PSC methods side by side: 64 columns to 1e-10, f64 alone and f16 inside
# PSC-IR (each method sets up on the host: slow).
[[ $parts == *" methods "* ]] && for method in m1 m2 m3; do
  for mode in "--precision f64" "--precision f16 --refine"; do
    # shellcheck disable=SC2086
    bench_psc "methods-512-$method-${mode// /}" 60 "$out/50-psc-methods.txt" --n 512 --n0 16 \
      --nrhs 64 --method "$method" $mode --rtol 1e-10 --runs 1
  done
done
# Multigrid on the device: every schedule to ‖r‖ ≤ 1e-6·‖b‖ from random loads,
# H_MG against D_MG at 4096² with one column, level matrices without indices (the goal:
# ≥ 2.5×) and with them (≥ 1.8×), 64 columns at 1024² and
# 3D at 128³ (set-up on the host: assembly and the levels' ELLPACK), each split into its
# stages by CUDA events.
[[ $parts == *" mg "* ]] && for args in "--n 4096 --nrhs 1" "--n 4096 --nrhs 1 --storage indexed" \
  "--n 1024 --nrhs 64" "--dim 3 --n 128 --nrhs 1"; do
  # shellcheck disable=SC2086
  step "mg-${args// /}" 150 "$out/70-bench-mg.txt" "$b/run" bench mg --backend cuda --variant all \
    --rhs random --rtol 1e-6 --repeats 2 --stages $args
done
# Each multigrid kernel alone on the finest two levels against the copy bandwidth (the goal:
# the f64 Jacobi sweep ≥ 70 %), one and 64 columns.
[[ $parts == *" mg "* ]] && for args in "--n 4096 --nrhs 1" "--n 1024 --nrhs 64"; do
  # shellcheck disable=SC2086
  step "mg-kernels-${args// /}" 90 "$out/70-bench-mg.txt" "$b/run" bench mg --backend cuda \
    --kernels $args
done
# Stokes on the device: FGMRES to 1e-8 with each preconditioner in f32, split
# into operator, preconditioner and Krylov time by CUDA events (the goal: tuned Vanka at
# 1024² ≤ 0.0007 ms per element); set-up (assembly, the patch inverses) on the host.
[[ $parts == *" stokes "* ]] && step "stokes-512" 120 "$out/80-bench-stokes.txt" "$b/run" bench \
  stokes --backend cuda --n 512 --precond all --precision f32 --repeats 2
[[ $parts == *" stokes "* ]] && step "stokes-1024" 150 "$out/80-bench-stokes.txt" "$b/run" bench \
  stokes --backend cuda --n 1024 --precond vanka-tuned,braess-sarazin --precision f32 --repeats 2
# The campaign: wall-time MDof/s per rank of the whole campaign (right-hand sides,
# solves, verification, checkpointed HDF5 output) next to the solver's own on one batch
# (`bench psc --refine`, one process per rank at the same time; the first builds the operator
# cache, so every campaign starts warm), by scripts/bench/table.py throughput.
if [[ $parts == *" campaign "* ]]; then
  cn=${CAMPAIGN_N:-512} csteps=${CAMPAIGN_STEPS:-4096} cbatch=${CAMPAIGN_BATCH:-1024}
  cbackend=${CAMPAIGN_BACKEND:-cuda}
  cdir="$work/campaign"
  mkdir -p "$cdir"
  for p in 1 2; do
    run="$cdir/psc-r$p-1"
    sed -e "s|^backend = .*|backend = \"$cbackend\"|" -e "s|^n = .*|n = $cn|" \
      -e 's|^precision = .*|precision = "f16"|' -e 's|^rtol = .*|rtol = 1e-10|' \
      -e "s|^batch_size = .*|batch_size = $cbatch\nstore = \"f32\"|" \
      -e "s|^directory = .*|directory = \"$run\"|" -e "s|^steps = .*|steps = $csteps|" \
      -e "/^\[solver\]/a cache_dir = \"$cache\"" inputs/quickstart.toml > "$run.toml"
    step "campaign-bench-r$p" 120 "$out/90-campaign.txt" bash -c "for _ in \$(seq $p); do \
      $b/run bench psc --backend $cbackend --n $cn --n0 16 --nrhs $cbatch --precision f16 \
      --refine --rtol 1e-10 --cache-dir $cache --json >> $cdir/psc-r$p.bench.jsonl & \
      done; wait; cat $cdir/psc-r$p.bench.jsonl"
    step "campaign-r$p" 300 "$out/90-campaign.txt" bash -c "source $b/env.sh; RUST_LOG=info \
      mpirun --oversubscribe -n $p $b/bin/tensorfem run --fresh $run.toml > $run.log 2>&1; \
      rc=\$?; cat $run.log; exit \$rc"
    rm -rf "$run/batches"   # merged into campaign.h5; 4 GB of disk each at the default size
  done
  # The disk's sequential write bandwidth on a file of the campaign's output size (f32
  # columns of (n + 1)² values), flushed to the device before dd reports.
  wbytes=$((csteps * (cn + 1) * (cn + 1) * 4))
  step "write-bandwidth" 60 "$out/90-campaign.txt" bash -c "dd if=/dev/zero of=$cdir/write-test \
    bs=16M count=$(((wbytes + 16777215) / 16777216)) conv=fdatasync 2>&1 | tail -1; \
    rm -f $cdir/write-test"
  step "campaign-table" 60 "$out/90-campaign.txt" python3 scripts/bench/table.py throughput \
    "$cdir/psc-r1" "$cdir/psc-r2"
fi
cat "$log"
grep -h '^{' "$out/40-bench-psc.txt" "$out/50-psc-methods.txt" 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r.get("method", "M1"), r["n"], r["precision"], r["nrhs"], "setup %.1fs" % r["setup_seconds"],
          "solve %.3gs" % r["solve_seconds"], "%.0f MDof/s" % r["mdofs"],
          "peak %.2f" % r.get("gemm_peak_fraction", 0), "res %.2g" % r["relative_residual"])
' || true
