"""Renders a bench-psc JSON-lines file of scripts/bench-psc-methods.sh as a markdown table."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| method | h | h0 | precision | solve | set-up s | operators MiB | peak memory GiB "
      "| solve s (64 rhs) | IR steps | CG iterations | GFLOP/s (counted) | % of GEMM peak "
      "| rel. residual | rel. L2 error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
methods = [r for r in rows if r.get("reference_solve_seconds") is None]
against = [r for r in rows if r.get("reference_solve_seconds") is not None]
for r in methods:
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

if against:
    print()
    print("| method | h | precision | solve | solve s (64 rhs, best) | median | IR steps "
          "| rel. residual | sparse Cholesky solve s (best) | median | factorisation s "
          "| Cholesky rel. residual | Cholesky time / method time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in against:
        steps = r["refine_steps"]
        mode = "alone" if steps is None else "PSC-IR"
        print(f"| {r['method']} | 1/{r['n']} | {r['precision']} | {mode} "
              f"| {r['solve_seconds']:.3f} | {r['solve_seconds_median']:.3f} "
              f"| {'' if steps is None else steps} | {r['relative_residual']:.1e} "
              f"| {r['reference_solve_seconds']:.3f} | {r['reference_solve_seconds_median']:.3f} "
              f"| {r['reference_factor_seconds']:.2f} | {r['reference_relative_residual']:.1e} "
              f"| {r['reference_solve_seconds'] / r['solve_seconds']:.2f} |")
