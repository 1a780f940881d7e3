#!/usr/bin/env python3
"""parity-report: compares collbench with NCCL's benchmark from the files
scripts/parity.sh leaves in DIR (ref-COLL-PASS.txt, cb-COLL-PASS.json).
Prints, per collective and size, the median out-of-place time over every
cycle of every pass for each tool and their difference; then the same
within each of the two latency clusters; then each pass's median. Each
size is split into its two clusters on its own (two-means over both tools' times at that size; one
cluster where the two means are less than 10% apart), so that a size whose
fast times sit near another size's slow ones is split right. Writes
DIR/parity.json and ends with "PARITY OK" or "PARITY FAIL <collectives>"
(medians within 5%, shown, not a verdict to gate on), then "WITHIN-BAND OK"
or "WITHIN-BAND FAIL <...>": in each cluster, the median over sizes of the
difference at each size where both tools have at least MIN_BAND times in
that cluster is within 5% (a difference that holds across sizes, not one
size's noise; the worst single size is printed beside it). The median of
times that fall in two clusters lies between them whenever the slow share
is near one half, and then moves by up to the gap between the clusters
with a small change in that share: the second verdict holds the tools to
the same standard without that. A collective with no size comparable in
either cluster fails, with the reason.
Several DIRs (runs of parity.sh on the same machine) are pooled: their
passes count together, named DIRINDEX.PASS, and the pooled result goes to
the first DIR's parity-pooled.json.
--pair A,B compares two other variants of parity.sh the same way, for
example --pair ref,ref2: NCCL's benchmark against itself, run alternately
like the two tools, which shows how far apart two identical programs land
on this machine (results then go to parity-A-B.json).
Usage: parity-report.py [--pair A,B] DIR [DIR...] "COLLECTIVES" """
import glob, json, os, statistics as st, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paritylib import ref_cycles, cb_cycles, two_means, pct  # noqa: E402

MIN_BAND = 10  # times each tool needs in a cluster at a size for it to be compared


