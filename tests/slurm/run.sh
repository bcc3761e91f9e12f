#!/usr/bin/env bash
# The job scripts under a real SLURM (part of `make test`): a private single-node cluster
# (tests/slurm/cluster.sh) runs jobs/cpu.sbatch, submitted unchanged, on a campaign of 48
# batches, and jobs/gpu.sbatch with --gpus-per-node=0 on the CPUs:
#   1. uninterrupted: completes; its campaign.h5 is the reference;
#   2. `scancel -s USR1` (the tasks) mid-run;
#   3. `scancel --batch -s USR1` (the batch shell, as --signal=B:USR1 does) mid-run;
#   4. `scontrol requeue` mid-run (SIGTERM to everything, SLURM requeues);
#   5. `scancel --batch -s USR1` as soon as the job runs (before the ranks start);
#   6. jobs/gpu.sbatch on a node without GPUs, with TENSORFEM_SRUN_MPI=pmix.
# Each interrupted job must stop cleanly, be requeued once, resume and complete with every
# batch journaled exactly once and solutions bitwise equal to the reference.
#
# Runs only as root where no SLURM is running already (it starts slurmctld, slurmd and
# munged, and stops what it started); elsewhere it says it is skipped and exits 0.
# KEEP=1 keeps the work folder.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="$repo/target/release/tensorfem"
skip() { echo "SLURM test: skipped: $*"; exit 0; }
fail() { echo "SLURM test: FAILED: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "not root (it starts slurmctld, slurmd and munged)"
for tool in sbatch slurmctld slurmd munged; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh --test installs slurm-wlm and munge as root)"
done
if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
  skip "a SLURM is already running on this machine"
fi
[[ -x "$bin" ]] || fail "$bin is missing: build it first (make build)"

