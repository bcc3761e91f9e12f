#!/usr/bin/env python3
"""Markdown table of campaign throughput against the solver alone: one row per NAME...,
from the runs NAME-1, NAME-2, ... (each a directory holding campaign.h5, with the run's
printed summary in NAME-k.log) and `tensorfem bench --json` lines of the solver alone, one
per rank, in NAME.bench.jsonl. A row shows the run of median campaign throughput (its
stage split and merge) and the range over the runs."""
import glob
import json
import re
import sys

import h5py
import numpy as np

STAGES = ["setup", "rhs", "solve", "verify", "io", "idle"]
print("| method | ranks | columns | solver-only (bench) MDof/s per rank | solve stage MDof/s per rank | campaign MDof/s per rank | campaign / solver-only (range over the runs) | with merge | "
      + " | ".join(s.replace("io", "I/O").replace("setup", "set-up") for s in STAGES) + " | merge [s] |")
print("|---|---|---|---|---|---|---|---|" + "---|" * len(STAGES) + "---|")


def run_figures(d):
    """Campaign MDof/s per rank and everything else a row shows, of the run in d."""
    with h5py.File(f"{d}/campaign.h5") as f:
        r = f["perf/ranks"]
        ranks = len(r["wall_seconds"])
        p = f["perf"]
        dofs = p["unknowns"][:] * p["nrhs"][:]
        per_rank = np.array([dofs[p["rank"][:] == k].sum() for k in r["rank"][:]])
        solve = r["solve_seconds"][:]
        wall = r["wall_seconds"][:]
        method = p["method"][0].decode() if isinstance(p["method"][0], bytes) else p["method"][0]
        total = wall.sum()
        merge = float(re.search(r"merged in ([0-9.]+) s", open(f"{d}.log").read()).group(1))
        return {
            "method": method,
            "ranks": ranks,
            "columns": int(p["nrhs"][:].sum()),
            "solve_stage": np.mean(per_rank / solve) / 1e6,
            "campaign": per_rank.sum() / ranks / wall.max() / 1e6,
            "with_merge": per_rank.sum() / ranks / (wall.max() + merge) / 1e6,
            "split": [r[f"{s}_seconds"][:].sum() / total for s in STAGES],
            "merge": merge,
        }


for name in sys.argv[1:]:
    dirs = [d for d in glob.glob(f"{name}-*") if re.fullmatch(r"-[0-9]+", d[len(name):])]
    runs = sorted((run_figures(d) for d in dirs), key=lambda run: run["campaign"])
    row = runs[(len(runs) - 1) // 2]
    bench = [json.loads(line) for line in open(f"{name}.bench.jsonl") if line.strip()]
    solver_only = float(np.mean([b["mdofs"] for b in bench]))
    ratio = lambda run: 100 * run["campaign"] / solver_only
    spread = f" ({ratio(runs[0]):.0f}–{ratio(runs[-1]):.0f})" if len(runs) > 1 else ""
    print(f"| {row['method']} | {row['ranks']} | {row['columns']} | {solver_only:.2f} | {row['solve_stage']:.2f} | {row['campaign']:.2f} "
          f"| {ratio(row):.0f} %{spread} | {100 * row['with_merge'] / solver_only:.0f} % | "
          + " | ".join(f"{100 * s:.0f} %" for s in row["split"]) + f" | {row['merge']:.2f} |")
