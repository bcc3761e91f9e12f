"""Renders a bench-stokes JSON-lines file (scripts/bench-stokes-table.sh) as a markdown
table: per mesh, the preconditioners side by side, with time per element per solve and
the ratio to the published single-core Vanka figure (0.03 ms per element, SPEC §4.3)."""
import json
import sys

PUBLISHED_VANKA_MS_PER_ELEMENT = 0.03

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| elements | precond | precision | FGMRES iter. | solve s | ms / iter. | ms / element / solve "
      "| published 0.03 ÷ this | set-up s | rel. residual | velocity L2 error | pressure L2 error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    speedup = PUBLISHED_VANKA_MS_PER_ELEMENT / r["ms_per_element"]
    print(f"| {r['n']}² | {r['precond']} | {r['precision']} | {r['iterations']} | {r['seconds']:.2f} "
          f"| {r['ms_per_iteration']:.1f} | {r['ms_per_element']:.4f} | {speedup:.2f}× "
          f"| {r['setup_seconds']:.2f} | {r['relative_residual']:.1e} | {r['velocity_l2_error']:.3e} "
          f"| {r['pressure_l2_error']:.3e} |")
triad = max(r["triad_gbs"] for r in rows)
print(f"\nf64 operator product (FGMRES): {min(r['matvec_gbs'] for r in rows):.1f}–"
      f"{max(r['matvec_gbs'] for r in rows):.1f} GB/s; triad bandwidth up to {triad:.1f} GB/s in the same runs.")
