#!/usr/bin/env python3
"""Markdown table of campaign throughput against the solver alone: DIR... (each holding
campaign.h5, the run's printed summary in DIR.log and `tensorfem bench --json` lines of
the solver alone, one per rank, in DIR.bench.jsonl), one row per run."""
import json
import re
import sys

import h5py
import numpy as np

STAGES = ["setup", "rhs", "solve", "verify", "io", "idle"]
print("| method | ranks | columns | solver-only (bench) MDof/s per rank | solve stage MDof/s per rank | campaign MDof/s per rank | campaign / solver-only | with merge | "
      + " | ".join(s.replace("io", "I/O").replace("setup", "set-up") for s in STAGES) + " | merge [s] |")
print("|---|---|---|---|---|---|---|---|" + "---|" * len(STAGES) + "---|")
for d in sys.argv[1:]:
    with h5py.File(f"{d}/campaign.h5") as f:
        r = f["perf/ranks"]
        ranks = len(r["wall_seconds"])
        p = f["perf"]
        dofs = p["unknowns"][:] * p["nrhs"][:]
        per_rank = np.array([dofs[p["rank"][:] == k].sum() for k in r["rank"][:]])
        solve = r["solve_seconds"][:]
        wall = r["wall_seconds"][:]
        method = p["method"][0].decode() if isinstance(p["method"][0], bytes) else p["method"][0]
        solve_stage = np.mean(per_rank / solve) / 1e6
        campaign = per_rank.sum() / ranks / wall.max() / 1e6
        total = wall.sum()
        split = [r[f"{s}_seconds"][:].sum() / total for s in STAGES]
        columns = int(p["nrhs"][:].sum())
    bench = [json.loads(line) for line in open(f"{d}.bench.jsonl") if line.strip()]
    solver_only = float(np.mean([b["mdofs"] for b in bench]))
    merge = float(re.search(r"merged in ([0-9.]+) s", open(f"{d}.log").read()).group(1))
    with_merge = per_rank.sum() / ranks / (wall.max() + merge) / 1e6
    print(f"| {method} | {ranks} | {columns} | {solver_only:.2f} | {solve_stage:.2f} | {campaign:.2f} | {100 * campaign / solver_only:.0f} % "
          f"| {100 * with_merge / solver_only:.0f} % | "
          + " | ".join(f"{100 * s:.0f} %" for s in split) + f" | {merge:.2f} |")
