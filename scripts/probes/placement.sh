#!/usr/bin/env bash
# placement.sh: whether the CPUs a process runs on set its small-message
# time. For every CPU: the 4-byte copy latency of scripts/probes/copylat.py
# pinned there (median of SECONDS). Then, for CPU groups of GROUP CPUs,
# alternating with unpinned runs: allreduce 8 B - 64 KiB by NCCL's benchmark
# and by collbench, each pinned to the group (taskset), median out-of-place
# time over the sizes and CYCLES cycles.
#   ROUNDS=2 GROUP=4 scripts/probes/placement.sh
set -u
cd "$(dirname "$0")/../.."
. scripts/parity-env.sh
SECONDS_=${SECONDS_:-0.3}
ROUNDS=${ROUNDS:-2}
GROUP=${GROUP:-4}
CYCLES=${CYCLES:-3}
COLL=${COLL:-allreduce}
W=${W:-/tmp/collbench-placement}
for v in ROUNDS GROUP CYCLES; do
  case ${!v} in ''|*[!0-9]*|0) echo "placement.sh: $v must be a positive whole number, not '${!v}'" >&2; exit 2 ;; esac
done
[ -x "$NT/$(ref_name "$COLL")_perf" ] || { echo "placement.sh: no $NT/$(ref_name "$COLL")_perf: build NCCL's benchmark first (see scripts/gpu-test.sh, parity section)" >&2; exit 2; }
mkdir -p "$W"
ncpu=$(nproc)
lscpu | grep -E '^(CPU\(s\)|Thread|Core|Socket|NUMA|Model name|On-line)'
nvidia-smi topo -m | head -4
echo "copy latency per CPU (median us of ${SECONDS_} s), $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  line="round $r:"
  for c in $(seq 0 $((ncpu - 1))); do
    line="$line $c:$(copy_median 0 "$SECONDS_" "$c")"
  done
  echo "$line"
done
# med FILE: the median out-of-place time over every size and cycle of
# either tool's result file (scripts/paritylib.py reads both).
med() { python3 -c '
import statistics, sys
sys.path.insert(0, "scripts")
from paritylib import cycles
t = [x for xs in cycles(sys.argv[1]).values() for x in xs]
print("%.2f" % statistics.median(t) if t else "-")' "$1"; }
echo "$COLL 8 B - 64 KiB, median out-of-place time (us) per CPU group; 'all' is unpinned"
groups="all"
for s in $(seq 0 "$GROUP" $((ncpu - 1))); do groups="$groups $s-$((s + GROUP - 1))"; done
for r in $(seq 1 "$ROUNDS"); do
  for g in $groups; do
    pin=""; [ "$g" = all ] || pin="taskset -c $g"
    $pin "$NT/$(ref_name "$COLL")_perf" -t 2 -g 1 -b 8 -e 64K -f 2 -n 50 -w 10 -N "$CYCLES" > "$W/ref-$g-$r.txt" 2>&1
    $pin "$BIN" "$COLL" --backend nccl --sizes 8:64K -n 50 -w 10 -q --cycles "$CYCLES" -o "$W/cb-$g-$r.json" > /dev/null 2>&1
    echo "round $r cpus $g: ref $(med "$W/ref-$g-$r.txt") cb $(med "$W/cb-$g-$r.json")"
  done
done
