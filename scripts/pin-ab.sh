#!/usr/bin/env bash
# Small-message time of NCCL's benchmark and collbench with the process
# pinned to different CPU sets (taskset), to tell CPU placement apart from
# the tools: allreduce and allgather 8 B - 1 KiB, out-of-place, GPUs 0,1.
#   CPUSETS="0-7 32-39" REPS=2 scripts/pin-ab.sh
set -u
cd "$(dirname "$0")/.."
. scripts/parity-env.sh
export COLLBENCH_ALGORITHM_PROBE=off
if [ ! -x "$NT/all_reduce_perf" ]; then
  make -C "${NCCL_TESTS:-ext/nccl-tests}" -j16 MPI=0 NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" NCCL_HOME=/usr > /tmp/nt-build.log 2>&1 || tail /tmp/nt-build.log
fi
W=${WORK:-/tmp/collbench-pin}
mkdir -p "$W"
# mean FILE: the mean out-of-place time over the sizes of either tool's file.
mean() {
  python3 -c 'import statistics as st, sys; sys.path.insert(0, "scripts"); from paritylib import cycles, first
t = first(cycles(sys.argv[1])); print("%.2f" % st.mean(t.values()) if t else "nan")' "$1"
}
for set in ${CPUSETS:-all 0-7 16-23 32-39 48-55}; do
  pin=(); [ "$set" != all ] && pin=(taskset -c "$set")
  for c in allreduce allgather; do
    r=""; k=""
    for rep in $(seq 1 "${REPS:-3}"); do
      "${pin[@]}" "$NT/$(ref_name "$c")_perf" -t 2 -g 1 -b 8 -e 1K -f 2 -n 50 -w 10 > "$W/ref.txt" 2>&1
      r="$r $(mean "$W/ref.txt")"
      "${pin[@]}" "$BIN" "$c" --backend "${BACKEND:-nccl}" --sizes 8:1K -n 50 -w 10 -q -o "$W/cb.json" > /dev/null 2>&1
      k="$k $(mean "$W/cb.json")"
    done
    printf "cpus %-6s %-9s reference:%s | collbench:%s  (us, mean over 8 B-1 KiB, one value per process)\n" "$set" "$c" "$r" "$k"
  done
done
