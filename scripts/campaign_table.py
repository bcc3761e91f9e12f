#!/usr/bin/env python3
"""Markdown table of campaign runs: DIR... (each holding campaign.h5), one row per run."""
import sys

import h5py
import numpy as np

print("| ranks | wall [s] | speed-up | set-up | rhs | solve | verify | I/O | idle | MDof/s (wall) |")
print("|---|---|---|---|---|---|---|---|---|---|")
base = None
for d in sys.argv[1:]:
    with h5py.File(f"{d}/campaign.h5") as f:
        r = f["perf/ranks"]
        wall = r["wall_seconds"][:]
        total = wall.sum()
        stages = [r[f"{s}_seconds"][:].sum() / total for s in ["setup", "rhs", "solve", "verify", "io", "idle"]]
        dofs = (f["perf/unknowns"][:] * f["perf/nrhs"][:]).sum()
        w = wall.max()
        base = base or w
        print(f"| {len(wall)} | {w:.2f} | {base / w:.2f} | " + " | ".join(f"{100 * s:.0f} %" for s in stages)
              + f" | {dofs / w / 1e6:.2f} |")
