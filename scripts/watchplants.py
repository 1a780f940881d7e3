"""watchplants: judges scripts/watch-plants.sh's episodes and pools them.

  watchplants.py judge WORK FIRST LAST OFF_S NGPU DEST
      judges jobs FIRST..LAST in WORK (each job's collector record
      watch-J.json and its planter's plants-J.jsonl), prints a line per
      episode and the table, writes the rows to DEST.
  watchplants.py table ROWS.json [ROWS.json ...]
      pools the rows of several calls (a lent machine runs one command for
      10 minutes: the episodes of a whole run come in parts) and prints
      the table.

Both exit 0 when there are rows and every episode passed, 1 otherwise.
An episode passes when its victim is named, with the plant's cause,
while the plant runs (and so within 15 s), stays named while it runs, and
no other rank is named from the plant's start to the next plant's. A
peer-to-peer copy names the GPU it copies from by its NVLink counters;
the GPU it copies to may be named beside it, no other.
"""
import datetime
import json
import sys

CAUSE = {"sleep": "issued late", "p2p": "its NVLinks carry traffic beyond the job's NCCL operations"}
GPU_LATE = "its GPU started the kernel late"


def stamp(f):
    """A finding's time, epoch seconds."""
    return datetime.datetime.fromisoformat(f["at"].replace("Z", "+00:00")).timestamp()


def judge_episode(findings, e, off, n, job):
    """The row of one episode e (the planter's line) against a record's findings."""
    lo, hi, v = e["start"], e["stop"], e["victim"]
    p2p = e["plant"] == "p2p"
    ends = {v, (v + 1) % n} if p2p else {v}
    named = [f for f in findings if not f.get("cleared") and f.get("link") is None
             and (f.get("nvlink") is not None) == p2p and lo <= stamp(f) <= hi]
    hit = [f for f in named if f["rank"] == v]
    others = [f for f in findings if not f.get("cleared") and f["rank"] not in ends and lo <= stamp(f) <= hi + off]
    at = stamp(hit[0]) - lo if hit else None
    flap = bool(hit) and any(f.get("cleared") and f["rank"] == v and stamp(hit[0]) < stamp(f) < hi for f in findings)
    want = CAUSE.get(e["plant"], GPU_LATE)
    ok = at is not None and at <= 15 and not others and not flap and hit[0].get("cause") == want
    return dict(e, job=job, named_s=at, cause=hit[0].get("cause") if hit else None,
                late_us=hit[0].get("late_us") if hit else None, others=len(others), cleared_while_on=flap, ok=ok)


def describe(r):
    """One line a person reads for a row."""
    when = "named after %.1f s" % r["named_s"] if r["named_s"] is not None else "NOT named"
    late = "%.0f" % r["late_us"] if r["late_us"] else "-"
    tail = ", cleared while it ran" if r["cleared_while_on"] else ""
    if r["named_s"] is not None and not r["ok"] and not r["others"] and not r["cleared_while_on"]:
        tail += ", cause %r" % r["cause"]
    return "job %d episode %2d %-7s GPU %d: %s, late %s us, %d others named%s" % (
        r["job"], r["episode"], r["plant"], r["victim"], when, late, r["others"], tail)


def judge(work, first, last, off, n, out=print):
    """Rows of jobs first..last in work; a job without its files is said and skipped."""
    rows = []
    for j in range(first, last + 1):
        try:
            with open("%s/watch-%d.json" % (work, j)) as f:
                rec = json.load(f)
            with open("%s/plants-%d.jsonl" % (work, j)) as f:
                eps = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            out("job %d: no record (%s)" % (j, e))
            continue
        for e in eps:
            r = judge_episode(rec["findings"], e, off, n, j)
            rows.append(r)
            out(describe(r))
        out("job %d: %s" % (j, json.dumps(rec["counts"])))
    return rows


def table(rows):
    """The table's lines: per plant, episodes passed, p50/p90 time to name, others, flaps."""
    per = {}
    for r in rows:
        per.setdefault(r["plant"], []).append(r)
    lines = ["| plant | episodes named within 15 s, nobody else | p50 / p90 time to name | others named | cleared while on |",
             "| --- | --- | --- | --- | --- |"]
    for p, rs in per.items():
        t = sorted(r["named_s"] for r in rs if r["named_s"] is not None)

        def q(f):
            return "%.1f" % t[min(len(t) - 1, int(f * len(t)))] if t else "-"
        lines.append("| %s | %d of %d | %s / %s s | %d | %d |" % (
            p, sum(r["ok"] for r in rs), len(rs), q(0.5), q(0.9), sum(r["others"] for r in rs), sum(r["cleared_while_on"] for r in rs)))
    return lines


def passed(rows):
    """Whether there are rows and every episode passed."""
    return bool(rows) and all(r["ok"] for r in rows)


def main(argv):
    if len(argv) == 8 and argv[1] == "judge":
        work, first, last, off, n, dest = argv[2], int(argv[3]), int(argv[4]), float(argv[5]), int(argv[6]), argv[7]
        rows = judge(work, first, last, off, n)
        with open(dest, "w") as f:
            json.dump(rows, f, indent=1)
    elif len(argv) >= 3 and argv[1] == "table":
        rows, seen = [], set()
        for p in argv[2:]:
            with open(p) as f:
                for r in json.load(f):
                    key = (r["job"], r["episode"])
                    if key in seen:
                        print("watchplants: %s: job %d episode %d is in two files: give each call's rows once" % (p, r["job"], r["episode"]))
                        return 2
                    seen.add(key)
                    rows.append(r)
        print("%d episodes from %d files" % (len(rows), len(argv) - 2))
    else:
        print(__doc__.strip().split("\n\n")[0])
        return 2
    print()
    print("\n".join(table(rows)))
    return 0 if passed(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
