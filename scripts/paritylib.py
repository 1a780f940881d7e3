"""paritylib: readers of the results the parity scripts leave behind, shared
by parity-report.py, parity-variants.py, parity-ab.sh and modes.sh.

NCCL's benchmark writes a text table, one line per size and cycle (-N);
collbench writes its JSON document, whose rows hold every cycle's time
(--cycles). Both readers return {size in bytes: [out-of-place time in us,
one per cycle]}; rows that move nothing (count 0) are left out."""
import json
import statistics as st


def ref_cycles(path):
    """Out-of-place times per size from NCCL's benchmark's output."""
    out = {}
    with open(path) as lines:
        text = lines.read()
    for line in text.splitlines():
        f = line.split()
        # size count type [redop] root time ...: the collectives without a
        # reduction (hypercube) leave the redop column blank.
        t = 4 if len(f) > 3 and f[3].lstrip("-").isdigit() else 5
        if len(f) >= t + 8 and f[0].isdigit() and f[1].isdigit() and int(f[1]) > 0:
            out.setdefault(int(f[0]), []).append(float(f[t]))
    return out


def cb_rows(path):
    """collbench's rows with an out-of-place half, by size; {} when the
    file is missing or not a whole document."""
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return {}
    return {r["size_bytes"]: r["out_of_place"] for r in d.get("results", [])
            if r.get("count", 0) > 0 and r.get("out_of_place")}


def cb_cycles(path):
    """Out-of-place times per size from collbench's JSON document."""
    return {s: h["cycles"]["times_us"] if h.get("cycles") else [h["time_us"]]
            for s, h in cb_rows(path).items()}


def cb_host(path):
    """collbench's host issue time per size (-C), where it was measured."""
    return {s: h["cpu_time_us"] for s, h in cb_rows(path).items() if h.get("cpu_time_us")}


def cycles(path):
    """The right reader for a file of either tool: .txt NCCL's, .json ours."""
    return ref_cycles(path) if path.endswith(".txt") else cb_cycles(path)


def first(per_size):
    """{size: first time}: the one time of a single-cycle run."""
    return {s: xs[0] for s, xs in per_size.items() if xs}


def two_means(xs):
    """The value between the two clusters of xs (1-D two-means)."""
    lo, hi = min(xs), max(xs)
    for _ in range(50):
        mid = (lo + hi) / 2
        a = [x for x in xs if x < mid] or [lo]
        b = [x for x in xs if x >= mid] or [hi]
        lo, hi = st.mean(a), st.mean(b)
    return (lo + hi) / 2


def pct(a, b):
    """How much b differs from a, in percent of a."""
    return (b - a) / a * 100
