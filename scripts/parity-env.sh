# parity-env.sh: the setting the side-by-side scripts share, sourced from
# the repository root: collbench's binary (BIN), NCCL's benchmark (NT, from
# NCCL_TESTS), GPUs 0 and 1 with NVLink SHARP off, and ref_name, which maps
# a collbench collective to the name of NCCL's benchmark for it.
BIN=${BIN:-bin/collbench}
NT=${NCCL_TESTS:-ext/nccl-tests}/build
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}
ref_name() { case $1 in allreduce) echo all_reduce;; allgather) echo all_gather;; reduce-scatter) echo reduce_scatter;; *) echo "$1";; esac; }
