#!/usr/bin/env python3
"""Markdown table of campaign throughput against the solve stage: DIR... (each holding
campaign.h5 and the run's printed summary in DIR.log), one row per run."""
import re
import sys

import h5py
import numpy as np

STAGES = ["setup", "rhs", "solve", "verify", "io", "idle"]
print("| method | ranks | columns | solver-only MDof/s per rank | campaign MDof/s per rank | campaign / solver | "
      + " | ".join(s.replace("io", "I/O").replace("setup", "set-up") for s in STAGES) + " | merge [s] |")
print("|---|---|---|---|---|---|---|" + "---|" * len(STAGES) + "---|")
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
        solver_only = np.mean(per_rank / solve) / 1e6
        campaign = per_rank.sum() / ranks / wall.max() / 1e6
        total = wall.sum()
        split = [r[f"{s}_seconds"][:].sum() / total for s in STAGES]
        columns = int(p["nrhs"][:].sum())
    merge = float(re.search(r"merged in ([0-9.]+) s", open(f"{d}.log").read()).group(1))
    with_merge = per_rank.sum() / ranks / (wall.max() + merge) / 1e6
    print(f"| {method} | {ranks} | {columns} | {solver_only:.2f} | {campaign:.2f} | {100 * campaign / solver_only:.0f} % "
          f"| {100 * with_merge / solver_only:.0f} % | "
          + " | ".join(f"{100 * s:.0f} %" for s in split) + f" | {merge:.2f} |")
