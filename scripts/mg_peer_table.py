"""Renders scripts/bench-mg-peer.sh's JSON lines as markdown: MDof/s of the C peer and of
every tensorfem variant per cycle and number of right-hand sides, the ratio to the peer,
and each solver's time per column with 64 columns against its time with one."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def key(r):
    return (r["cycle"], r["nrhs"])


peer = {key(r): r for r in rows if r["solver"] == "peer"}
print("| cycle | rhs | solver | cycles | time s | MDof/s | × peer | max relative residual |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    p = peer.get(key(r))
    if r["solver"] == "peer":
        name, cycles, seconds, relres = "C + OpenMP peer", r["iters"], r["solve_s"], r["relres"]
    else:
        name, cycles, seconds, relres = r["variant"], r["iterations"], r["seconds"], r["relative_residual"]
    ratio = f"{r['mdofs'] / p['mdofs']:.2f}×" if p else "-"
    print(f"| {r['cycle']} | {r['nrhs']} | {name} | {cycles} | {seconds:.3f} | {r['mdofs']:.1f} | {ratio} | {relres:.1e} |")

print()
print("Time per column, 64 columns against 1 (≤ 0.5 asked):")
print()
print("| cycle | solver | s per column, 1 rhs | s per column, 64 rhs | ratio |")
print("|---|---|---|---|---|")
by = {}
for r in rows:
    name = "C + OpenMP peer" if r["solver"] == "peer" else r["variant"]
    seconds = r["solve_s"] if r["solver"] == "peer" else r["seconds"]
    by.setdefault((r["cycle"], name), {})[r["nrhs"]] = seconds / r["nrhs"]
for (cycle, name), t in by.items():
    if 1 in t and 64 in t:
        print(f"| {cycle} | {name} | {t[1]:.4f} | {t[64]:.4f} | {t[64] / t[1]:.2f} |")
