#!/usr/bin/env python3
"""Report on a tensorfem campaign: the summary table, PNG plots and one HTML page.

    python3 postprocess/report.py out/quickstart/campaign.h5 [--out DIR] [--column J]

Prints the campaign's summary (columns, batches, per-rank batches and throughput, stage
totals of the last run, accuracy) and writes into DIR (default: report/ next to the file):
  timeline.png    per rank, what it did over the run's wall time: set-up, rhs, solve,
                  verify of every batch, its file's write (overlapping the next batch),
                  idle gaps
  throughput.png  MDof/s of every batch over time, one colour per rank
  accuracy.png    f64 relative residual and the errors of every column (relative L2;
                  a Stokes study: velocity and pressure L2)
  iterations.png  refinement steps (or V-cycles; Stokes: FGMRES iterations) per batch, and
                  PSC-M3's CG iterations
  solution.png    column J (default: the last): the solution on its mesh and, with an
                  exact solution, the error u_h − u (Stokes: |u_h|, p_h and p_h − p)
  index.html      all of the above in one self-contained page (figures embedded), with
                  the summary tables and the config the campaign ran with
Layout of the file: docs/hdf5.md.
"""

import argparse
import base64
import html
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
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
        f"{text(f.attrs.get('rhs_source', '?'))} campaign: {ncols} columns in {nbatches} batches "
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
    lines.append(f"  max relative residual (f64) {residual.max():.3e}")
    if "passed" in cols:
        failed = np.flatnonzero(cols["passed"][:] == 0)
        lines.append(
            f"  verification: all {ncols} columns met their tolerance" if len(failed) == 0 else
            f"  verification: FAILED, {len(failed)} of {ncols} columns missed their tolerance "
            f"(columns {', '.join(str(c) for c in failed[:10])}{', …' if len(failed) > 10 else ''})"
        )
    for label, values in errors(cols):
        lines.append(f"  max {label} {np.nanmax(values):.3e}")
    return "\n".join(lines)


ERRORS = [  # (column dataset, label): those a campaign's columns carry
    ("relative_l2_error", "relative L2 error"),
    ("velocity_l2_error", "velocity L2 error"),
    ("pressure_l2_error", "pressure L2 error"),
]


def errors(cols):
    """(label, values) of every error the columns carry with a finite value."""
    return [(label, cols[name][:]) for name, label in ERRORS
            if name in cols and np.isfinite(cols[name][:]).any()]


def is_stokes(f):
    return text(f.attrs.get("problem", "poisson")) == "stokes-q2q1"


STAGES = [  # (perf field, label, colour)
    ("setup_seconds", "set-up", "#7f7f7f"),
    ("rhs_seconds", "rhs", "#1f77b4"),
    ("solve_seconds", "solve", "#2ca02c"),
    ("verify_seconds", "verify", "#ff7f0e"),
]
WRITE_COLOUR = "#9467bd"
IDLE_COLOUR = "#e5e5e5"


