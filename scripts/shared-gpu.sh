#!/usr/bin/env bash
# shared-gpu.sh: what a machine of ONE GPU can check of collbench's
# multi-rank NCCL paths, and its one-rank issue cost. SHARE (default 2)
# processes share GPU 0, each its own simulated host (collbench launch
# --nodes, or NCCL_HOSTID in a PyTorch job), so NCCL joins them over its
# socket transport as it would separate hosts. These are functional checks:
# sockets between ranks on one GPU say nothing of NVLink speed.
#
# Sections (SECTIONS, default all of them, in this order):
#   determinism  determinism on NCCL (3 collectives x float, half, bfloat16 x
#                every choice), --tuner-file, then --check over 20 fresh runs
#   det4         determinism on allreduce with 4 ranks sharing GPU 0 (with
#                2, every order of a sum of two is the same sum)
#   bitwise      --bitwise 3 on a sweep of the reductions
#   tunejob      scripts/tune-job.sh SHARE=2 TRACE=1 (record, tune --from, the
#                tuner applying the file inside PyTorch, checked op by op)
#   newnccl      NCCL built from $NCCL_SRC (a tarball of a fetched snapshot):
#                one-rank and shared sweeps with the algorithm column, tune's
#                forcing, and watch naming a late rank in PyTorch on it
#   cost         the watch plugin's cost to a job of SHARE ranks on GPU 0
#                (scripts/watch-cost.sh, COST_PAIRS pairs) on PyTorch's NCCL,
#                then on NCCL built from $NCCL_SRC, after the interface
#                NCCL loaded collbench's profiler by (v6 from NCCL 2.29)
#   tunejobnew   the tunejob section on NCCL built from $NCCL_SRC (the job
#                preloads it; tune --from and the tuner through interface 6)
#   chunk        tune's chunk sizes on NCCL built from $NCCL_SRC (tuner
#                interface 6): allgather and reduce-scatter, the file it
#                writes, then --check of that file
#   wall         the verified allreduce sweep's wall time (8 B to 1 GiB by
#                2, 20 iterations, 5 warm-up, checked), one rank, collbench
#                against NCCL's benchmark (-g 1 -c 1), WALL_RUNS alternating
#   parity       one-rank parity with NCCL's benchmark (built from
#                $NCCL_TESTS), all eleven collectives, then graph mode
# Every command is bounded by timeout; the log goes to $OUT/shared-gpu.log.
#
#   SECTIONS="determinism bitwise tunejob" scripts/shared-gpu.sh
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
OUTDIR=${OUT:-gpu-logs}
WORK=${WORK:-/tmp/collbench-shared}
SHARE=${SHARE:-2}
NCCL_TESTS=${NCCL_TESTS:-ext/nccl-tests}
NCCL_SRC=${NCCL_SRC:-ext/nccl.tgz}
SECTIONS=${SECTIONS:-determinism det4 bitwise tunejob newnccl cost parity}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUTDIR" "$WORK"
OUTDIR=$(cd "$OUTDIR" && pwd)
exec > >(tee -a "$OUTDIR/shared-gpu.log") 2>&1
fails=0
step() { echo; echo "=== $*"; }
ok() { echo "PASS: $*"; }
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }
want() { case " $SECTIONS " in *" $1 "*) echo; echo "##### section $1 ($(date +%T))"; return 0 ;; esac; return 1; }
# shared S CMD...: collbench CMD in SHARE processes on GPU 0, S seconds at most.
shared() { local s=$1; shift; timeout -k 10 "$s" "$BIN" launch -n "$SHARE" --nodes "$SHARE" -- "$@" --device 0; }
nvidia-smi -L
"$BIN" version

if want determinism; then
  step "determinism on NCCL, $SHARE ranks sharing GPU 0"
  shared 300 determinism --sizes 8:1M:x4 --budget "${DET_BUDGET:-120s}" -o "$WORK/det.json" --tuner-file "$WORK/det.csv" > "$WORK/det.txt" 2>&1
  rc=$?; cat "$WORK/det.txt"
  [ $rc -le 1 ] && [ -s "$WORK/det.csv" ] && ok "determinism ran (exit $rc), file written" || bad "determinism exit $rc"
  cat "$WORK/det.csv" 2>/dev/null
  step "determinism --check of that file, 20 fresh runs"
  shared 240 determinism --sizes 8:1M:x4 --check "$WORK/det.csv" --runs 20 --budget "${CHECK_BUDGET:-90s}" > "$WORK/det-check.txt" 2>&1
  rc=$?; tail -30 "$WORK/det-check.txt"
  [ $rc -eq 0 ] && ok "the pinned file passes --check over 20 runs" || bad "--check exit $rc"
