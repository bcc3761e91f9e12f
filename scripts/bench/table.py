#!/usr/bin/env python3
"""Markdown tables of the benchmarks' JSON lines (`tensorfem bench … --json`) and of
campaign runs.

    python3 scripts/bench/table.py VIEW FILE...
    python3 scripts/bench/table.py fields FILE... [--where COND]... [--columns EXPR[:FORMAT],...]
    python3 scripts/bench/table.py list

VIEW is one of the tables declared below (`list` prints them with what they read). A JSON
view reads every line of its files that starts with "{" (so a log holding JSON lines among
other output can be given as it is); rows are kept in file order.

`fields` prints any table nobody declared: --where keeps the rows whose FIELD equals one of
the values (`--where case=psc`, `--where precision=f32,f16`, `--where nrhs!=1`; values are
read as JSON where they parse, else as text) or for which a Python expression of the fields
is true (`--where 'nrhs >= 64'`); several --where must all hold. --columns lists fields or
expressions of fields, each with an optional format spec after its last colon
(`--columns n,nrhs,precision,solve_seconds:.4f,100*triad_fraction:.0f`); without it, every
field the kept rows have, in order of appearance. A field a row lacks reads as None and
prints as "-".

A view is data: which rows (a filter on the fields) and which columns (header, an
expression of the row's fields, a str.format template, the text printed when the value is
None). The views that need more than columns (cpu-goals: thresholds and "met"; mg-peer: the
ratio to the peer's row of the same cycle and width; compare: medians over repeats;
throughput and campaign: campaign.h5 files and logs rather than JSON lines) are functions
that build rows and print them with the same code.
"""
import builtins
import json
import re
import signal
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field

# The published single-core Vanka figure the Stokes table is compared with, ms per element
# per solve (docs/mathematics.md §8.3).
PUBLISHED_VANKA_MS_PER_ELEMENT = 0.03

# ---------------------------------------------------------------------------------------
# Loading, filtering, printing


def load(paths):
    """The JSON objects of the files' lines that start with "{", in file order; a file that
    is one JSON object over several lines (`psc-info --json`) is that object."""
    rows = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("{")]
        try:
            rows += [json.loads(line) for _, line in lines]
        except json.JSONDecodeError:
            try:
                rows.append(json.loads(text))
            except json.JSONDecodeError:
                for i, line in lines:
                    try:
                        json.loads(line)
                    except json.JSONDecodeError as e:
                        sys.exit(f"table.py: {path}:{i}: not JSON ({e})")
    return rows


class Fields(dict):
    """A row's fields as the names of an expression: a field the row lacks reads as None
    (names of Python's builtins and the expression's other names stay theirs)."""

    def __init__(self, row, names):
        super().__init__(row)
        self.names = names

    def __missing__(self, key):
        if key in self.names or hasattr(builtins, key):
            raise KeyError(key)
        return None


# Names every expression may use beside the fields.
NAMES = {"PUBLISHED_VANKA_MS_PER_ELEMENT": PUBLISHED_VANKA_MS_PER_ELEMENT}


def evaluate(expression, row, names=None):
    names = {**NAMES, **(names or {})}
    return eval(expression, names, Fields(row, names))


def keep(rows, where):
    """The rows for which `where` holds: None (all), an expression of the fields (false
    where it needs a field the row lacks), or a function of the row."""
    if where is None:
        return list(rows)
    if callable(where):
        return [r for r in rows if where(r)]

    def holds(r):
        try:
            return evaluate(where, r)
        except TypeError:
            return False

    return [r for r in rows if holds(r)]


@dataclass
class Column:
    header: str
    value: str  # an expression of the row's fields; a field's name is the simplest
    format: str = None  # str.format template (a tuple value fills several {}); None: plain
    none: str = "-"  # printed when the value is None or needs a field the row lacks
    align: str = "---"  # the separator row's cell ("---:" aligns right)

    def cell(self, row):
        try:
            value = evaluate(self.value, row)
            if value is None:
                return self.none
            if self.format is None:
                return plain(value)
            return self.format.format(*value) if isinstance(value, tuple) else self.format.format(value)
        except TypeError:  # arithmetic on a field the row lacks
            return self.none


