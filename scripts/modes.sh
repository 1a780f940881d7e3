#!/usr/bin/env bash
# Where small-message latency modes come from: runs NCCL's benchmark and
# collbench PASSES times each, alternating, for each collective in COLLS at
# 8 B - 64 KiB (out-of-place, 50 iterations, 10 warm-up) on GPUs 0 and 1, in
# the variants listed in VARIANTS:
#   ref      NCCL's benchmark, one thread per GPU (-t 2 -g 1)
#   ref-G    the same replaying a CUDA graph (-G 20)
#   cb       collbench, one process, one locked thread per GPU, with -C
#   cb-G     the same replaying a CUDA graph (--cuda-graph 20)
#   cb-L     collbench, one process per GPU (launch -n 2)
# While each process runs, its threads' CPUs are sampled (ps -L). Prints one
# line per process: mean time over the sizes, collbench's host issue time,
# and the CPUs of its busiest threads, so that a slow mode can be told apart
# as host-side (issue time follows it; graphs remove it) or device-side.
# BACKEND=cpu runs the collbench variants on the CPU backend (to try the
# script without GPUs).
#   COLLS="allreduce allgather" PASSES=6 scripts/modes.sh
set -u
cd "$(dirname "$0")/.."
. scripts/parity-env.sh
WORK=${WORK:-/tmp/collbench-modes}
PASSES=${PASSES:-6}
COLLS=${COLLS:-allreduce allgather}
VARIANTS=${VARIANTS:-"ref ref-G cb cb-G cb-L"}
mkdir -p "$WORK"; rm -f "$WORK"/*

# sample PID FILE: the threads of PID (and its children) every 0.2 s until
# it exits; FILE keeps the last sample taken while the process was timing.
sample() {
  local pid=$1 file=$2 tmp="$2.tmp"
  while kill -0 "$pid" 2>/dev/null; do
    pids=$(pgrep -P "$pid" | tr '\n' ,)"$pid"
    ps -L -o tid=,psr=,time=,pcpu=,comm= -p "$pids" > "$tmp" 2>/dev/null && [ -s "$tmp" ] && cp "$tmp" "$file"
    sleep 0.2
  done
  rm -f "$tmp"
}

run() { # run OUT CMD...: runs CMD in the background with sampling
  local out=$1; shift
  "$@" > "$out.txt" 2>&1 &
  local pid=$!
  sample "$pid" "$out.ps" &
  local sp=$!
  wait "$pid"; wait "$sp"
}

for pass in $(seq 1 "$PASSES"); do
  for c in $COLLS; do
    for v in $VARIANTS; do
      o="$WORK/$c.$v.$pass"
      case $v in
        ref) run "$o" ref_small "$c" ;;
        ref-G) run "$o" ref_small "$c" -G 20 ;;
        cb) run "$o" cb_small "$c" --mode out-of-place -C -o "$o.json" ;;
        cb-G) run "$o" cb_small "$c" --mode out-of-place --cuda-graph 20 -o "$o.json" ;;
        cb-L) run "$o" "$BIN" launch -n 2 -- "$c" --backend ${BACKEND:-nccl} --sizes 8:64K -n 50 -w 10 -q --mode out-of-place -C -o "$o.json" ;;
      esac
    done
  done
done

PYTHONPATH=scripts python3 - "$WORK" "$COLLS" "$VARIANTS" <<'PY'
import glob, statistics, sys, os
from paritylib import ref_cycles, cb_cycles, cb_host, first
w, colls, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def ref(path):
    return {s: (t, None) for s, t in first(ref_cycles(path)).items()}
def cb(path):
    host = cb_host(path)
    return {s: (t, host.get(s)) for s, t in first(cb_cycles(path)).items()}
def threads(path):
    rows = []
    try:
        for line in open(path):
            f = line.split(None, 4)
            if len(f) == 5:
                h, m, s = f[2].split(":") if f[2].count(":") == 2 else ("0",) + tuple(f[2].split(":"))
                rows.append((float(f[3]), int(f[1]), f[4].strip()))
    except FileNotFoundError:
        return "-"
    rows.sort(reverse=True)
    return " ".join(f"{n}@{cpu}:{pc:.0f}%" for pc, cpu, n in rows[:6])
for c in colls:
    print(f"\n== {c}: per process, mean over sizes of out-of-place time (us) [host issue time]; busiest threads name@cpu:%cpu")
    summary = {}
    for v in variants:
        per = []
        for p in sorted(glob.glob(f"{w}/{c}.{v}.*.txt"), key=lambda s: int(s.split(".")[-2])):
            base = p[:-4]
            t = cb(base + ".json") if v.startswith("cb") else ref(p)
            if not t:
                print(f"  {v:6} {os.path.basename(base)}: no result"); continue
            mean = statistics.mean(x for x, _ in t.values())
            cpus = [y for _, y in t.values() if y]
            per.append(mean)
            extra = f" [{statistics.mean(cpus):6.2f}]" if cpus else " " * 9
            print(f"  {v:6} pass {base.split('.')[-1]:>2}: {mean:6.2f}{extra}  {threads(base + '.ps')}")
        summary[v] = per
    print("  medians:", {v: round(statistics.median(x), 2) for v, x in summary.items() if x})
PY