def plot_timeline(f, path):
    """One row per rank: the stages of each batch from its start, the file write after it
    (a thin bar: it overlaps the next batch), and the gaps in between as idle."""
    perf = f["perf"]
    ranks = perf["rank"][:]
    start = perf["start"][:]
    t0 = start.min()
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(np.unique(ranks))))
    for row, r in enumerate(np.unique(ranks)):
        sel = np.flatnonzero(ranks == r)
        sel = sel[np.argsort(start[sel])]
        busy_until = 0.0  # before its first batch a rank waits (for work or a cache file)
        for b in sel:
            t = start[b] - t0
            if t > busy_until:
                ax.broken_barh([(busy_until, t - busy_until)], (row - 0.4, 0.8), color=IDLE_COLOUR)
            for field, _, colour in STAGES:
                d = perf[field][b]
                ax.broken_barh([(t, d)], (row - 0.4, 0.8), color=colour)
                t += d
            w = perf["write_seconds"][b]
            ax.broken_barh([(t, w)], (row - 0.45, 0.12), color=WRITE_COLOUR)
            busy_until = t
    ax.set_yticks(range(len(np.unique(ranks))))
    ax.set_yticklabels([f"rank {r}" for r in np.unique(ranks)])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first batch started [s]")
    # The legend sits between the title and the bars, clear of the time axis and its label.
    ax.set_title("what every rank did (batches of all runs of this campaign)", pad=26)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, _, c in STAGES]
    handles += [plt.Rectangle((0, 0), 1, 1, color=WRITE_COLOUR), plt.Rectangle((0, 0), 1, 1, color=IDLE_COLOUR)]
    labels = [label for _, label, _ in STAGES] + ["write (overlaps)", "idle"]
    ax.legend(handles, labels, ncol=6, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_iterations(f, path):
    perf = f["perf"]
    iterations = perf["iterations"][:].astype(float)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    if (iterations >= 0).any():
        ax.bar(perf["batch"][:], np.where(iterations >= 0, iterations, 0), color="#2ca02c")
        ax.set_ylabel("steps of the slowest column")
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    else:
        ax.text(0.5, 0.5, "direct solves: no iterations", ha="center", va="center", transform=ax.transAxes)
    # PSC-M3: its block-CG iterations per batch (all refinement steps) on a second axis.
    cg = perf["cg_iterations"][:].astype(float) if "cg_iterations" in perf else np.array([])
    if (cg >= 0).any():
        twin = ax.twinx()
        twin.plot(perf["batch"][:], np.where(cg >= 0, cg, np.nan), "o", color="#d62728")
        twin.set_ylabel("PSC-M3 CG iterations", color="#d62728")
    ax.set_xlabel("batch")
    if is_stokes(f):
        ax.set_title("FGMRES iterations per batch (one operator each)")
    else:
        ax.set_title("refinement steps (PSC-IR) or V-cycles (multigrid) per batch")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    for (label, values), marker in zip(errors(cols), "s^v"):
        ax.semilogy(x, values, marker, label=label)
    ax.set_xlabel("column (campaign order)")
    ax.set_title("accuracy per column")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# The four sub-quadrilaterals of a 9-node cell (VTK order: corners, edge midpoints, centre).
QUAD9_SPLIT = [[0, 4, 8, 7], [4, 1, 5, 8], [8, 5, 2, 6], [7, 8, 6, 3]]


def draw_field(ax, g, values, title, mesh="mesh"):
    xy = g[f"{mesh}/coordinates"][:]
    if xy.shape[1] == 2:
        cells = g[f"{mesh}/cells"][:].astype(np.int64)
        if cells.shape[1] == 9:  # biquadratic: four quads each
            cells = np.vstack([cells[:, q] for q in QUAD9_SPLIT])
        if cells.shape[1] == 4:  # quads (counter-clockwise): two triangles each
            cells = np.vstack([cells[:, [0, 1, 2]], cells[:, [0, 2, 3]]])
        image = ax.tripcolor(xy[:, 0], xy[:, 1], cells, values, shading="gouraud")
    else:  # 3D: the nodes of the plane z = 1/2 (or nearest)
        z = xy[:, 2]
        sel = np.isclose(z, z[np.argmin(np.abs(z - 0.5))])
        image = ax.tricontourf(xy[sel, 0], xy[sel, 1], values[sel], 40)
    ax.figure.colorbar(image, ax=ax)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)


def plot_stokes_solution(f, column, path):
    """|u_h| on the Q2 lattice, p_h on the Q1 nodes and the pressure error p_h − p."""
    cols = f["columns"]
    op, index = int(cols["operator"][column]), int(cols["index"][column])
    g = f[f"operators/{op}"]
    speed = np.linalg.norm(g["velocity"][index].astype(np.float64), axis=1)
    p = g["pressure"][index].astype(np.float64)
    what = f"operator {op}: n = {g.attrs['n']}, {text(g.attrs['preconditioner'])}"
    panels = 3 if "exact_pressure" in g else 2
    fig, axes = plt.subplots(1, panels, figsize=(16 * panels / 3, 4.5))
    draw_field(axes[0], g, speed, f"|u_h| ({what})", mesh="velocity_mesh")
    draw_field(axes[1], g, p, "p_h", mesh="pressure_mesh")
    if panels == 3:
        draw_field(axes[2], g, p - g["exact_pressure"][index], "p_h − p (error at the nodes)",
                   mesh="pressure_mesh")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def column_label(f, column):
    """What a column is: its time step, its wave number or its row of the input file."""
    cols = f["columns"]
    t = cols["t"][column]
    if np.isfinite(t):
        return f"t = {t:.4g}"
    if "input_column" in cols and cols["input_column"][column] >= 0:
        return f"input row {cols['input_column'][column]}"
    return f"k = {cols['k'][column]}"


def panel_size(g):
    """(width, height) of one field panel: the domain's aspect, colour bar included."""
    xy = g["mesh/coordinates"][:]
    width, height = np.ptp(xy[:, 0]), np.ptp(xy[:, 1])
    aspect = min(max(width / height, 1.0), 5.0) if height > 0 and xy.shape[1] == 2 else 1.0
    return 4.5 * aspect ** 0.5 + 1.0, 4.5 / aspect ** 0.5 + 0.5


