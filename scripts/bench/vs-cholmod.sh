#!/usr/bin/env bash
# tensorfem beside CHOLMOD (SuiteSparse's supernodal sparse Cholesky, f64, through
# scikit-sparse) on the same matrix and right-hand sides: the pressure's Poisson problem on
# the flow around a square (P1, Dirichlet outflow, Neumann elsewhere) refined L times. For
# each L, `bench solve --export-only` writes the matrix and the largest K's random
# right-hand sides (64 by default) to HDF5 once; then, RUNS rounds, for each K in NRHS,
# `bench solve` (every method: set-up and one solve of the K columns) and
# scripts/bench/cholmod_reference.py (analysis, numeric factorisation and one solve of the
# first K columns of the file, each column's residual checked against the file's rtol) run
# one after the other, the order swapped every round so that neither always runs on a
# machine the other has just warmed. Both use every core (rayon; OpenBLAS's threads).
#
# Usage:
#   scripts/bench/vs-cholmod.sh [LEVELS...]      (default: 6 7)
# Environment:
#   RUNS  rounds (default 3)
#   NRHS  right-hand-side counts K (default "1 64")
#   L0    PSC's coarse levels (--coarse-levels; default empty: each `bench solve` call
#         takes psc-info's choice for its own K columns, which may differ between the Ks)
#   SMOOTHER  the multigrid's smoothers, comma-separated, one row each (default
#         "jacobi,chebyshev")
#   PRECISION  PSC-M1's working precisions, comma-separated, one row each (default
#         "f32,f64": f32 inside f64 refinement, and f64 alone, the faster on a CPU: its
#         GEMMs run at half f32's rate where PSC-IR needs two or three applies)
# Needs: the release binary (make build); CHOLMOD in .deps/cholmod-venv, which
# scripts/install-cholmod.sh installs first (a no-op when present; about half a minute from
# nothing on Debian bookworm).
# Runtime on 2 cores: L = 6 with RUNS=3 about 40 s, L = 7 with RUNS=2 about 4 minutes (L0 = 1;
# PSC's first set-up 23 s at L = 7, multigrid's 64-column solves 9 s each per smoother).
# The cache is emptied at the start: the first K of round 1 sets PSC up afresh, the others
# load it.
# Output: every JSON line, tagged with "levels" and "round", in out/vs-cholmod/results.jsonl
# (the problems in out/vs-cholmod/problem-L<L>.h5); a Markdown table per L and K is printed
# at the end: CHOLMOD's factorisation and solve, each method's set-up and solve, best and
# median over the rounds, and CHOLMOD's solve time over the method's (≥ 1: tensorfem faster).
set -euo pipefail
cd "$(dirname "$0")/../.."
levels=("$@")
((${#levels[@]})) || levels=(6 7)
runs=${RUNS:-3}
smoother=${SMOOTHER:-jacobi,chebyshev}
precision=${PRECISION:-f32,f64}
read -r -a nrhs <<< "${NRHS:-1 64}"
bin=target/release/tensorfem
py=.deps/cholmod-venv/bin/python
out=out/vs-cholmod
results=$out/results.jsonl
cache=$out/psc-cache

[[ -x "$bin" ]] || { echo "error: $bin is missing: make build" >&2; exit 1; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "error: RUNS=$runs is not a positive integer" >&2; exit 1; }
((${#nrhs[@]})) || { echo "error: NRHS is empty" >&2; exit 1; }
max_k=0
for k in "${nrhs[@]}"; do
  [[ "$k" =~ ^[1-9][0-9]*$ ]] || { echo "error: NRHS holds $k, not a positive integer" >&2; exit 1; }
  if ((k > max_k)); then max_k=$k; fi
done
scripts/install-cholmod.sh
coarse=()
[[ -n "${L0:-}" ]] && coarse=(--coarse-levels "$L0")

mkdir -p "$out"
rm -rf "$cache"
: > "$results"

# Appends stdin's JSON lines to the results with "levels": $1 and "round": $2 added.
tag() {
  python3 -c 'import json, sys
for line in sys.stdin:
    if line.strip():
        r = json.loads(line); r["levels"] = int(sys.argv[1]); r["round"] = int(sys.argv[2])
        print(json.dumps(r))' "$1" "$2" >> "$results"
}
tensorfem() { # L K round
  "$bin" bench solve --mesh flow-around-square --levels "$1" --bc pressure --nrhs "$2" \
    --method psc-m1,mg --precision "$precision" --smoother "$smoother" --reference --runs 1 \
    --json "${coarse[@]}" --cache-dir "$cache" \
    | tag "$1" "$3"
}
cholmod() { # L K round
  "$py" scripts/bench/cholmod_reference.py "$out/problem-L$1.h5" --nrhs "$2" --runs 1 --json \
    | tag "$1" "$3"
}

for l in "${levels[@]}"; do
  echo "vs-cholmod: L = $l: exporting the matrix and $max_k right-hand sides" >&2
  # Column c of the export is drawn per node from seed + c, so its first K columns are the
  # block every method of `bench solve --nrhs K` solves (in the sparse Cholesky's order of
  # unknowns, whose set-up is the cheapest; CHOLMOD orders the matrix itself).
  "$bin" bench solve --mesh flow-around-square --levels "$l" --bc pressure --nrhs "$max_k" \
    --method cholesky --runs 1 --export "$out/problem-L$l.h5" --export-only --json > /dev/null
  for ((r = 1; r <= runs; r++)); do
    for k in "${nrhs[@]}"; do
      echo "vs-cholmod: L = $l, round $r/$runs, K = $k" >&2
      if ((r % 2)); then
        tensorfem "$l" "$k" "$r"; cholmod "$l" "$k" "$r"
      else
        cholmod "$l" "$k" "$r"; tensorfem "$l" "$k" "$r"
      fi
    done
  done
done

python3 - "$results" "$(nproc)" <<'PY'
import json, statistics, sys
from datetime import datetime

path, cores = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(path) if line.strip()]

cpu = "unknown CPU"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
print(f"Machine: {cpu}, {cores} cores (nproc); {datetime.now():%Y-%m-%d %H:%M}; {path}")
versions = next((r["versions"] for r in rows if r.get("solver") == "cholmod"), {})
if versions:
    print("CHOLMOD: " + ", ".join(f"{k} {v}" for k, v in versions.items()))


def fmt(x, spec="{:.3f}"):
    return "—" if x is None else spec.format(x)


def summary(group, setup_key):
    """Set-up and solve over the rounds: best, median, and round 1's set-up ("fresh")."""
    group = sorted(group, key=lambda r: r["round"])
    setups = [r[setup_key] for r in group if r.get(setup_key) is not None]
    solves = [r["solve_seconds"] for r in group if r.get("solve_seconds") is not None]
    fresh = group[0].get(setup_key)
    note = group[0].get("setup_note")
    return {
        "setup": min(setups, default=None),
        "setup_median": statistics.median(setups) if setups else None,
        "fresh": fmt(fresh) + (f" ({note})" if note and fresh is not None else ""),
        "solve": min(solves, default=None),
        "solve_median": statistics.median(solves) if solves else None,
        "residual": max((r["max_relative_residual"] for r in group
                         if r.get("max_relative_residual") is not None), default=None),
        "unknowns": group[0].get("unknowns"),
        "rounds": len(group),
    }


levels = list(dict.fromkeys(r["levels"] for r in rows))
for l in levels:
    ks = list(dict.fromkeys(r["nrhs"] for r in rows if r["levels"] == l))
    for k in ks:
        here = [r for r in rows if r["levels"] == l and r["nrhs"] == k]
        ref_rows = [r for r in here if r.get("solver") == "cholmod"]
        methods = {}
        for r in here:
            if r.get("solver") != "cholmod":
                methods.setdefault((r.get("method"), r.get("setting")), []).append(r)
        ref = summary(ref_rows, "factor_seconds") if ref_rows else None
        unknowns = ref["unknowns"] if ref else next((r.get("unknowns") for r in here), None)
        print(f"\n### L = {l}, K = {k}: {fmt(unknowns, '{:,}')} unknowns\n")
        mismatch = {r.get("unknowns") for r in here} - {unknowns}
        if mismatch:
            print(f"**Warning:** unknowns differ between rows ({unknowns} and {sorted(mismatch)}): "
                  "not the same problem.\n")
        print("| solver | setting | set-up best [s] | set-up median [s] | set-up fresh [s] "
              "| solve best [s] | solve median [s] | iterations | max rel. residual "
              "| CHOLMOD solve ÷ solve |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        ref_solve = ref["solve"] if ref else None
        if ref:
            nnz_l = ref_rows[0].get("nnz_factor")
            setting = "f64" + (f", nnz(L) {nnz_l:,}" if nnz_l is not None else "")
            print(f"| CHOLMOD | {setting} | {fmt(ref['setup'])} | {fmt(ref['setup_median'])} "
                  f"| {ref['fresh']} | {fmt(ref['solve'], '{:.4f}')} | {fmt(ref['solve_median'], '{:.4f}')} "
                  f"| — | {fmt(ref['residual'], '{:.1e}')} | 1.00 |")
        for (method, setting), group in methods.items():
            s = summary(group, "setup_seconds")
            its = sorted({r.get("iterations") for r in group if r.get("iterations") is not None})
            iterations = "—" if not its else str(its[0]) if len(its) == 1 else f"{its[0]}–{its[-1]}"
            ratio = (fmt(ref_solve / s["solve"], "{:.3g}")
                     if ref_solve is not None and s["solve"] else "—")
            print(f"| {method} | {setting if setting is not None else ''} | {fmt(s['setup'])} "
                  f"| {fmt(s['setup_median'])} | {s['fresh']} | {fmt(s['solve'], '{:.4f}')} "
                  f"| {fmt(s['solve_median'], '{:.4f}')} | {iterations} "
                  f"| {fmt(s['residual'], '{:.1e}')} | {ratio} |")
        rounds = max([len(g) for g in methods.values()] + ([ref["rounds"]] if ref else []))
        print(f"\n{rounds} round(s). CHOLMOD's set-up: analysis and numeric factorisation. Fresh: "
              "round 1's set-up (tensorfem's note in brackets). The ratio is of the best solves.")
PY