fi

if want det4; then
  step "determinism on NCCL, 4 ranks sharing GPU 0, allreduce"
  SHARE=4 shared 240 determinism --collectives allreduce --dtype float,bfloat16 --sizes 8:1M:x4 --budget "${DET4_BUDGET:-150s}" \
    -o "$WORK/det4.json" --tuner-file "$WORK/det4.csv" > "$WORK/det4.txt" 2>&1
  rc=$?; cat "$WORK/det4.txt" "$WORK/det4.csv"
  [ $rc -le 1 ] && ok "determinism with 4 ranks ran (exit $rc)" || bad "determinism with 4 ranks: exit $rc"
fi

if want bitwise; then
  step "--bitwise 3 on the reductions, $SHARE ranks sharing GPU 0"
  shared 200 sweep --collectives allreduce,reduce-scatter,reduce --sizes 8:16M:x8 --dtype float,half,bfloat16 \
    --bitwise 3 -o "$WORK/bitwise.json" > "$WORK/bitwise.txt" 2>&1
  rc=$?; cat "$WORK/bitwise.txt"
  [ $rc -eq 0 ] && grep -q "^# bitwise:.*(OK)" "$WORK/bitwise.txt" && ok "bitwise the same" || bad "bitwise exit $rc"
fi

if want tunejob; then
  step "tune-job.sh SHARE=2 TRACE=1 MODE=fsdp"
  BIN=$BIN SHARE=2 TRACE=1 MODE=fsdp LAYERS=${TJ_LAYERS:-6} WIDTH=${TJ_WIDTH:-1024} STEPS=${TJ_STEPS:-60} WARM=10 \
    PAIRS=${TJ_PAIRS:-2} BUDGET=${TJ_BUDGET:-60s} WORK=$WORK/tunejob timeout -k 10 420 scripts/tune-job.sh
  rc=$?
  grep -q "^TRACE OK" "$OUTDIR/tune-job-trace.txt" 2>/dev/null && ok "the tuner applied the file op by op (exit $rc)" || bad "tune-job exit $rc, trace not OK"
fi

if want newnccl || want cost || want chunk || want tunejobnew; then
  step "NCCL from $NCCL_SRC"
  nb=$WORK/nccl
  if [ ! -f "$nb/build/lib/libnccl.so.2" ]; then
    mkdir -p "$WORK/src" && tar xzf "$NCCL_SRC" -C "$WORK/src" && rm -rf "$nb" && mv "$WORK/src/nccl" "$nb"
    t0=$(date +%s)
    timeout -k 10 420 make -C "$nb" -j"$(nproc)" src.build NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" CUDA_HOME=/usr/local/cuda > "$WORK/nccl-build.log" 2>&1 \
      || { tail -20 "$WORK/nccl-build.log"; bad "NCCL build"; }
    echo "NCCL built in $(($(date +%s) - t0)) s"
  fi
  lib=$(readlink -f "$nb/build/lib/libnccl.so.2")
  if [ -f "$lib" ] && want newnccl; then
    timeout -k 5 60 "$BIN" env --nccl-lib "$lib" | head -20
    for args in "allreduce --sizes 8:64M:x8" "allgather --sizes 1K:64M:x8" "sendrecv --sizes 8:1M:x8"; do
      timeout -k 5 120 "$BIN" $args --nccl-lib "$lib" -n 20 -w 5 > "$WORK/new-1.txt" 2>&1 && ok "one rank: $args" || bad "one rank: $args"
      tail -12 "$WORK/new-1.txt"
    done
    shared 150 sweep --collectives allreduce,allgather,reduce-scatter --sizes 8:16M:x8 --nccl-lib "$lib" -n 10 -w 3 > "$WORK/new-2.txt" 2>&1 \
      && ok "$SHARE ranks sharing GPU 0" || bad "$SHARE ranks sharing GPU 0"
    cat "$WORK/new-2.txt"
    shared 150 tune --collectives allgather,allreduce --sizes 64K:16M:x4 --nccl-lib "$lib" --budget 50s > "$WORK/new-tune.txt" 2>&1
    rc=$?; cat "$WORK/new-tune.txt"
    [ $rc -le 1 ] && ok "tune forced NCCL's choices (exit $rc)" || bad "tune exit $rc"
    step "watch names a late rank in PyTorch on that NCCL (LD_PRELOAD), SHARE=2 PLANTS=sleep"
    BIN=$BIN SHARE=2 PLANTS=sleep JOBS=1 EPISODES=${WP_EPISODES:-4} NCCL_PRELOAD=$lib WORK=$WORK/plants \
      timeout -k 10 240 scripts/watch-plants.sh > "$WORK/plants.txt" 2>&1
    rc=$?; tail -15 "$WORK/plants.txt"; grep -h "NCCL version\|profiler\|Profiler" "$WORK"/plants/job-1.log | head -5
    [ $rc -eq 0 ] && ok "watch-plants on the new NCCL (exit $rc)" || bad "watch-plants exit $rc"
  fi