def plot_solution(f, column, path):
    if is_stokes(f):
        plot_stokes_solution(f, column, path)
        return
    cols = f["columns"]
    op = int(cols["operator"][column])
    index = int(cols["index"][column])
    g = f[f"operators/{op}"]
    u = g["u"][index].astype(np.float64)
    what = column_label(f, column)
    panels = 2 if "exact" in g else 1
    w, h = panel_size(g)
    fig, axes = plt.subplots(1, panels, figsize=(w * panels, h), squeeze=False)
    draw_field(axes[0, 0], g, u, f"u_h, column {column} (operator {op}, {what})")
    if panels == 2:
        draw_field(axes[0, 1], g, u - g["exact"][index], "u_h − u (error at the nodes)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_series(f, path, count=6):
    """Solutions of up to `count` columns of the first operator spread over the campaign
    (a time series: its evolution), each on the operator's mesh."""
    cols = f["columns"]
    first = np.flatnonzero(cols["operator"][:] == 0)
    if len(first) < 2:
        return False
    picks = first[np.unique(np.linspace(0, len(first) - 1, min(count, len(first))).round().astype(int))]
    g = f["operators/0"]
    w, h = panel_size(g)
    per_row = 2 if w > 6 else 3
    rows = -(-len(picks) // per_row)
    fig, axes = plt.subplots(rows, per_row, figsize=(w * per_row, h * rows), squeeze=False)
    for ax, column in zip(axes.flat, picks):
        u = g["u"][int(cols["index"][column])].astype(np.float64)
        draw_field(ax, g, u, f"u_h, column {column} ({column_label(f, column)})")
    for ax in list(axes.flat)[len(picks):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def summary_html(f):
    """The per-rank and stage tables of the summary, and the config, as HTML."""
    perf = f["perf"]
    ranks = perf["rank"][:]
    dofs = perf["unknowns"][:] * perf["nrhs"][:]
    solve = perf["solve_seconds"][:]
    rows = []
    for r in np.unique(ranks):
        sel = ranks == r
        rows.append(f"<tr><td>{r}</td><td>{sel.sum()}</td><td>{perf['nrhs'][:][sel].sum()}</td>"
                    f"<td>{solve[sel].sum():.3f}</td><td>{dofs[sel].sum() / max(solve[sel].sum(), 1e-12) / 1e6:.2f}</td></tr>")
    stages = f["perf/ranks"]
    names = ["setup", "rhs", "solve", "verify", "io", "idle"]
    wall = max(stages["wall_seconds"][:].sum(), 1e-12)
    stage_rows = "".join(
        f"<tr><td>{n}</td><td>{stages[f'{n}_seconds'][:].sum():.3f}</td>"
        f"<td>{100 * stages[f'{n}_seconds'][:].sum() / wall:.1f} %</td></tr>" for n in names)
    residual = f["columns/relative_residual"][:]
    accuracy = f"max relative residual (f64) {residual.max():.3e}"
    for label, values in errors(f["columns"]):
        accuracy += f", max {label} {np.nanmax(values):.3e}"
    return (
        "<h2>Ranks</h2><table><tr><th>rank</th><th>batches</th><th>columns</th><th>solve [s]</th>"
        "<th>MDof/s while solving</th></tr>" + "".join(rows) + "</table>"
        "<h2>Stages of the last run (all ranks)</h2><table><tr><th>stage</th><th>total [s]</th>"
        "<th>share of rank time</th></tr>" + stage_rows + "</table>"
        f"<p>{html.escape(accuracy)}</p>"
        f"<h2>Config</h2><pre>{html.escape(text(f.attrs.get('config', '')))}</pre>"
    )


def write_html(f, out, figures, summary_text):
    def embed(name):
        with open(os.path.join(out, name), "rb") as png:
            data = base64.b64encode(png.read()).decode()
        return f'<img alt="{name}" src="data:image/png;base64,{data}">'

    title = f"tensorfem report: {html.escape(summary_text.splitlines()[0])}"
    body = "".join(f"<h2>{html.escape(caption)}</h2>{embed(name)}" for name, caption in figures)
    page = (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tensorfem report</title>"
        "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "img{max-width:100%}pre{background:#f4f4f4;padding:8px;overflow:auto}</style></head><body>"
        f"<h1>{title}</h1>{summary_html(f)}{body}</body></html>\n"
    )
    path = os.path.join(out, "index.html")
    with open(path, "w") as page_file:
        page_file.write(page)
    return path


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
        text_summary = summary(f)
        print(text_summary)
        figures = [
            ("timeline.png", "What every rank did over the run"),
            ("throughput.png", "Throughput per batch"),
            ("accuracy.png", "Residual and error of every column"),
            ("iterations.png",
             "FGMRES iterations per operator" if is_stokes(f) else "Refinement steps per batch"),
            ("solution.png", f"Column {column}"),
        ]
        plot_timeline(f, os.path.join(out, "timeline.png"))
        plot_throughput(f, os.path.join(out, "throughput.png"))
        plot_accuracy(f, os.path.join(out, "accuracy.png"))
        plot_iterations(f, os.path.join(out, "iterations.png"))
        plot_solution(f, column, os.path.join(out, "solution.png"))
        if not is_stokes(f) and plot_series(f, os.path.join(out, "series.png")):
            figures.append(("series.png", "Solutions over the campaign (first operator)"))
        page = write_html(f, out, figures, text_summary)
        print(f"report: {page} (plots: {', '.join(name for name, _ in figures)} in {out})")

if __name__ == "__main__":
    main()
