#!/usr/bin/env python3
"""parity-variants: compares the variants of one scripts/parity-cycles.sh run
(VARIANTS, for example "ref cb cb-stdout cb-GOGC=off") by how much of their
time they spent in each of the host's two latency bands. Per collective the
cycle times of every variant are split at one common gap (two-means); per
variant it prints the share of cycles in the slow band, the median within
each band, the median overall, and each pass's slow share (in the order the
passes ran). A variant that changes which band a run lands in shows up in
the slow share; one that changes the cost of an operation, in the band
medians.
Usage: parity-variants.py DIR "COLLECTIVES" "VARIANTS" """
import glob, os, statistics as st, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paritylib import cycles, two_means  # noqa: E402


def passes(w, variant, coll):
    """[(pass, [times])] of one variant and collective, by pass number."""
    ext = "txt" if variant.startswith("ref") else "json"
    found = []
    for p in glob.glob(f"{w}/{variant}-{coll}-[0-9]*.{ext}"):
        n = p[len(f"{w}/{variant}-{coll}-"):-len(ext) - 1]
        xs = [x for ts in cycles(p).values() for x in ts]
        if n.isdigit() and xs:
            found.append((int(n), xs))
    return sorted(found)


def main():
    if len(sys.argv) != 4 or not os.path.isdir(sys.argv[1]):
        print('usage: parity-variants.py DIR "COLLECTIVES" "VARIANTS" (DIR: the output directory of scripts/parity-cycles.sh)', file=sys.stderr)
        sys.exit(2)
    w, colls, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
    med = lambda xs: f"{st.median(xs):6.2f}" if xs else f"{'-':>6}"
    for c in colls:
        data = {v: passes(w, v, c) for v in variants}
        every = [x for v in data for _, xs in data[v] for x in xs]
        if not every:
            print(f"\n{c}: no results")
            continue
        cut = two_means(every)
        print(f"\n{c}: out-of-place time (us) over every size and cycle; bands split at {cut:.2f} us")
        print(f"  {'variant':24} {'cycles':>6} {'slow':>5} {'fast':>6} {'slow':>6} {'all':>6}  slow share per pass")
        for v in variants:
            xs = [x for _, ts in data[v] for x in ts]
            if not xs:
                print(f"  {v:24} no results")
                continue
            fast, slow = [x for x in xs if x < cut], [x for x in xs if x >= cut]
            per = " ".join(f"#{n}:{sum(x >= cut for x in ts) / len(ts):.2f}" for n, ts in data[v])
            print(f"  {v:24} {len(xs):6d} {len(slow) / len(xs):5.2f} {med(fast)} {med(slow)} {med(xs)}  {per}")


if __name__ == "__main__":
    main()