work=$(mktemp -d /tmp/tensorfem-slurm.XXXXXX)
cleanup() {
  local status=$?
  if [[ -n "${SLURM_CONF:-}" ]]; then
    scancel --quiet --user=root 2>/dev/null || true
  fi
  "$repo/tests/slurm/cluster.sh" stop "$work/cluster" || true
  if (( status != 0 )); then
    echo "SLURM test: logs of the failed run:" >&2
    for f in "$work"/*/tensorfem-*.out; do [[ -f "$f" ]] && { echo "== $f" >&2; tail -n 40 "$f" >&2; }; done
    tail -n 20 "$work/cluster/log/slurmctld.log" >&2 2>/dev/null || true
  fi
  if [[ "${KEEP:-0}" == 1 || $status -ne 0 ]]; then
    echo "SLURM test: work folder kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
eval "export $("$repo/tests/slurm/cluster.sh" start "$work/cluster" | tail -1)"
echo "SLURM test: cluster up ($(sinfo -h -o '%D node, %c CPUs, %t'); $(sbatch --version))"

steps=48
# Submits jobs/cpu.sbatch (or $script) from a new folder $work/NAME; prints the job id.
submit() {
  local name=$1 script=${2:-$repo/jobs/cpu.sbatch}
  shift 2 || shift
  mkdir -p "$work/$name"
  cat > "$work/$name/series.toml" <<TOML
[mesh]
n = 192
[solver]
method = "cholesky"
[campaign]
rhs = "time-series"
batch_size = 1
directory = "out"
store_exact = true
[campaign.time_series]
steps = $steps
t_end = 0.5
TOML
  (cd "$work/$name" && sbatch --parsable "$@" "$script" series.toml)
}
field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
done_batches() {
  local journal="$work/$1/out/journal.log"
  if [[ -f "$journal" ]]; then grep -c '"record":"done"' "$journal" || true; else echo 0; fi
}
# Waits (up to $3 s, checking every $4 s) until `$2` holds.
wait_for() {
  local what=$1 condition=$2 limit=${3:-120} poll=${4:-0.2} start=$SECONDS
  until eval "$condition"; do
    sleep "$poll"
    (( SECONDS - start < limit )) || fail "$what: not within $limit s (job state $(field "${job:-0}" JobState))"
  done
}
# The job completed: it ran to the end (COMPLETED, exit 0), restarted `$2` times.
expect_completed() {
  local name=$1 restarts=$2
  wait_for "$name completes" '[[ $(field $job JobState) == COMPLETED ]]' 180
  [[ $(field "$job" ExitCode) == 0:0 ]] || fail "$name: exit code $(field "$job" ExitCode)"
  [[ $(field "$job" Restarts) == "$restarts" ]] || fail "$name: restarted $(field "$job" Restarts) times, expected $restarts"
  local out="$work/$name/tensorfem-$job.out"
  [[ $(grep -c "campaign complete" "$out") == 1 ]] || fail "$name: 'campaign complete' not printed once in $out"
  python3 - "$work/$name/out" "$work/reference/out" "$steps" <<'PY' || fail "$name: results"
import json, sys
import h5py, numpy as np
run, reference, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = [json.loads(l.split(" ", 1)[1]) for l in open(f"{run}/journal.log")]
done = sorted(r["batch"] for r in done if r["record"] == "done")
assert done == list(range(steps)), f"batches journaled: {done}"
with h5py.File(f"{run}/campaign.h5") as a, h5py.File(f"{reference}/campaign.h5") as b:
    for name in ["operators/0/u", "operators/0/exact", "columns/relative_residual",
                 "columns/l2_error", "columns/t"]:
        x, y = a[name][...], b[name][...]
        assert x.shape == y.shape and np.array_equal(x.view(np.uint64), y.view(np.uint64)), \
            f"{name} differs from the uninterrupted run"
PY
  echo "SLURM test: $name: complete after $restarts restart(s), every batch once, bitwise equal to the uninterrupted run"
}
# Sends USR1 (scancel with the options "$@") once 3 batches are done and checks that the
# job stops with batches left, is requeued once and completes. The campaign is small (48
# batches in about half a second), so it may end before SLURM delivers the signal; such an
# attempt (completed, never requeued, no exit 75) shows nothing and is repeated, up to
# three times. The batch count is polled every 20 ms to keep that window small.
usr1_case() {
  local base=$1 attempt name before
  shift
  for attempt in 1 2 3; do
    name=$base-$attempt
    job=$(submit "$name")
    wait_for "$name: 3 batches" "(( \$(done_batches $name) >= 3 ))" 120 0.02
    scancel "$@" -s USR1 "$job"
    wait_for "$name requeued or complete" \
      '[[ $(field $job Restarts) -ge 1 || $(field $job JobState) == COMPLETED ]]' 60
    if [[ $(field "$job" Restarts) == 0 ]] && ! grep -q "exit 75" "$work/$name/tensorfem-$job.out"; then
      echo "SLURM test: $name: the campaign ended before the signal arrived; again"
      (( attempt < 3 )) || fail "$base: the campaign ended before the signal took effect in 3 attempts"
      continue
    fi
    wait_for "$name requeued" '[[ $(field $job Restarts) -ge 1 ]]' 60
    before=$(done_batches "$name")
    (( before < steps )) || fail "$name: the whole campaign ran before the stop took effect"
    echo "SLURM test: $name: stopped with $before of $steps batches done (scancel ${*:+$* }-s USR1)"
    expect_completed "$name" 1
    usr1_name=$name
    return
  done
}

job=$(submit reference)
expect_completed reference 0

usr1_case tasks-usr1
grep -q "exit 75" "$work/$usr1_name/tensorfem-$job.out" || fail "tasks-usr1: tensorfem did not exit 75"

usr1_case batch-usr1 --batch
grep -q "signal received" "$work/$usr1_name/tensorfem-$job.out" || fail "batch-usr1: the batch shell did not forward the signal"

# SLURM sends the requeue's SIGTERM some time after `scontrol requeue` returns; a campaign
# this small may finish in between (it then prints "campaign complete", and the requeued
# job resumes with nothing left and prints it again): that attempt shows nothing about
# resuming, so it is repeated, up to three times.
for attempt in 1 2 3; do
  name=requeue-$attempt
  job=$(submit "$name")
  wait_for "$name: 3 batches" "(( \$(done_batches $name) >= 3 ))" 120 0.02
  scontrol requeue "$job"
  wait_for "$name requeued" '[[ $(field $job Restarts) -ge 1 ]]' 60
  wait_for "$name completes" '[[ $(field $job JobState) == COMPLETED ]]' 180
  if grep -q "resuming: $steps of $steps batches are done" "$work/$name/tensorfem-$job.out"; then
    echo "SLURM test: $name: the campaign ended before the requeue's SIGTERM arrived; again"
    (( attempt < 3 )) || fail "requeue: the campaign ended before the requeue took effect in 3 attempts"
    continue
  fi
  echo "SLURM test: $name: requeued (scontrol requeue $job) with batches left"
  expect_completed "$name" 1
  break
done

# Signalled as soon as the job script runs (its first line of output): SLURM drops a batch
# signal sent before it has launched the script (seen 33 ms after the allocation), which
# no script can handle, so RUNNING alone is too early.
job=$(submit early-usr1)
wait_for "early-usr1 starts" '[[ -s "$work/early-usr1/tensorfem-$job.out" ]]' 60
scancel --batch -s USR1 "$job"
wait_for "early-usr1 requeued" '[[ $(field $job Restarts) -ge 1 ]]' 60
echo "SLURM test: early-usr1: signalled at the start, $(done_batches early-usr1) batches done before the requeue"
expect_completed early-usr1 1

job=$(TENSORFEM_SRUN_MPI=pmix submit gpu-script-on-cpus "$repo/jobs/gpu.sbatch" --gpus-per-node=0 --ntasks-per-node=2)
expect_completed gpu-script-on-cpus 0
grep -q -- "--mpi=pmix" "$work/gpu-script-on-cpus/tensorfem-$job.out" || fail "TENSORFEM_SRUN_MPI was not used"
echo "SLURM test: passed in ${SECONDS} s"
