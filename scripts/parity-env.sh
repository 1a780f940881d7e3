# parity-env.sh: the setting the side-by-side scripts share, sourced from
# the repository root: collbench's binary (BIN), NCCL's benchmark (NT, from
# NCCL_TESTS), GPUs 0 and 1 with NVLink SHARP off, and ref_name, which maps
# a collbench collective to the name of NCCL's benchmark for it.
BIN=${BIN:-bin/collbench}
NT=${NCCL_TESTS:-ext/nccl-tests}/build
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}
ref_name() { case $1 in allreduce) echo all_reduce;; allgather) echo all_gather;; reduce-scatter) echo reduce_scatter;; *) echo "$1";; esac; }
# ref_small COLL [FLAG...] and cb_small COLL [FLAG...]: the small-message
# sweep the side-by-side scripts time (8 B - 64 KiB, 50 iterations, 10
# warm-up), by NCCL's benchmark with one thread per GPU, and by collbench
# ($BIN on ${BACKEND:-nccl}, quiet). Later flags override earlier ones.
ref_small() { local c=$1; shift; "$NT/$(ref_name "$c")_perf" -t 2 -g 1 -b 8 -e 64K -f 2 -n 50 -w 10 "$@"; }
cb_small() { local c=$1; shift; "$BIN" "$c" --backend "${BACKEND:-nccl}" --sizes 8:64K -n 50 -w 10 -q "$@"; }
# copy_median GPU SECONDS [CPU]: the median latency (us) of
# scripts/probes/copylat.py's 4-byte copies on GPU for SECONDS, pinned to CPU
# when given.
copy_median() {
  local pin=(); [ -n "${3:-}" ] && pin=(taskset -c "$3")
  "${pin[@]}" python3 scripts/probes/copylat.py "$1" "$2" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
