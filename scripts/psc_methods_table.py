"""Renders a bench-psc JSON-lines file of scripts/bench-psc-methods.sh as a markdown table."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| method | h | h0 | precision | solve | set-up s | operators MiB | peak memory GiB "
      "| solve s (64 rhs) | IR steps | CG iterations | GFLOP/s (counted) | % of GEMM peak "
      "| rel. residual | rel. L2 error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    steps = r["refine_steps"]
    mode = "alone" if steps is None else "PSC-IR"
    cg = "" if r["cg_iterations"] is None else str(r["cg_iterations"])
    peak = r["peak_memory_bytes"]
    peak = "" if peak is None else f"{peak / 2**30:.2f}"
    print(f"| {r['method']} | 1/{r['n']} | 1/{r['n0']} | {r['precision']} | {mode} "
          f"| {r['setup_seconds']:.1f} | {r['operator_bytes'] / 2**20:.0f} | {peak} "
          f"| {r['solve_seconds']:.2f} | {'' if steps is None else steps} | {cg} "
          f"| {r['gflops_counted']:.1f} | {100 * r['gemm_peak_fraction_counted']:.0f}% "
          f"| {r['relative_residual']:.1e} | {r['l2_error']:.1e} |")