def plain(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def C(header, value=None, format="{}", none="-", align="---"):
    """A column: header, expression (default: the header as a field's name), format."""
    return Column(header, header if value is None else value, format, none, align)


def print_table(columns, rows):
    print("| " + " | ".join(c.header for c in columns) + " |")
    print("|" + "|".join(c.align for c in columns) + "|")
    for r in rows:
        print("| " + " | ".join(c.cell(r) for c in columns) + " |")


@dataclass
class Table:
    """A markdown table of the rows `where` keeps; with optional=True nothing (not even the
    blank line `gap` asks for) is printed when no row is kept."""

    columns: list
    where: object = None
    optional: bool = False
    gap: bool = False  # a blank line before the table

    def show(self, rows):
        kept = keep(rows, self.where)
        if self.optional and not kept:
            return
        if self.gap:
            print()
        print_table(self.columns, kept)


@dataclass
class Text:
    """A line of text: `value` evaluated on the first row `where` keeps (nothing when none
    is), or with over_all=True on all kept rows through col(FIELD), the list of a field's
    values; filled into the template `format`."""

    format: str
    value: str
    where: object = None
    over_all: bool = False

    def show(self, rows):
        kept = keep(rows, self.where)
        if not kept:
            return
        if self.over_all:
            value = evaluate(self.value, {}, {"col": lambda k: [r.get(k) for r in kept]})
        else:
            value = evaluate(self.value, kept[0])
        print(self.format.format(*value) if isinstance(value, tuple) else self.format.format(value))


@dataclass
class View:
    doc: str
    parts: list = field(default_factory=list)  # Table and Text, printed in order
    function: object = None  # for views that need more than columns: f(paths)
    reads: str = "JSON lines"

    def show(self, paths):
        if self.function is not None:
            return self.function(paths)
        rows = load(paths)
        for part in self.parts:
            part.show(rows)


# ---------------------------------------------------------------------------------------
# Views declared as data

PSC = View(
    "bench psc rows (scripts/bench/psc.sh), after the ceilings of the file's `bench machine` "
    'line (tagged "bench": "machine") when it has one',
    [
        Text(
            "Machine ceilings ({} threads): triad {:.1f} GB/s, GEMM f64 {:.1f}, f32 {:.1f}, "
            "{}f16 operands {:.1f} GFLOP/s\n",
            "threads, triad_gbs, gemm_gflops_f64, gemm_gflops_f32, "
            "'' if gemm_gflops_tf32 is None else f'TF32 {gemm_gflops_tf32:.1f}, ', gemm_gflops_f16",
            where="bench == 'machine'",
        ),
        Table(
            [
                C("h", "n", "1/{}"),
                C("h0", "n0", "1/{}"),
                C("Nrhs", "nrhs"),
                C("precision"),
                C("coupling"),
                C("set-up s", "setup_seconds, ' (cache)' if setup_from_cache else ''", "{:.1f}{}"),
                C("solve s", "solve_seconds", "{:.4f}"),
                C("MDof/s", "mdofs", "{:.1f}"),
                C("GFLOP/s (formula of docs/mathematics.md §3)", "gflops", "{:.1f}"),
                C("GFLOP/s (counted)", "gflops_counted", "{:.1f}"),
                C("GEMM peak in run", "gemm_peak_gflops", "{:.1f}"),
                C("% of peak (formula)", "100 * gemm_peak_fraction", "{:.0f}%"),
                C("% of peak (counted)", "100 * gemm_peak_fraction_counted", "{:.0f}%"),
                C("operator GB/s", "operator_gbs", "{:.1f}"),
                C("% of triad", "100 * triad_fraction", "{:.0f}%"),
                C("rel. residual", "relative_residual", "{:.1e}"),
                C("rel. L2 error", "l2_error", "{:.1e}"),
            ],
            where="bench != 'machine' and solve_seconds is not None",
        ),
    ],
)

_IR = "'alone' if refine_steps is None else 'PSC-IR'"
PSC_METHODS = View(
    "bench psc rows of scripts/bench/psc-methods.sh: the methods, then (when there are "
    "--reference rows) each beside the sparse Cholesky solve of the same block",
    [
        Table(
            [
                C("method"),
                C("h", "n", "1/{}"),
                C("h0", "n0", "1/{}"),
                C("precision"),
                C("solve", _IR),
                C("set-up s", "setup_seconds", "{:.1f}"),
                C("operators MiB", "operator_bytes / 2**20", "{:.0f}"),
                C("peak memory GiB", "peak_memory_bytes / 2**30", "{:.2f}", none=""),
                C("solve s (64 rhs)", "solve_seconds", "{:.2f}"),
                C("IR steps", "refine_steps", none=""),
                C("CG iterations", "cg_iterations", none=""),
                C("GFLOP/s (counted)", "gflops_counted", "{:.1f}"),
                C("% of GEMM peak", "100 * gemm_peak_fraction_counted", "{:.0f}%"),
                C("rel. residual", "relative_residual", "{:.1e}"),
                C("rel. L2 error", "l2_error", "{:.1e}"),
            ],
            where="solve_seconds is not None and reference_solve_seconds is None",
        ),
        Table(
            [
                C("method"),
                C("h", "n", "1/{}"),
                C("precision"),
                C("solve", _IR),
                C("solve s (64 rhs, best)", "solve_seconds", "{:.3f}"),
                C("median", "solve_seconds_median", "{:.3f}"),
                C("IR steps", "refine_steps", none=""),
                C("rel. residual", "relative_residual", "{:.1e}"),
                C("sparse Cholesky solve s (best)", "reference_solve_seconds", "{:.3f}"),
                C("median", "reference_solve_seconds_median", "{:.3f}"),
                C("factorisation s", "reference_factor_seconds", "{:.2f}"),
                C("Cholesky rel. residual", "reference_relative_residual", "{:.1e}"),
                C("Cholesky time / method time", "reference_solve_seconds / solve_seconds", "{:.2f}"),
            ],
            where="reference_solve_seconds is not None",
            optional=True,
            gap=True,
        ),
    ],
)

STOKES = View(
    "bench stokes rows (scripts/bench/stokes.sh): per mesh the preconditioners side by side, "
    "time per element per solve and its ratio to the published single-core Vanka figure",
    [
        Table(
            [
                C("elements", "n", "{}²"),
                C("precond"),
                C("precision"),
                C("FGMRES iter.", "iterations"),
                C("solve s", "seconds", "{:.2f}"),
                C("ms / iter.", "ms_per_iteration", "{:.1f}"),
                C("ms / element / solve", "ms_per_element", "{:.4f}"),
                C("published 0.03 ÷ this", "PUBLISHED_VANKA_MS_PER_ELEMENT / ms_per_element", "{:.2f}×"),
                C("set-up s", "setup_seconds", "{:.2f}"),
                C("rel. residual", "relative_residual", "{:.1e}"),
                C("velocity L2 error", "velocity_l2_error", "{:.3e}"),
                C("pressure L2 error", "pressure_l2_error", "{:.3e}"),
            ],
            where="precond is not None",
        ),
        Text(
            "\nf64 operator product (FGMRES): {:.1f}–{:.1f} GB/s; triad bandwidth up to {:.1f} GB/s "
            "in the same runs.",
            "min(col('matvec_gbs')), max(col('matvec_gbs')), max(col('triad_gbs'))",
            where="precond is not None",
            over_all=True,
        ),
    ],
)

PSC_INFO = View(
    "`tensorfem psc-info --json` objects, one per file (scripts/bench/psc-info-flow.sh): the "
    "PSC figures per coarse level",
    [
        Table(
            [
                C("L0", "coarse_levels"),
                C("N", "N", "{:,}"),
                C("\\|C\\|", "C", "{:,}"),
                C("\\|E\\|", "E", "{:,}"),
                C("\\|I\\|", "I", "{:,}"),
                C("group members", "' + '.join(str(g['members']) for g in group_blocks)"),
                C("κ(C_i)", "kappa_Ci", "{:.1f}"),
                C("κ(Π)", "kappa_Pi", "{:.1f}"),
                C("NNZ(C_i⁻¹)/NNZ_FEM", "nnz_Ci_inv_over_fem", "{:.3f}"),
                C("NNZ(Π⁻¹)/NNZ_FEM", "nnz_Pi_inv_over_fem", "{:.2f}"),
                C("set-up [s]", "setup_seconds", "{:.1f}"),
                C("figures [s]", "info_seconds", "{:.1f}"),
                C("peak memory [GB]", "peak_memory_bytes / 1e9 if peak_memory_bytes else float('nan')", "{:.1f}"),
            ],
            where="kappa_Pi is not None",
        )
    ],
    reads="JSON objects",
)

MG = View(
    "bench mg rows (scripts/bench/mg.sh): the variants side by side per problem",
    [
        Table(
            [
                C("dim", "dim", "{}D"),
                C("nodes", "n + 1, dim", "{}^{}"),
                C("levels"),
                C("variant"),
                C("schedule (fine → coarse)", "schedule"),
                C("IR iter.", "iterations"),
                C("time to solution s", "seconds", "{:.2f}"),
                C("s / iter.", "seconds_per_iteration", "{:.3f}"),
                C("MDof/s", "mdofs", "{:.2f}"),
                C("GB/s moved", "gbs", "{:.1f}"),
                C("% of triad (in run)", "100 * triad_fraction, triad_gbs", "{:.0f}% ({:.0f} GB/s)"),
                C("speedup vs D_MG", "speedup_vs_d_mg or None", "{:.2f}×"),
                C("f64 residual", "residual", "{:.1e}"),
                C("L2 error", "l2_error", "{:.2e}"),
            ],
            where="variant is not None",
        )
    ],
)

MG_KERNELS = View(
    "bench mg --kernels rows (scripts/bench/mg.sh's -kernels file): each kernel alone "
    "against the memory ceiling measured in the same process",
    [
        Table(
            [
                C("dim", "dim", "{}D"),
                C("n"),
                C("rhs", "nrhs"),
                C("kernel"),
                C("precision"),
                C("storage"),
                C("best ms", "1e3 * seconds", "{:.3f}"),
                C("median ms", "1e3 * median_seconds", "{:.3f}"),
                C("GB/s", "gbs", "{:.1f}"),
                C("% of ceiling", "100 * triad_fraction, bandwidth or 'triad', triad_gbs", "{:.0f}% of {} {:.1f} GB/s"),
            ],
            where="kernel is not None",
        )
    ],
)


# ---------------------------------------------------------------------------------------
# Views that need more than columns


def mg_peer(paths):
    """scripts/bench/mg-peer.sh: the C + OpenMP peer and every tensorfem variant per cycle
    and width, the ratio of MDof/s to the peer's row of the same cycle and width; then each
    solver's time per column with 64 columns against one."""
    rows = load(paths)
    peer = {(r["cycle"], r["nrhs"]): r for r in rows if r["solver"] == "peer"}
    for r in rows:
        is_peer = r["solver"] == "peer"
        p = peer.get((r["cycle"], r["nrhs"]))
        r["name"] = "C + OpenMP peer" if is_peer else r["variant"]
        r["cycles"] = r["iters"] if is_peer else r["iterations"]
        r["time"] = r["solve_s"] if is_peer else r["seconds"]
        r["relres"] = r["relres"] if is_peer else r["relative_residual"]
        r["peer_mdofs"] = p["mdofs"] if p else None
    print_table(
        [
            C("cycle"),
            C("rhs", "nrhs"),
            C("solver", "name"),
            C("cycles"),
            C("time s", "time", "{:.3f}"),
            C("MDof/s", "mdofs", "{:.1f}"),
            C("× peer", "mdofs / peer_mdofs", "{:.2f}×"),
            C("max relative residual", "relres", "{:.1e}"),
        ],
        rows,
    )
    print()
    print("Time per column, 64 columns against 1 (≤ 0.5 asked):")
    print()
    by = {}
    for r in rows:
        by.setdefault((r["cycle"], r["name"]), {})[r["nrhs"]] = r["time"] / r["nrhs"]
    per_column = [
        {"cycle": cycle, "name": name, "one": t[1], "many": t[64]}
        for (cycle, name), t in by.items()
        if 1 in t and 64 in t
    ]
    print_table(
        [
            C("cycle"),
            C("solver", "name"),
            C("s per column, 1 rhs", "one", "{:.4f}"),
            C("s per column, 64 rhs", "many", "{:.4f}"),
            C("ratio", "many / one", "{:.2f}"),
        ],
        per_column,
    )


def cpu_goals(paths):
    """scripts/bench/cpu-goals.sh: each goal, what this run measured (with the ceiling or
    competitor it is a ratio to), the threshold and whether it was met; then PSC-IR beside
    the sparse Cholesky (no threshold). Exits 1 if a goal's measurement is missing."""
    rows = load(paths)

    def of(case, **match):
        return [r for r in rows if r.get("case") == case and all(r.get(k) == v for k, v in match.items())]

    def one(case, **match):
        found = of(case, **match)
        if len(found) != 1:
            sys.exit(f"table.py cpu-goals: expected one '{case}' row with {match}, found {len(found)}")
        return found[0]

    goals = []  # goal, measured, threshold, met (None: recorded, no threshold)

    def at_least(goal, value, threshold, text):
        goals.append({"goal": goal, "measured": text, "threshold": f"≥ {threshold:g}", "met": value >= threshold})

    def at_most(goal, value, threshold, text):
        goals.append({"goal": goal, "measured": text, "threshold": f"≤ {threshold:g}", "met": value <= threshold})

    machine = one("machine")

    for case, nodes, goal in [("mg 2d", "4097²", 1.8), ("mg 3d", "129³", 1.5)]:
        d, h = one(case, variant="D_MG"), one(case, variant="H_MG")
        ratio = d["seconds"] / h["seconds"]
        at_least(f"H_MG / D_MG time to solution, {nodes}", ratio, goal,
                 f"{ratio:.2f}× (D_MG {d['seconds']:.3f} s in {d['iterations']} steps, "
                 f"H_MG {h['seconds']:.3f} s in {h['iterations']} steps)")

    for case, label in [("mg kernels 2d", "2D"), ("mg kernels 3d", "3D")]:
        kernels = of(case, precision="f64")
        if not kernels:
            sys.exit(f"table.py cpu-goals: no f64 kernels in '{case}'")
        worst = min(kernels, key=lambda r: r["triad_fraction"])
        levels = sorted({r["n"] for r in kernels}, reverse=True)
        at_least(f"every f64 multigrid kernel, {label} n = {'/'.join(map(str, levels))}, % of triad",
                 100 * worst["triad_fraction"], 60,
                 f"slowest {100 * worst['triad_fraction']:.0f} % ({worst['kernel']}, n = {worst['n']}: "
                 f"{worst['gbs']:.1f} of {worst['triad_gbs']:.1f} GB/s) over {len(kernels)} kernels")

    p = one("psc 64")
    at_least("PSC-M1 f32, h = 1/256, 64 rhs, % of the f32 GEMM peak (formula)", 100 * p["gemm_peak_fraction"], 70,
             f"{100 * p['gemm_peak_fraction']:.0f} % ({p['gflops']:.1f} of {p['gemm_peak_gflops']:.1f} GFLOP/s; "
             f"counted flops {100 * p['gemm_peak_fraction_counted']:.0f} %)")
    for r in of("psc 1"):
        text = (f"{100 * r['triad_fraction']:.0f} % ({r['operator_gbs']:.1f} of {r['triad_gbs']:.1f} GB/s, "
                f"{1e3 * r['solve_seconds']:.2f} ms)")
        goal = f"PSC-M1 {r['precision']}, h = 1/{r['n']}, 1 rhs, % of triad (bytes read)"
        if r["n"] == 256:
            at_least(goal, 100 * r["triad_fraction"], 70, text)
        else:
            goals.append({"goal": goal, "measured": text, "threshold": "(record)", "met": None})

    for name in ["braess-sarazin", "vanka-tuned"]:
        s = one("stokes", precond=name)
        at_most(f"Stokes FGMRES + {name} (f32), 1024², ms per element per solve", s["ms_per_element"], 0.008,
                f"{s['ms_per_element']:.5f} ({s['iterations']} iterations, {s['seconds']:.2f} s)")

    peer = {(r["cycle"], r["nrhs"]): r for r in of("peer", solver="peer")}
    ours = {(r["cycle"], r["nrhs"]): r for r in of("peer", solver="tensorfem", variant="H_MG")}
    if not peer:
        sys.exit("table.py cpu-goals: no 'peer' rows of the C + OpenMP peer")
    for cycle in sorted({c for c, _ in peer}):
        if (cycle, 64) not in ours or (cycle, 1) not in ours or (cycle, 1) not in peer:
            sys.exit(f"table.py cpu-goals: the peer comparison of {cycle} lacks a row")
        mine, theirs = ours[(cycle, 64)], peer[(cycle, 64)]
        ratio = mine["mdofs"] / theirs["mdofs"]
        at_least(f"H_MG against the C + OpenMP peer, {cycle}, 64 rhs, n = 1024, to 1e-6", ratio, 1.5,
                 f"{ratio:.2f}× ({mine['mdofs']:.1f} against {theirs['mdofs']:.1f} MDof/s)")
        per_column = (mine["seconds"] / 64) / ours[(cycle, 1)]["seconds"]
        at_most(f"H_MG time per column, 64 columns / 1 column, {cycle}", per_column, 0.5,
                f"{per_column:.2f} (peer {(theirs['solve_s'] / 64) / peer[(cycle, 1)]['solve_s']:.2f})")

    print(f"Machine: {machine['threads']} threads, SIMD {machine['simd']}; triad {machine['triad_gbs']:.1f} GB/s, "
          f"read {machine['read_gbs']:.1f} GB/s, GEMM f64 {machine['gemm_gflops_f64']:.0f}, "
          f"f32 {machine['gemm_gflops_f32']:.0f} GFLOP/s (each fraction below uses the ceiling its own process measured)\n")
    print_table(
        [
            C("goal"),
            C("measured in this run", "measured"),
            C("goal", "threshold"),
            C("met", "'—' if met is None else ('yes' if met else '**no**')"),
        ],
        goals,
    )
    scored = [g["met"] for g in goals if g["met"] is not None]
    print(f"\n{sum(scored)} of {len(scored)} goals met.\n")
    ir = one("psc-ir")
    print(f"PSC-IR (M1 f32), h = 1/512, 64 rhs: {ir['refine_steps']} refinement steps, "
          f"{ir['solve_seconds']:.3f} s to {ir['relative_residual']:.1e} "
          f"(to 1e-6: {ir['seconds_to_1e6']:.3f} s in {ir['steps_to_1e6']} steps; "
          f"to 1e-10: {ir['seconds_to_1e10']:.3f} s in {ir['steps_to_1e10']} steps); "
          f"sparse Cholesky solve of the same block {ir['reference_solve_seconds']:.3f} s "
          f"(factorisation {ir['reference_factor_seconds']:.1f} s, excluded): "
          f"PSC-IR / Cholesky = {ir['solve_seconds'] / ir['reference_solve_seconds']:.2f}.")


def compare(paths):
    """scripts/bench/compare-speed.sh: per case, the median over the repeats of old time /
    new time of the solve (above 1: the new code is faster), the smallest and largest ratio
    of the pairs, and the median times themselves."""
    times = defaultdict(dict)  # case -> {(build, repeat): seconds}
    for r in load(paths):
        # The timed solve: PSC's solve, multigrid's and Stokes' time to solution.
        seconds = next((r[k] for k in ("solve_seconds", "seconds") if k in r), None)
        if seconds is None:
            raise KeyError(f"no solve time in {r}")
        times[r["case"]][(r["build"], r["repeat"])] = seconds
    cases = []
    for case, t in times.items():
        repeats = sorted({repeat for (_, repeat) in t})
        pairs = [(t[("old", k)], t[("new", k)]) for k in repeats if ("old", k) in t and ("new", k) in t]
        if not pairs:
            continue
        ratios = [o / n for o, n in pairs]
        cases.append({
            "case": case,
            "old": statistics.median(o for o, _ in pairs),
            "new": statistics.median(n for _, n in pairs),
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "pairs": len(pairs),
        })
    right = "---:"
    print_table(
        [
            C("case"),
            C("old s (median)", "old", "{:.4g}", align=right),
            C("new s (median)", "new", "{:.4g}", align=right),
            C("old/new median", "median", "{:.3f}", align=right),
            C("min", "min", "{:.3f}", align=right),
            C("max", "max", "{:.3f}", align=right),
            C("pairs", "pairs", align=right),
        ],
        cases,
    )
    worst = min(c["median"] for c in cases)
    print(f"\nsmallest median ratio: {worst:.3f} (goal: ≥ 0.97 per case)")


STAGES = ["setup", "rhs", "solve", "verify", "io", "idle"]
STAGE_HEADERS = ["set-up", "rhs", "solve", "verify", "I/O", "idle"]


def psc_stages(paths):
    """bench psc --stages rows: per row (h, precision, coupling, columns) each stage of the apply,
    measured beside its model (compulsory bytes at the run's memory bandwidth, counted flops
    at its GEMM peak), and the apply as a whole."""
    rows = []
    for r in load(paths):
        stages = r.get("stage_seconds")
        if not stages:
            continue
        total = [{"stage": "apply", **{k: sum(s[k] for s in stages)
                                         for k in ("seconds", "bytes", "flops", "model_seconds")}}]
        for s in stages + total:
            rows.append({"n": r["n"], "precision": r["precision"], "nrhs": r["nrhs"],
                         "coupling": r.get("coupling"),
                         "refine": "PSC-IR" if r.get("refine_steps") is not None else "M1",
                         "memory": r["triad_gbs"], "peak": r["gemm_peak_gflops"], **s})
    print_table(
        [C("h", "n", "1/{}"), C("precision"), C("coupling"), C("Nrhs", "nrhs"), C("solve", "refine"),
         C("stage"), C("measured ms", "1e3 * seconds", "{:.3f}"), C("MB", "bytes / 1e6", "{:.1f}"),
         C("GFLOP", "flops / 1e9", "{:.2f}"), C("model ms", "1e3 * model_seconds", "{:.3f}"),
         C("model / measured", "100 * model_seconds / seconds", "{:.0f} %"),
         C("GB/s (ceiling)", "memory", "{:.0f}"), C("GFLOP/s (ceiling)", "peak", "{:.0f}")],
        rows,
    )


def _campaign_h5(directory):
    import h5py  # only the campaign views need it

    return h5py.File(f"{directory}/campaign.h5", "r")


def campaign(paths):
    """scripts/bench/campaign-scaling.sh: one row per campaign directory (each holding
    campaign.h5): wall time, speed-up over the first, each stage's share of the ranks'
    summed time, MDof/s on the wall time."""
    rows, base = [], None
    for d in paths:
        with _campaign_h5(d) as f:
            r = f["perf/ranks"]
            wall = r["wall_seconds"][:]
            total = wall.sum()
            dofs = (f["perf/unknowns"][:] * f["perf/nrhs"][:]).sum()
            w = wall.max()
            base = base or w
            rows.append({"ranks": len(wall), "wall": w, "speedup": base / w, "mdofs": dofs / w / 1e6,
                         "split": [r[f"{s}_seconds"][:].sum() / total for s in STAGES]})
    print_table(
        [C("ranks"), C("wall [s]", "wall", "{:.2f}"), C("speed-up", "speedup", "{:.2f}")]
        + [C(h, f"100 * split[{i}]", "{:.0f} %") for i, h in enumerate(STAGE_HEADERS)]
        + [C("MDof/s (wall)", "mdofs", "{:.2f}")],
        rows,
    )


def throughput(paths):
    """scripts/bench/campaign-throughput.sh: one row per NAME, from the runs NAME-1,
    NAME-2, … (directories holding campaign.h5, each run's printed summary in NAME-k.log)
    and the solver alone in NAME.bench.jsonl (`bench … --json`, one line per rank): the run
    of median campaign throughput, its stage split and merge, and the range over the runs."""
    import glob

    import numpy as np

    def run_figures(d):
        with _campaign_h5(d) as f:
            r = f["perf/ranks"]
            ranks = len(r["wall_seconds"])
            p = f["perf"]
            dofs = p["unknowns"][:] * p["nrhs"][:]
            per_rank = np.array([dofs[p["rank"][:] == k].sum() for k in r["rank"][:]])
            solve = r["solve_seconds"][:]
            wall = r["wall_seconds"][:]
            method = p["method"][0].decode() if isinstance(p["method"][0], bytes) else p["method"][0]
            total = wall.sum()
            with open(f"{d}.log") as log:
                merge = float(re.search(r"merged in ([0-9.]+) s", log.read()).group(1))
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

    rows = []
    for name in paths:
        dirs = [d for d in glob.glob(f"{name}-*") if re.fullmatch(r"-[0-9]+", d[len(name):])]
        runs = sorted((run_figures(d) for d in dirs), key=lambda run: run["campaign"])
        row = runs[(len(runs) - 1) // 2]
        solver_only = float(np.mean([b["mdofs"] for b in load([f"{name}.bench.jsonl"])]))
        row["solver_only"] = solver_only
        row["ratio"] = 100 * row["campaign"] / solver_only
        row["spread"] = (f" ({100 * runs[0]['campaign'] / solver_only:.0f}–"
                         f"{100 * runs[-1]['campaign'] / solver_only:.0f})") if len(runs) > 1 else ""
        rows.append(row)
    print_table(
        [
            C("method"),
            C("ranks"),
            C("columns"),
            C("solver-only (bench) MDof/s per rank", "solver_only", "{:.2f}"),
            C("solve stage MDof/s per rank", "solve_stage", "{:.2f}"),
            C("campaign MDof/s per rank", "campaign", "{:.2f}"),
            C("campaign / solver-only (range over the runs)", "ratio, spread", "{:.0f} %{}"),
            C("with merge", "100 * with_merge / solver_only", "{:.0f} %"),
        ]
        + [C(h, f"100 * split[{i}]", "{:.0f} %") for i, h in enumerate(STAGE_HEADERS)]
        + [C("merge [s]", "merge", "{:.2f}")],
        rows,
    )


VIEWS = {
    "psc": PSC,
    "psc-methods": PSC_METHODS,
    "psc-info": PSC_INFO,
    "psc-stages": View(psc_stages.__doc__, function=psc_stages),
    "stokes": STOKES,
    "mg": MG,
    "mg-kernels": MG_KERNELS,
    "mg-peer": View(mg_peer.__doc__, function=mg_peer),
    "cpu-goals": View(cpu_goals.__doc__, function=cpu_goals),
    "compare": View(compare.__doc__, function=compare),
    "throughput": View(throughput.__doc__, function=throughput, reads="NAME... (see above; needs h5py)"),
    "campaign": View(campaign.__doc__, function=campaign, reads="DIR... (needs h5py)"),
}


# ---------------------------------------------------------------------------------------
# The generic mode: `fields`


def split_top(text, sep=","):
    """text split at `sep` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


FORMAT_SPEC = re.compile(r"[<>^=]?[+\- ]?#?0?\d*[,_]?(\.\d+)?[bcdeEfFgGnosxX%]?")


def column_of(item):
    """EXPR or EXPR:SPEC as a column headed by EXPR."""
    expression, colon, spec = item.rpartition(":")
    if colon and expression and spec and FORMAT_SPEC.fullmatch(spec):
        return Column(expression, expression, "{:" + spec + "}")
    return Column(item, item)


def condition_of(text):
    """FIELD=V[,V…], FIELD!=V[,V…], or an expression of the fields, as a filter."""
    m = re.fullmatch(r"(\w+)(!=|=)([^=].*|)", text)
    if not m:
        return text

    def parse(v):
        try:
            return json.loads(v)
        except ValueError:
            return v

    key, op, values = m.group(1), m.group(2), [parse(v) for v in m.group(3).split(",")]
    if op == "=":
        return lambda r: r.get(key) in values
    return lambda r: r.get(key) not in values


def fields(args):
    paths, wheres, columns = [], [], None
    it = iter(args)
    for a in it:
        if a == "--where":
            wheres.append(condition_of(next(it)))
        elif a.startswith("--where="):
            wheres.append(condition_of(a[len("--where="):]))
        elif a == "--columns":
            columns = next(it)
        elif a.startswith("--columns="):
            columns = a[len("--columns="):]
        else:
            paths.append(a)
    if not paths:
        sys.exit(__doc__)
    rows = load(paths)
    for w in wheres:
        rows = keep(rows, w)
    if columns is None:
        names = []
        for r in rows:
            names += [k for k in r if k not in names]
        cols = [Column(k, k) for k in names]
    else:
        cols = [column_of(c) for c in split_top(columns)]
    print_table(cols, rows)


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly, into `head`
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    view = argv[1]
    if view == "list":
        for name, v in VIEWS.items():
            print(f"{name}: {' '.join(v.doc.split())} [reads {v.reads}]")
        print("fields: any table of JSON lines (--where, --columns)")
        return
    if view == "fields":
        return fields(argv[2:])
    if view not in VIEWS:
        sys.exit(f"table.py: no view '{view}' (views: {', '.join(VIEWS)}, fields, list)")
    if len(argv) < 3:
        sys.exit(f"table.py {view}: which files?")
    VIEWS[view].show(argv[2:])


if __name__ == "__main__":
    main(sys.argv)