fi

if want cost; then
  for which in old new; do
    pre=""; what="PyTorch's own"
    if [ $which = new ]; then
      pre=$(readlink -f "$WORK/nccl/build/lib/libnccl.so.2" 2>/dev/null)
      [ -f "$pre" ] || { bad "no NCCL built in $WORK/nccl"; continue; }
      what=$pre
      step "the profiler interface NCCL loaded collbench's plugin by"
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL shared 90 allreduce --sizes 8:1K --nccl-lib "$pre" -n 2 -w 1 > "$WORK/new-iface.txt" 2>&1
      grep -i "PROFILER/Plugin\|TUNER/Plugin" "$WORK/new-iface.txt" | sort | uniq -c | head -6
      grep -q "PROFILER/Plugin: Loaded collbench (v6)" "$WORK/new-iface.txt" && ok "NCCL loaded the profiler by interface v6" || bad "no v6 profiler line"
    fi
    step "the watch plugin's cost, $SHARE ranks sharing GPU 0, NCCL: $what"
    BIN=$BIN SHARE=$SHARE PAIRS=${COST_PAIRS:-3} JOB_S=${COST_JOB_S:-15} NCCL_PRELOAD=$pre WORK=$WORK/cost-$which \
      timeout -k 10 280 scripts/watch-cost.sh > "$WORK/cost-$which.txt" 2>&1
    rc=$?; cat "$WORK/cost-$which.txt"
    [ $rc -le 1 ] && ok "watch-cost ran on $what (exit $rc)" || bad "watch-cost exit $rc"
  done
fi

if want tunejobnew; then
  lib=$(readlink -f "$WORK/nccl/build/lib/libnccl.so.2" 2>/dev/null)
  step "tune-job.sh SHARE=2 TRACE=1 MODE=fsdp on NCCL $lib (tune and the job on it: tuner interface 6)"
  BIN=$BIN SHARE=2 TRACE=1 MODE=fsdp LAYERS=${TJ_LAYERS:-6} WIDTH=${TJ_WIDTH:-1024} STEPS=${TJ_STEPS:-60} WARM=10 NCCL_LIB=$lib \
    PAIRS=${TJ_PAIRS:-2} BUDGET=${TJ_BUDGET:-60s} WORK=$WORK/tunejobnew OUT=$OUTDIR/tunejobnew timeout -k 10 420 scripts/tune-job.sh
  rc=$?
  grep -q "^TRACE OK" "$OUTDIR/tunejobnew/tune-job-trace.txt" 2>/dev/null && ok "the tuner applied the file op by op on $lib (exit $rc)" || bad "tune-job on $lib: exit $rc, trace not OK"
fi

if want chunk; then
  lib=$(readlink -f "$WORK/nccl/build/lib/libnccl.so.2" 2>/dev/null)
  if [ -f "$lib" ]; then
    step "tune with the chunk size, $SHARE ranks sharing GPU 0, NCCL $lib"
    shared 300 tune --collectives allgather,reduce-scatter --sizes "${CHUNK_SIZES:-256K:16M:x4}" --nccl-lib "$lib" \
      --budget "${CHUNK_BUDGET:-150s}" -o "$WORK/chunk.json" --tuner-file "$WORK/chunk.csv" > "$WORK/chunk.txt" 2>&1
    rc=$?; cat "$WORK/chunk.txt"; cat "$WORK/chunk.csv" 2>/dev/null
    n=$(grep -c "chunk" "$WORK/chunk.txt")
    [ $rc -le 1 ] && [ "$n" -gt 0 ] && ok "tune tried chunk sizes (exit $rc)" || bad "tune with chunks: exit $rc, no chunk in its table"
    if grep -q "chunkBytes" "$WORK/chunk.csv" 2>/dev/null; then
      step "tune --check of that file"
      shared 200 tune --collectives allgather,reduce-scatter --sizes "${CHUNK_SIZES:-256K:16M:x4}" --nccl-lib "$lib" \
        --check "$WORK/chunk.csv" --budget 120s > "$WORK/chunk-check.txt" 2>&1
      rc=$?; cat "$WORK/chunk-check.txt"
      [ $rc -le 1 ] && ok "--check of the chunk file (exit $rc)" || bad "--check exit $rc"
    fi
  else
    bad "no NCCL built in $WORK/nccl"
  fi
