#!/usr/bin/env python3
"""Report on a tensorfem campaign: the summary table, and PNG plots.

    python3 postprocess/report.py out/quickstart/campaign.h5 [--out DIR] [--column J]

Prints the campaign's summary (columns, batches, per-rank batches and throughput, stage
totals of the last run, accuracy) and writes into DIR (default: report/ next to the file):
  throughput.png  MDof/s of every batch over time, one colour per rank
  accuracy.png    f64 relative residual and relative L2 error of every column
  solution.png    column J (default: the last) of the solution on its mesh
Layout of the file: docs/hdf5.md.
"""

import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def summary(f):
    cols = f["columns"]
    perf = f["perf"]
    ncols = len(cols["operator"])
    nbatches = len(perf["batch"])
    nops = len(f["operators"])
    lines = [
        f"campaign {text(f.attrs.get('rhs_source', '?'))}: {ncols} columns in {nbatches} batches "
        f"over {nops} operator(s), {int(f.attrs.get('ranks', 0))} rank(s); "
        f"tensorfem {text(f.attrs['tensorfem_version'])} (git {text(f.attrs['git_revision'])})"
    ]
    ranks = perf["rank"][:]
    solve = perf["solve_seconds"][:]
    dofs = perf["unknowns"][:] * perf["nrhs"][:]
    lines.append("  rank  batches  columns  solve [s]  MDof/s (while solving)")
    for r in np.unique(ranks):
        sel = ranks == r
        lines.append(
            f"  {r:>4}  {sel.sum():>7}  {perf['nrhs'][:][sel].sum():>7}  {solve[sel].sum():>9.3f}"
            f"  {dofs[sel].sum() / max(solve[sel].sum(), 1e-12) / 1e6:>10.2f}"
        )
    stages = f["perf/ranks"]
    names = ["setup", "rhs", "solve", "verify", "io", "idle"]
    totals = {n: stages[f"{n}_seconds"][:].sum() for n in names}
    wall = max(stages["wall_seconds"][:].sum(), 1e-12)
    lines.append(
        "  last run, all ranks: "
        + ", ".join(f"{n} {totals[n]:.3f} s ({100 * totals[n] / wall:.1f} %)" for n in names)
    )
    residual = cols["relative_residual"][:]
    error = cols["relative_l2_error"][:]
    lines.append(f"  max relative residual (f64) {residual.max():.3e}")
    if np.isfinite(error).any():
        lines.append(f"  max relative L2 error {np.nanmax(error):.3e}")
    return "\n".join(lines)


def plot_throughput(f, path):
    perf = f["perf"]
    start = perf["start"][:]
    t0 = start.min()
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in np.unique(perf["rank"][:]):
        sel = perf["rank"][:] == r
        ax.plot(perf["end"][:][sel] - t0, perf["mdofs"][:][sel], "o-", label=f"rank {r}")
    ax.set_xlabel("time since the first batch started [s]")
    ax.set_ylabel("MDof/s (unknowns × rhs / solve s)")
    ax.set_title("throughput per batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_accuracy(f, path):
    cols = f["columns"]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(cols["operator"]))
    ax.semilogy(x, cols["relative_residual"][:], "o", label="relative residual (f64)")
    error = cols["relative_l2_error"][:]
    if np.isfinite(error).any():
        ax.semilogy(x, error, "s", label="relative L2 error")
    ax.set_xlabel("column (campaign order)")
    ax.set_title("accuracy per column")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_solution(f, column, path):
    cols = f["columns"]
    op = int(cols["operator"][column])
    index = int(cols["index"][column])
    g = f[f"operators/{op}"]
    xy = g["mesh/coordinates"][:]
    u = g["u"][index]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    if xy.shape[1] == 2:
        cells = g["mesh/cells"][:].astype(np.int64)
        if cells.shape[1] == 4:  # quads (counter-clockwise): two triangles each
            cells = np.vstack([cells[:, [0, 1, 2]], cells[:, [0, 2, 3]]])
        image = ax.tripcolor(xy[:, 0], xy[:, 1], cells, u, shading="gouraud")
    else:  # 3D: the nodes of the plane z = 1/2 (or nearest)
        z = xy[:, 2]
        sel = np.isclose(z, z[np.argmin(np.abs(z - 0.5))])
        image = ax.tricontourf(xy[sel, 0], xy[sel, 1], u[sel], 40)
    fig.colorbar(image, ax=ax)
    ax.set_aspect("equal")
    t = cols["t"][column]
    what = f"t = {t:.4g}" if np.isfinite(t) else f"k = {cols['k'][column]}"
    ax.set_title(f"column {column} (operator {op}, {what})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", help="campaign.h5 written by tensorfem run")
    parser.add_argument("--out", help="directory for the plots (default: report/ next to the file)")
    parser.add_argument("--column", type=int, default=-1, help="column to draw (default: the last)")
    args = parser.parse_args()
    try:
        f = h5py.File(args.campaign, "r")
    except OSError as e:
        sys.exit(f"error: cannot open {args.campaign}: {e}")
    with f:
        if "perf" not in f or "columns" not in f:
            sys.exit(f"error: {args.campaign} is not a tensorfem campaign.h5 (no /perf, /columns)")
        ncols = len(f["columns/operator"])
        column = args.column % ncols if -ncols <= args.column < ncols else None
        if column is None:
            sys.exit(f"error: --column {args.column}: the campaign has {ncols} columns")
        out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.campaign)), "report")
        os.makedirs(out, exist_ok=True)
        print(summary(f))
        plot_throughput(f, os.path.join(out, "throughput.png"))
        plot_accuracy(f, os.path.join(out, "accuracy.png"))
        plot_solution(f, column, os.path.join(out, "solution.png"))
        print(f"plots: {out}/throughput.png, accuracy.png, solution.png")


if __name__ == "__main__":
    main()
