"""Renders a bench-mg JSON-lines file (scripts/bench-mg-table.sh) as a markdown table."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| dim | nodes | levels | variant | schedule (fine → coarse) | IR iter. | time to solution s | s / iter. "
      "| MDof/s | GB/s moved | % of triad (in run) | speedup vs D_MG | f64 residual | L2 error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    speedup = f"{r['speedup_vs_d_mg']:.2f}×" if r.get("speedup_vs_d_mg") else "-"
    print(f"| {r['dim']}D | {r['n'] + 1}^{r['dim']} | {r['levels']} | {r['variant']} | {r['schedule']} "
          f"| {r['iterations']} | {r['seconds']:.2f} | {r['seconds_per_iteration']:.3f} | {r['mdofs']:.2f} "
          f"| {r['gbs']:.1f} | {100 * r['triad_fraction']:.0f}% ({r['triad_gbs']:.0f} GB/s) | {speedup} "
          f"| {r['residual']:.1e} | {'-' if r.get('l2_error') is None else format(r['l2_error'], '.2e')} |")
