"""Renders a bench-psc JSON-lines file (scripts/bench-psc-table.sh) as a markdown table."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
machine = next(r for r in rows if r.get("bench") == "machine")
print(f"Machine ceilings ({machine['threads']} threads): triad {machine['triad_gbs']:.1f} GB/s, "
      f"GEMM f64 {machine['gemm_gflops_f64']:.1f}, f32 {machine['gemm_gflops_f32']:.1f}, "
      + (f"TF32 {machine['gemm_gflops_tf32']:.1f}, " if "gemm_gflops_tf32" in machine else "")
      + f"f16 operands {machine['gemm_gflops_f16']:.1f} GFLOP/s\n")
print("| h | h0 | Nrhs | precision | set-up s | solve s | MDof/s | GFLOP/s (SPEC formula) | GFLOP/s (counted) "
      "| GEMM peak in run | % of peak (formula) | % of peak (counted) | operator GB/s | % of triad | rel. residual | rel. L2 error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r.get("bench") == "machine":
        continue
    setup = f"{r['setup_seconds']:.1f}" + (" (cache)" if r["setup_from_cache"] else "")
    print(f"| 1/{r['n']} | 1/{r['n0']} | {r['nrhs']} | {r['precision']} | {setup} | {r['solve_seconds']:.4f} "
          f"| {r['mdofs']:.1f} | {r['gflops']:.1f} | {r['gflops_counted']:.1f} | {r['gemm_peak_gflops']:.1f} "
          f"| {100 * r['gemm_peak_fraction']:.0f}% | {100 * r['gemm_peak_fraction_counted']:.0f}% | {r['operator_gbs']:.1f} | {100 * r['triad_fraction']:.0f}% "
          f"| {r['relative_residual']:.1e} | {r['l2_error']:.1e} |")
