#!/usr/bin/env bash
# Small-message time of NCCL's benchmark and collbench with the process
# pinned to different CPU sets (taskset), to tell CPU placement apart from
# the tools: allreduce and allgather 8 B - 1 KiB, out-of-place, GPUs 0,1.
#   CPUSETS="0-7 32-39" REPS=2 scripts/pin-ab.sh
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1} NCCL_NVLS_ENABLE=0 COLLBENCH_ALGORITHM_PROBE=off
nt=${NCCL_TESTS:-ext/nccl-tests}/build
BIN=${BIN:-bin/collbench}
if [ ! -x "$nt/all_reduce_perf" ]; then
  make -C "${NCCL_TESTS:-ext/nccl-tests}" -j16 MPI=0 NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" NCCL_HOME=/usr > /tmp/nt-build.log 2>&1 || tail /tmp/nt-build.log
fi
mean_ref() { awk 'NF>=13 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {s+=$6; n++} END {if (n) printf "%.2f", s/n; else printf "nan"}'; }
mean_cb() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=[r["out_of_place"]["time_us"] for r in d["results"] if r["count"]>0]; print("%.2f" % (sum(t)/len(t)))' "$1"; }
for set in ${CPUSETS:-all 0-7 16-23 32-39 48-55}; do
  pin=(); [ "$set" != all ] && pin=(taskset -c "$set")
  for c in allreduce:all_reduce allgather:all_gather; do
    cb=${c%%:*}; ref=${c##*:}
    r=""; k=""
    for rep in $(seq 1 "${REPS:-3}"); do
      r="$r $("${pin[@]}" "$nt/${ref}_perf" -t 2 -g 1 -b 8 -e 1K -f 2 -n 50 -w 10 2>&1 | mean_ref)"
      "${pin[@]}" "$BIN" "$cb" --backend nccl --sizes 8:1K -n 50 -w 10 -q -o /tmp/pin-cb.json > /dev/null 2>&1
      k="$k $(mean_cb /tmp/pin-cb.json)"
    done
    printf "cpus %-6s %-9s reference:%s | collbench:%s  (us, mean over 8 B-1 KiB, one value per process)\n" "$set" "$cb" "$r" "$k"
  done
done
