#!/usr/bin/env python3
"""parity-report: compares collbench with NCCL's benchmark from the files
scripts/parity-cycles.sh leaves in DIR (ref-COLL-PASS.txt, cb-COLL-PASS.json,
and optional .probe files). Prints, per collective and size, the median
out-of-place time over every cycle of every pass for each tool and their
difference; then the same within each of the two latency clusters; then the
copy-probe state next to each pass's median. Writes DIR/parity.json and ends
with "PARITY OK" or "PARITY FAIL <collectives>" (medians within 5%).
Several DIRs (runs of parity-cycles.sh on the same machine) are pooled: their
passes count together, named DIRINDEX.PASS, and the pooled result goes to
the first DIR's parity-pooled.json.
Usage: parity-report.py DIR [DIR...] "COLLECTIVES" """
import glob, json, os, statistics as st, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paritylib import ref_cycles, cb_cycles, two_means, pct  # noqa: E402

if len(sys.argv) < 3 or not all(os.path.isdir(d) for d in sys.argv[1:-1]):
    print('usage: parity-report.py DIR [DIR...] "COLLECTIVES" (DIR: an output directory of scripts/parity-cycles.sh)', file=sys.stderr)
    sys.exit(2)
dirs, colls = sys.argv[1:-1], sys.argv[-1].split()
w = dirs[0]
result, worst, states = {}, {}, {}
for c in colls:
    ref, cb, passes = {}, {}, []
    for tool, load, ext in (("ref", ref_cycles, "txt"), ("cb", cb_cycles, "json")):
        for i, p in sorted((i, p) for i, dd in enumerate(dirs, 1) for p in glob.glob(f"{dd}/{tool}-{c}-[0-9]*.{ext}")):
            d = load(p)
            for s, xs in d.items():
                (ref if tool == "ref" else cb).setdefault(s, []).extend(xs)
            probe = p.rsplit(".", 1)[0] + ".probe"
            allx = [x for xs in d.values() for x in xs]
            if allx:
                name = p.rsplit("-", 1)[1].split(".")[0]
                passes.append((tool, f"{i}.{name}" if len(dirs) > 1 else name, st.median(allx),
                               float(open(probe).read()) if os.path.exists(probe) and open(probe).read().strip() else None))
    sizes = sorted(set(ref) & set(cb))
    if not sizes:
        print(f"\n{c}: no results")
        worst[c] = float("inf")  # nothing to compare is no parity
        continue
    split = two_means([x for s in sizes for x in ref[s] + cb[s]])
    print(f"\n{c}: out-of-place time (us), median over every cycle of every pass; clusters split at {split:.2f} us")
    print(f"{'size':>6} {'reference':>9} {'collbench':>9} {'diff':>7} | {'fast: ref':>9} {'cb':>6} {'diff':>7} | {'slow: ref':>9} {'cb':>6} {'diff':>7} | slow share ref/cb")
    rows = []
    for s in sizes:
        r, k = st.median(ref[s]), st.median(cb[s])
        rf, kf = [x for x in ref[s] if x < split], [x for x in cb[s] if x < split]
        rs, ks = [x for x in ref[s] if x >= split], [x for x in cb[s] if x >= split]
        fast = (st.median(rf), st.median(kf)) if rf and kf else None
        slow = (st.median(rs), st.median(ks)) if rs and ks else None
        worst[c] = max(worst.get(c, -1e9), pct(r, k))
        cell = lambda t: f"{t[0]:9.2f} {t[1]:6.2f} {pct(*t):+6.1f}%" if t else f"{'-':>9} {'-':>6} {'-':>7}"
        print(f"{s:>6} {r:9.2f} {k:9.2f} {pct(r, k):+6.1f}% | {cell(fast)} | {cell(slow)} | {len(rs) / len(ref[s]):.2f}/{len(ks) / len(cb[s]):.2f}")
        rows.append({"size": s, "ref_us": r, "collbench_us": k, "ref_n": len(ref[s]), "collbench_n": len(cb[s]),
                     "fast": fast, "slow": slow, "slow_share": [len(rs) / len(ref[s]), len(ks) / len(cb[s])]})
    allr = [x for s in sizes for x in ref[s]]
    allk = [x for s in sizes for x in cb[s]]
    fr, fk = [x for x in allr if x < split], [x for x in allk if x < split]
    sr, sk = [x for x in allr if x >= split], [x for x in allk if x >= split]
    states[c] = {"fast": [st.median(fr), st.median(fk)] if fr and fk else None,
                 "slow": [st.median(sr), st.median(sk)] if sr and sk else None}
    print("all sizes: fast " + (f"{states[c]['fast'][0]:.2f} vs {states[c]['fast'][1]:.2f} ({pct(*states[c]['fast']):+.1f}%)" if states[c]["fast"] else "-")
          + ", slow " + (f"{states[c]['slow'][0]:.2f} vs {states[c]['slow'][1]:.2f} ({pct(*states[c]['slow']):+.1f}%)" if states[c]["slow"] else "-"))
    print("per pass (tool, pass, median over sizes and cycles, copy probe before it): "
          + "  ".join(f"{t}#{p} {m:.2f}" + (f" [{q:.1f}]" if q else "") for t, p, m, q in passes))
    result[c] = {"split_us": split, "rows": rows, "states": states[c], "passes": passes}
json.dump(result, open(f"{w}/parity.json" if len(dirs) == 1 else f"{w}/parity-pooled.json", "w"), indent=1)
print("\nworst median difference per collective (positive = collbench slower):",
      {c: f"{v:+.1f}%" if v != float("inf") else "no results" for c, v in worst.items()})
bad = [c for c, v in worst.items() if v > 5]
print("PARITY", "FAIL " + ",".join(bad) if bad else "OK (every size within 5% or faster)")
