#!/usr/bin/env bash
# Does the CPU a benchmark runs on set its small-message latency? Pins each
# run of NCCL's benchmark and of collbench (8 B - 64 KiB allreduce, 50
# iterations, 10 warm-up, GPUs 0 and 1) to one pair of CPUs with taskset,
# for every pair in turn, PASSES times, and prints the mean time over sizes
# per pair and tool.   PASSES=2 scripts/cpu-pairs.sh OUTDIR
set -u
cd "$(dirname "$0")/.."
. scripts/parity-env.sh
W=${1:-/tmp/collbench-cpus}
PASSES=${PASSES:-2}
COLL=${COLL:-allreduce}
mkdir -p "$W"
n=$(nproc)
ref=$(ref_name "$COLL")
for pass in $(seq 1 "$PASSES"); do
  for a in $(seq 0 2 $((n - 2))); do
    cpus=$a,$((a + 1))
    taskset -c "$cpus" "$NT/${ref}_perf" -t 2 -g 1 -b 8 -e 64K -f 2 -n 50 -w 10 > "$W/ref-$a-$pass.txt" 2>&1
    taskset -c "$cpus" "$BIN" "$COLL" --backend nccl --sizes 8:64K -n 50 -w 10 -q -C -o "$W/cb-$a-$pass.json" > /dev/null 2>&1
  done
done
PYTHONPATH=scripts python3 - "$W" "$n" "$PASSES" <<'PY'
import statistics as st, sys
from paritylib import ref_cycles, cb_cycles, cb_host, first
w, n, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nan = float("nan")
def mean(d):
    return st.mean(d.values()) if d else nan
def ref(p):
    try:
        return mean(first(ref_cycles(p)))
    except OSError:
        return nan
def cb(p):
    return mean(first(cb_cycles(p))), mean(cb_host(p))
print("cpus   " + "  ".join(f"ref#{p} cb#{p} [issue]" for p in range(1, passes + 1)))
for a in range(0, n - 1, 2):
    cells = []
    for p in range(1, passes + 1):
        t, c = cb(f"{w}/cb-{a}-{p}.json")
        cells.append(f"{ref(f'{w}/ref-{a}-{p}.txt'):5.2f} {t:5.2f} [{c:5.2f}]")
    print(f"{a:2},{a+1:<2}  " + "   ".join(cells))
PY
