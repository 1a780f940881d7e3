"""Judges of the busbw comparison in scripts/gpu-test.sh (section sweep):
collbench against NCCL's benchmark at 64 MiB and up, from the results files
the section writes under its work folder W (collbench's rows, and NCCL's
benchmark's logs read by `collbench baseline make`).

  busbwcmp.py checked W     both tools checking: W/cbref-C-K.json against
                            W/nref-C-K.json, medians of the passes within 1%
                            (or inside NCCL's range), and the one sweep's row
                            (W/sweep.json) within 1% of every pass's range.
                            Writes W/sixfail.json; its last line names the
                            collectives with a row beyond ("again: C ...").
  busbwcmp.py unchecked W   the rows of W/sixfail.json again, without either
                            tool's check (W/nocheck-cb-C-K.json,
                            W/nocheck-nref-C-K.json): within 1% there or not.
                            Writes W/longfail.json, the rows beyond there; its
                            last line names their collectives, each with its
                            largest such size ("long: C:SIZE ...").
  busbwcmp.py long W        the rows of W/longfail.json on long timed loops
                            (W/long-cb-C-K.json, W/long-nref-C-K.json, -n 200,
                            neither checking) against the loops of 20 without
                            the checks: within 1% there or not, and each tool's
                            cost per timed loop, from its times at 20 and 200.

Each exits 1 where a row fails.
"""
import glob
import json
import statistics
import sys

SIX = ["allreduce", "allgather", "reduce-scatter", "broadcast", "sendrecv", "alltoall"]
JUDGED_FROM = 64 << 20


def npass(path):
    """The pass number of a file named ...-C-K.json."""
    return int(path.rsplit("-", 1)[1].split(".")[0])


def busbw(paths, coll, key="busbw_gbps"):
    """Each size's out-of-place busbw of coll from 64 MiB up (or the field
    key of its row half), in the files' order; a file that cannot be read
    gives nothing. Where busbw is 0 (one rank: allreduce, allgather,
    reduce-scatter and alltoall move nothing between GPUs, and both tools
    give 0), the row's algbw stands in: both tools scale algbw by the same
    factor, so the two give the same ratio where both are defined."""
    out = {}
    for p in paths:
        try:
            with open(p) as f:
                rows = json.load(f)["results"]
        except (OSError, ValueError, KeyError):
            continue
        for r in rows:
            if r.get("collective") == coll and r.get("size_bytes", 0) >= JUDGED_FROM and r.get("out_of_place"):
                half = r["out_of_place"]
                v = half[key]
                if key == "busbw_gbps" and not v:
                    v = half.get("algbw_gbps", 0)
                out.setdefault(r["size_bytes"], []).append(v)
    return out


def step_before(w, name, out):
    """The rows of W/NAME (written by the step before), or None, said,
    where that step wrote none."""
    try:
        with open(f"{w}/{name}") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"  FAILS: {name} of the step before cannot be read ({e.strerror if isinstance(e, OSError) else e})", file=out)
        return None


def passes(w, prefix, coll, key="busbw_gbps"):
    return busbw(sorted(glob.glob(f"{w}/{prefix}-{coll}-*.json"), key=npass), coll, key)


def off(v, lo, hi):
    """How far v lies outside [lo, hi], in percent (0 inside)."""
    return (v / hi - 1) * 100 if v > hi else (v / lo - 1) * 100 if v < lo else 0.0


def checked(w, out=sys.stdout):
    worst, bad, again, n = 0.0, [], [], 0
    # medians: the failing rows whose only fault is the medians' gap (for
    # the judgement without either tool's check)
    medians = []
    for c in SIX:
        s = busbw([w + "/sweep.json"], c)
        a, ref = passes(w, "cbref", c), passes(w, "nref", c)
        for size in sorted(set(s) | set(a) | set(ref)):
            r, y = ref.get(size, []), a.get(size, [])
            if size not in s or len(y) < 2 or len(r) < 2:
                bad.append(f"{c} {size >> 20} MiB: rows are missing (sweep {size in s}, collbench {len(y)} passes, NCCL's benchmark {len(r)})")
                again += [c] if c not in again else []
                continue
            n += 1
            mr, my = statistics.median(r), statistics.median(y)
            d = (my / mr - 1) * 100
            inside = min(r) <= my <= max(r)
            span = r + y
            dx = off(s[size][0], min(span), max(span))
            worst = max(worst, 0.0 if inside else abs(d))
            line = (f"{c} {size >> 20} MiB: collbench {my:.1f} ({d:+.1f}%), NCCL's benchmark {mr:.1f} GB/s, medians of {len(y)} and {len(r)} passes "
                    f"(NCCL's {min(r):.1f}-{max(r):.1f}, collbench's {min(y):.1f}-{max(y):.1f}); sweep {s[size][0]:.1f} ({dx:+.1f}% outside them)")
            if (abs(d) > 1.0 and not inside) or abs(dx) > 1.0:
                # A failing row carries every pass, in the order each tool ran.
                line += ("; passes: NCCL's " + " ".join(f"{v:.1f}" for v in r)
                         + ", collbench's " + " ".join(f"{v:.1f}" for v in y))
                bad.append(line)
                again += [c] if c not in again else []
                if abs(dx) <= 1.0:
                    medians.append([c, size])
            print(("  " if abs(d) <= 1.0 or inside else "  beyond 1%: ") + line, file=out)
    print(f"busbw at 64 MiB and up: {n} rows; the farthest collbench's median from NCCL's, outside NCCL's own range: {worst:.2f}%; {len(bad)} rows fail", file=out)
    for b in bad:
        print("  FAILS:", b, file=out)
    print("again:", " ".join(again), file=out)
    with open(w + "/sixfail.json", "w") as f:
        json.dump({"rows": medians, "all": len(medians) == len(bad)}, f)
    return not bad