fi

if want wall || want parity; then
  if [ ! -x "$NCCL_TESTS/build/all_reduce_perf" ]; then
    t0=$(date +%s)
    timeout -k 10 300 make -C "$NCCL_TESTS" -j"$(nproc)" MPI=0 NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" NCCL_HOME=/usr > "$WORK/nccl-tests-build.log" 2>&1 \
      || { tail -20 "$WORK/nccl-tests-build.log"; bad "NCCL's benchmark build"; }
    echo "NCCL's benchmark built in $(($(date +%s) - t0)) s"
  fi
fi

if want wall; then
  step "the verified allreduce sweep's wall, one rank: collbench against NCCL's benchmark"
  for i in $(seq 1 "${WALL_RUNS:-3}"); do
    t0=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=0 timeout -k 5 120 "$BIN" allreduce --sizes 8:1G:x2 -n 20 -w 5 -c 1 > "$WORK/wall-cb-$i.txt" 2>&1; rc1=$?
    t1=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=0 timeout -k 5 120 "$NCCL_TESTS/build/all_reduce_perf" -b 8 -e 1G -f 2 -n 20 -w 5 -c 1 -g 1 > "$WORK/wall-ref-$i.txt" 2>&1; rc2=$?
    t2=$(date +%s.%N)
    python3 -c "import sys; a,b,c=map(float,sys.argv[1:4]); print('run %s: collbench %.2f s (exit %s), NCCL benchmark %.2f s (exit %s): %.2fx' % (sys.argv[4], b-a, sys.argv[5], c-b, sys.argv[6], (b-a)/(c-b)))" "$t0" "$t1" "$t2" "$i" "$rc1" "$rc2"
  done
  grep -h "wrong elements\|Out of bounds\|#wrong" "$WORK"/wall-cb-1.txt "$WORK"/wall-ref-1.txt | head -4
fi

if want parity; then
  step "one-rank parity with NCCL's benchmark"
  colls=${PARITY_COLLS:-allreduce allgather reduce-scatter broadcast reduce alltoall sendrecv gather scatter alltoallv hypercube}
  CUDA_VISIBLE_DEVICES=0 BIN=$BIN NCCL_TESTS=$NCCL_TESTS PASSES=${PARITY_PASSES:-3} CYCLES=10 MORE=0 \
    VARIANTS="ref cb cb0" COLLS="$colls" timeout -k 10 400 scripts/parity.sh "$WORK/parity" > "$WORK/parity.txt" 2>&1
  rc=$?; grep -E "^(PARITY|WITHIN|worst|median over)" "$WORK/parity.txt"
  python3 scripts/parity-report.py --pair cb,cb0 "$WORK/parity" "$colls" 2>&1 | grep -E "^(SAME|worst|median over)"
  echo "parity.sh exit $rc"
  step "one-rank graph mode (-G 10 against --cuda-graph 10)"
  CUDA_VISIBLE_DEVICES=0 BIN=$BIN NCCL_TESTS=$NCCL_TESTS PASSES=${GRAPH_PASSES:-2} CYCLES=10 MORE=0 \
    VARIANTS="refG cbG" COLLS="$colls" timeout -k 10 300 scripts/parity.sh "$WORK/graph" > /dev/null 2>&1
  python3 scripts/parity-report.py --pair refG,cbG "$WORK/graph" "$colls" > "$WORK/graph.txt" 2>&1
  grep -E "^(SAME|worst|median over)" "$WORK/graph.txt"
  (cd "$WORK" && tar czf "$OUTDIR/parity.tgz" parity.txt graph.txt parity/*.json graph/*.json 2>/dev/null)
fi

(cd "$WORK" && find . -maxdepth 3 \( -path ./nccl -o -path ./src \) -prune -o \( -name '*.txt' -o -name '*.json' -o -name '*.csv' -o -name '*.log' \) ! -name 'nccl*build.log' -size -4M -print0 \
  | tar czf "$OUTDIR/shared-work.tgz" --null -T -) 2>/dev/null || true
echo; echo "shared-gpu: $fails failed"
[ "$fails" -eq 0 ]
