# The body of jobs/cpu.sbatch and jobs/gpu.sbatch (sourced by them; not a job script of its
# own): runs `tensorfem run CONFIG` on the job's tasks and requeues the job while the
# campaign is stopped before its end.
#
# Pre-emption: SLURM sends SIGUSR1 to this shell 120 s before the time limit (--signal=
# B:USR1@120; `scancel --batch -s USR1` does the same by hand), or SIGUSR1/SIGTERM to the
# tasks themselves (`scancel -s USR1`, `scontrol requeue`, pre-emption by another job).
# Every rank finishes the batch it is solving, the journal is synced and tensorfem exits
# 75 (stopped, resumable); this script then requeues the job, and the next start resumes.
# It also requeues when a signal reached the job and the ranks failed (a rank signalled
# before it could install its handler): the journal keeps whatever was finished. Exit 0
# from tensorfem means the campaign is complete.
#
# Settings (environment, e.g. `sbatch --export=ALL,TENSORFEM_SRUN_MPI=pmix …`):
#   TENSORFEM_SRUN_MPI   srun's --mpi= plugin (default: the site's MpiDefault); Debian's and
#                        most OpenMPI builds need pmix (`srun --mpi=list` shows the choice)
#   TENSORFEM_BIN        the tensorfem binary (default: target/release/tensorfem of the
#                        repository the job script was submitted from)
#   RAYON_NUM_THREADS    threads per task (default: the node's CPUs / tasks on the node)
#
# Expects from the job script: $repo (the repository), $stop_requested (set by its trap).
set -uo pipefail
config="${1:-$repo/inputs/quickstart.toml}"
bin="${TENSORFEM_BIN:-$repo/target/release/tensorfem}"
export RUST_LOG="${RUST_LOG:-info}"
if [[ ! -x "$bin" ]]; then
  echo "error: $bin is missing: build it first (make build), or set TENSORFEM_BIN" >&2
  exit 1
fi

# Threads per task: the node's CPUs shared by its tasks (SLURM_TASKS_PER_NODE: "2" or "2(x3)").
tasks_on_node=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%(*}}
threads=$(( ${SLURM_CPUS_ON_NODE:-1} / ${tasks_on_node:-1} ))
(( threads >= 1 )) || threads=1
export RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-$threads}"
launch=(srun --kill-on-bad-exit=1 --cpus-per-task="$RAYON_NUM_THREADS")
[[ -n "${TENSORFEM_SRUN_MPI:-}" ]] && launch+=(--mpi="$TENSORFEM_SRUN_MPI")

requeue() {
  echo "campaign stopped before the end ($1): requeueing job $SLURM_JOB_ID"
  # Under `scontrol requeue` SLURM is requeueing the job already and refuses a second one.
  scontrol requeue "$SLURM_JOB_ID" || echo "(SLURM requeues job $SLURM_JOB_ID itself)"
  exit 0
}

srun_pid=
forward() {
  stop_requested=1
  echo "signal received: stopping after the current batches"
  [[ -n "$srun_pid" ]] && kill -USR1 "$srun_pid" 2>/dev/null
}
trap forward USR1 TERM
(( stop_requested )) && requeue "signalled before the start"

echo "job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: ${launch[*]} $bin run $config"
"${launch[@]}" "$bin" run "$config" &
srun_pid=$!
# A signal between the launch and the line above found no srun to forward to.
(( stop_requested )) && kill -USR1 "$srun_pid" 2>/dev/null
# `wait` returns early (status > 128) whenever a trapped signal arrives: wait until srun
# has exited, then take its own status (bash keeps it for an exited background job).
# After a stop signal the signal is repeated until the step ends: srun forwards a signal
# only to tasks that have started, so one that arrives while it launches them is lost
# (seen in the SLURM test), and tensorfem stops once however many arrive.
while kill -0 "$srun_pid" 2>/dev/null; do
  if (( stop_requested )); then
    sleep 0.2
    kill -USR1 "$srun_pid" 2>/dev/null
  else
    wait "$srun_pid"
  fi
done
wait "$srun_pid"; status=$?

case $status in
  0) echo "campaign complete"; exit 0 ;;
  75) requeue "tensorfem exit 75" ;;
  *) (( stop_requested )) && requeue "exit $status after a stop signal"
     echo "tensorfem failed (exit $status): not requeued; see the messages above" >&2
     exit "$status" ;;
esac
