"""Renders scripts/bench-cpu-goals.sh's JSON lines as the table of the CPU kernels' goals:
each goal, what was measured in that run (with the ceiling or competitor it is a ratio
to), the threshold, and whether it was met; then the PSC-IR comparison, which has no
threshold. Exits 1 if a goal's measurement is missing from the file."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def of(case, **match):
    """The rows of a case whose fields equal `match`."""
    return [r for r in rows if r.get("case") == case and all(r.get(k) == v for k, v in match.items())]


def one(case, **match):
    found = of(case, **match)
    if len(found) != 1:
        sys.exit(f"cpu_goals: expected one '{case}' row with {match}, found {len(found)}")
    return found[0]


goals = []  # (goal, measured, threshold, met)


def at_least(goal, value, threshold, text):
    goals.append((goal, text, f"≥ {threshold:g}", value >= threshold))


def at_most(goal, value, threshold, text):
    goals.append((goal, text, f"≤ {threshold:g}", value <= threshold))


machine = one("machine")

for case, dim, nodes, goal in [("mg 2d", 2, "4097²", 1.8), ("mg 3d", 3, "129³", 1.5)]:
    d, h = one(case, variant="D_MG"), one(case, variant="H_MG")
    ratio = d["seconds"] / h["seconds"]
    at_least(f"H_MG / D_MG time to solution, {nodes}", ratio, goal,
             f"{ratio:.2f}× (D_MG {d['seconds']:.3f} s in {d['iterations']} steps, "
             f"H_MG {h['seconds']:.3f} s in {h['iterations']} steps)")

for case, label in [("mg kernels 2d", "2D"), ("mg kernels 3d", "3D")]:
    kernels = of(case, precision="f64")
    if not kernels:
        sys.exit(f"cpu_goals: no f64 kernels in '{case}'")
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
        goals.append((goal, text, "(record)", None))

for name in ["braess-sarazin", "vanka-tuned"]:
    s = one("stokes", precond=name)
    at_most(f"Stokes FGMRES + {name} (f32), 1024², ms per element per solve", s["ms_per_element"], 0.008,
            f"{s['ms_per_element']:.5f} ({s['iterations']} iterations, {s['seconds']:.2f} s)")

peer = {(r["cycle"], r["nrhs"]): r for r in of("peer", solver="peer")}
ours = {(r["cycle"], r["nrhs"]): r for r in of("peer", solver="tensorfem", variant="H_MG")}
for cycle in sorted({c for c, _ in peer}):
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
print("| goal | measured in this run | goal | met |")
print("|---|---|---|---|")
for goal, text, threshold, met in goals:
    print(f"| {goal} | {text} | {threshold} | {'—' if met is None else ('yes' if met else '**no**')} |")
scored = [met for *_, met in goals if met is not None]
print(f"\n{sum(scored)} of {len(scored)} goals met.\n")

ir = one("psc-ir")
print(f"PSC-IR (M1 f32), h = 1/512, 64 rhs: {ir['refine_steps']} refinement steps, "
      f"{ir['solve_seconds']:.3f} s to {ir['relative_residual']:.1e} "
      f"(to 1e-6: {ir['seconds_to_1e6']:.3f} s in {ir['steps_to_1e6']} steps; "
      f"to 1e-10: {ir['seconds_to_1e10']:.3f} s in {ir['steps_to_1e10']} steps); "
      f"sparse Cholesky solve of the same block {ir['reference_solve_seconds']:.3f} s "
      f"(factorisation {ir['reference_factor_seconds']:.1f} s, excluded): "
      f"PSC-IR / Cholesky = {ir['solve_seconds'] / ir['reference_solve_seconds']:.2f}.")