def pair(w, pre, c, size, what, out):
    """The busbw passes of NCCL's benchmark (W/PRE-nref-C-K.json) and of
    collbench (W/PRE-cb-C-K.json) at one size, or None, said as FAILS WHAT,
    where either tool has fewer than 2."""
    ref, cb = passes(w, pre + "-nref", c).get(size, []), passes(w, pre + "-cb", c).get(size, [])
    if len(ref) < 2 or len(cb) < 2:
        print(f"  FAILS {what}: {c} {size >> 20} MiB: passes missing (collbench {len(cb)}, NCCL's benchmark {len(ref)})", file=out)
        return None
    return ref, cb


def gap(ref, cb):
    """The medians of NCCL's benchmark's and collbench's passes, collbench's
    gap in percent, whether that is within 1% (or inside NCCL's range), and
    the passes and range as words."""
    m, y = statistics.median(ref), statistics.median(cb)
    d = (y / m - 1) * 100
    ok = abs(d) <= 1.0 or min(ref) <= y <= max(ref)
    words = (f"collbench {y:.1f} ({d:+.1f}%), NCCL's benchmark {m:.1f} GB/s, medians of {len(cb)} and {len(ref)} passes "
             f"(NCCL's {min(ref):.1f}-{max(ref):.1f})")
    listed = "passes: NCCL's " + " ".join(f"{v:.1f}" for v in ref) + ", collbench's " + " ".join(f"{v:.1f}" for v in cb)
    return ok, words, listed


def unchecked(w, out=sys.stdout):
    fail = step_before(w, "sixfail.json", out)
    if fail is None:
        return False
    ok = fail["all"]
    if not ok:
        print("  rows beyond 1% for another reason than the medians' gap: not judged again", file=out)
    longer = []  # the rows beyond without the checks too: judged on long loops
    for c, size in fail["rows"]:
        got = pair(w, "nocheck", c, size, "without the checks", out)
        if got is None:
            ok = False
            continue
        ref0, cb0 = got
        ref1, cb1 = passes(w, "nref", c).get(size, []), passes(w, "cbref", c).get(size, [])

        def cost(a, b):
            return f"{(statistics.median(a) / statistics.median(b) - 1) * 100:+.1f}%" if a and b else "unknown (no checked passes)"
        within, words, listed = gap(ref0, cb0)
        if not within:
            longer.append([c, size])
        print(f"  {'within' if within else 'beyond 1%'} without the checks: {c} {size >> 20} MiB: {words}; "
              f"each tool's check moved its median: NCCL's benchmark {cost(ref1, ref0)}, collbench {cost(cb1, cb0)}; {listed}", file=out)
    with open(w + "/longfail.json", "w") as f:
        json.dump({"rows": longer, "all": ok}, f)
    top = {}
    for c, size in longer:
        top[c] = max(top.get(c, 0), size)
    print("long:", " ".join(f"{c}:{size >> 20}M" for c, size in top.items()), file=out)
    return ok and not longer


SHORT, LONG = 20, 200  # the timed loops' iterations: the passes', the long ones'


def per_loop(short, long):
    """A tool's cost per timed loop in us, from its median times per
    operation (us) over loops of SHORT and LONG operations: a loop of n
    takes n*t + c, so its time per operation is t + c/n."""
    return (statistics.median(short) - statistics.median(long)) / (1 / SHORT - 1 / LONG)


def long(w, out=sys.stdout):
    """Judges the rows beyond 1% without the checks once more on timed
    loops of LONG operations: a cost that a tool pays once per timed loop
    (its start, its end) weighs ten times less there, and what is left is
    the collective's own time. 4x H200, build beb5e38: broadcast 64 MiB
    without the checks, NCCL's benchmark 210.0-211.4 us an operation in
    loops of 20 and 206.6-207.5 in loops of 200, collbench 206.8-208.3 and
    206.8-207.5."""
    fail = step_before(w, "longfail.json", out)
    if fail is None:
        return False
    ok = fail["all"]
    for c, size in fail["rows"]:
        got = pair(w, "long", c, size, "on long loops", out)
        if got is None:
            ok = False
            continue
        within, words, listed = gap(*got)
        ok = ok and within
        loops = []
        for name, tool in (("NCCL's benchmark", "nref"), ("collbench", "cb")):
            ts, tl = (passes(w, f"{pre}-{tool}", c, "time_us").get(size, []) for pre in ("nocheck", "long"))
            loops.append(f"{name} {per_loop(ts, tl):.0f} us" if ts and tl else f"{name} unknown")
        print(f"  {'within' if within else 'FAILS'} on loops of {LONG}: {c} {size >> 20} MiB: {words}; "
              f"each tool's cost per timed loop, from its times in loops of {SHORT} and {LONG}: " + ", ".join(loops) + f"; {listed}", file=out)
    return ok


def main(argv):
    if len(argv) >= 3 and argv[1] == "checked":
        return 0 if checked(argv[2]) else 1
    if len(argv) >= 3 and argv[1] == "unchecked":
        return 0 if unchecked(argv[2]) else 1
    if len(argv) >= 3 and argv[1] == "long":
        return 0 if long(argv[2]) else 1
    print("usage: busbwcmp.py checked W | unchecked W | long W", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