def split_at(xs):
    """The value between xs's two clusters, or infinity where they are
    less than 10% apart (one cluster). Times beyond twice the tenth
    percentile (stalls of tens of µs) are clipped there first, so that a
    few of them cannot pull the split into the fast cluster."""
    cap = 2 * sorted(xs)[len(xs) // 10]
    xs = [min(x, cap) for x in xs]
    mid = two_means(xs)
    lo, hi = [x for x in xs if x < mid], [x for x in xs if x >= mid]
    if not lo or not hi or st.mean(hi) < 1.1 * st.mean(lo):
        return float("inf")
    return mid

args = sys.argv[1:]
A, B = "ref", "cb"
if args[:1] == ["--pair"] and len(args) > 1 and len(args[1].split(",")) == 2:
    A, B = args[1].split(",")
    args = args[2:]
if len(args) < 2 or not all(os.path.isdir(d) for d in args[:-1]):
    print('usage: parity-report.py [--pair A,B] DIR [DIR...] "COLLECTIVES" (DIR: an output directory of scripts/parity.sh)', file=sys.stderr)
    sys.exit(2)
dirs, colls = args[:-1], args[-1].split()
w = dirs[0]
result, worst, states, band_worst, band_diffs = {}, {}, {}, {}, {}
for c in colls:
    ref, cb, passes = {}, {}, []
    # NCCL's benchmark's variants leave text (.txt), collbench's JSON.
    for tool, into in ((A, ref), (B, cb)):
        load, ext = (ref_cycles, "txt") if tool.startswith("ref") else (cb_cycles, "json")
        for i, p in sorted((i, p) for i, dd in enumerate(dirs, 1) for p in glob.glob(f"{dd}/{tool}-{c}-[0-9]*.{ext}")):
            d = load(p)
            for s, xs in d.items():
                into.setdefault(s, []).extend(xs)
            allx = [x for xs in d.values() for x in xs]
            if allx:
                name = p.rsplit("-", 1)[1].split(".")[0]
                passes.append((tool, f"{i}.{name}" if len(dirs) > 1 else name, st.median(allx)))
    sizes = sorted(set(ref) & set(cb))
    if not sizes:
        # Why: which tool left nothing, and how its runs ended (parity.sh
        # writes runs.txt, and collbench's stderr to .err files).
        why = []
        for tool, got in ((A, ref), (B, cb)):
            if not got:
                files = sorted(p for dd in dirs for p in glob.glob(f"{dd}/{tool}-{c}-[0-9]*.*"))
                tail = ""
                for p in files[-2:]:
                    lines = [x.strip() for x in open(p, errors="replace") if x.strip()]
                    tail += f"; {os.path.basename(p)} ends: {lines[-1][:160] if lines else '(empty)'}"
                why.append(f"{tool}: no times in {len(files)} files{tail}")
        for dd in dirs:
            if os.path.exists(f"{dd}/runs.txt"):
                why += [x.strip() for x in open(f"{dd}/runs.txt") if f" {c} " in x and not x.strip().endswith("exit 0")]
        print(f"\n{c}: no results ({'; '.join(why) or 'no size in common'})")
        worst[c] = float("inf")  # nothing to compare is no parity
        continue
    split = split_at([x for s in sizes for x in ref[s] + cb[s]])
    print(f"\n{c}: out-of-place time (us), median over every cycle of every pass; clusters split per size"
          f" (over all sizes at {split:.2f} us)")
    print(f"{'size':>6} {A:>9} {B:>9} {'diff':>7} | {'fast: ' + A:>9} {B:>6} {'diff':>7} | {'slow: ' + A:>9} {B:>6} {'diff':>7} | slow share {A}/{B}")
    rows = []
    for s in sizes:
        r, k = st.median(ref[s]), st.median(cb[s])
        cut = split_at(ref[s] + cb[s])
        rf, kf = [x for x in ref[s] if x < cut], [x for x in cb[s] if x < cut]
        rs, ks = [x for x in ref[s] if x >= cut], [x for x in cb[s] if x >= cut]
        fast = (st.median(rf), st.median(kf)) if rf and kf else None
        slow = (st.median(rs), st.median(ks)) if rs and ks else None
        worst[c] = max(worst.get(c, -1e9), pct(r, k))
        for band, a, b in (("fast", rf, kf), ("slow", rs, ks)):
            if len(a) >= MIN_BAND and len(b) >= MIN_BAND:
                d = pct(st.median(a), st.median(b))
                band_diffs.setdefault(c, {}).setdefault(band, []).append((d, s))
                if d > band_worst.get(c, (-1e9,))[0]:
                    band_worst[c] = (d, band, s)
        cell = lambda t: f"{t[0]:9.2f} {t[1]:6.2f} {pct(*t):+6.1f}%" if t else f"{'-':>9} {'-':>6} {'-':>7}"
        print(f"{s:>6} {r:9.2f} {k:9.2f} {pct(r, k):+6.1f}% | {cell(fast)} | {cell(slow)} | {len(rs) / len(ref[s]):.2f}/{len(ks) / len(cb[s]):.2f}")
        rows.append({"size": s, "ref_us": r, "collbench_us": k, "ref_n": len(ref[s]), "collbench_n": len(cb[s]),
                     "split_us": cut if cut != float("inf") else None,
                     "fast": fast, "slow": slow, "slow_share": [len(rs) / len(ref[s]), len(ks) / len(cb[s])]})
    allr = [x for s in sizes for x in ref[s]]
    allk = [x for s in sizes for x in cb[s]]
    fr, fk = [x for x in allr if x < split], [x for x in allk if x < split]
    sr, sk = [x for x in allr if x >= split], [x for x in allk if x >= split]
    states[c] = {"fast": [st.median(fr), st.median(fk)] if fr and fk else None,
                 "slow": [st.median(sr), st.median(sk)] if sr and sk else None}
    print("all sizes: fast " + (f"{states[c]['fast'][0]:.2f} vs {states[c]['fast'][1]:.2f} ({pct(*states[c]['fast']):+.1f}%)" if states[c]["fast"] else "-")
          + ", slow " + (f"{states[c]['slow'][0]:.2f} vs {states[c]['slow'][1]:.2f} ({pct(*states[c]['slow']):+.1f}%)" if states[c]["slow"] else "-"))
    print("per pass (tool, pass, median over sizes and cycles): "
          + "  ".join(f"{t}#{p} {m:.2f}" for t, p, m in passes))
    result[c] = {"split_us": split if split != float("inf") else None, "rows": rows, "states": states[c], "passes": passes,
                 "band_worst": band_worst.get(c), "band_diffs": band_diffs.get(c)}
name = "parity" if (A, B) == ("ref", "cb") else f"parity-{A}-{B}"
json.dump(result, open(f"{w}/{name}.json" if len(dirs) == 1 else f"{w}/{name}-pooled.json", "w"), indent=1)
print(f"\nworst median difference per collective (positive = {B} slower than {A}):",
      {c: f"{v:+.1f}%" if v != float("inf") else "no results" for c, v in worst.items()})
bad = [c for c, v in worst.items() if v > 5]
tag = "PARITY" if (A, B) == ("ref", "cb") else f"SAME-PROGRAM {A}/{B}"
print(tag, "FAIL " + ",".join(bad) if bad else "OK (every size within 5% or faster)")
# Per collective and cluster: the median over sizes of the difference.
band_median = {c: {band: st.median(d for d, _ in ds) for band, ds in band_diffs.get(c, {}).items()} for c in colls}
print(f"worst single size within one cluster (positive = {B} slower):",
      {c: f"{v[0]:+.1f}% ({v[1]}, {v[2]} B)" if v else "-" for c, v in ((c, band_worst.get(c)) for c in colls)})
print(f"median over sizes within each cluster (positive = {B} slower; sizes compared):",
      {c: ", ".join(f"{band} {m:+.1f}% ({len(band_diffs[c][band])})" for band, m in sorted(band_median[c].items()))
       or f"no size with {MIN_BAND} times of each tool in one cluster" for c in colls})
# Collectives with times but no size comparable in either cluster: more
# passes may give one (parity.sh runs them again).
print("unjudged:", " ".join(c for c in colls if c in result and not band_median[c]))
bad = [c for c in colls if not band_median[c] or max(band_median[c].values()) > 5]
print("WITHIN-BAND" if tag == "PARITY" else f"{tag} WITHIN-BAND",
      "FAIL " + ",".join(bad) if bad else "OK (in each cluster, the median over sizes within 5% or faster)")
