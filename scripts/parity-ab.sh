#!/usr/bin/env bash
# Small-message A/B against NCCL's benchmark: one collective at a time,
# 8 B - 64 KiB, out-of-place time, 50 iterations, 10 warm-up, on GPUs 0 and
# 1, each variant run in turn PASSES times; prints the median per size and
# variant. A diagnosis aid for parity gaps: variants set collbench's
# diagnostic switches (COLLBENCH_ALLOC, COLLBENCH_CUDA_SYNC,
# COLLBENCH_CUDA_STREAM), cb-both times in-place too (as the parity
# section does), cb-VAR=x+VAR2=y sets environment variables, ref-1thread
# runs NCCL's benchmark with one thread for both GPUs.
#   COLLS="allgather reduce" PASSES=4 scripts/parity-ab.sh
# BACKEND=cpu tries the collbench variants on a machine without GPUs.
set -u
cd "$(dirname "$0")/.."
. scripts/parity-env.sh
WORK=${WORK:-/tmp/collbench-ab}
PASSES=${PASSES:-4}
COLLS=${COLLS:-allgather reduce broadcast}
mkdir -p "$WORK"; rm -f "$WORK"/*
VARIANTS=${VARIANTS:-"ref ref-1thread cb cb-ncclmem cb-spin cb-ncclmem-spin cb-gomaxprocs4 cb-nocheck"}
for pass in $(seq 1 "$PASSES"); do
  for c in $COLLS; do
    for v in $VARIANTS; do
      out="$WORK/$c.$v.$pass"
      case $v in
        ref) ref_small "$c" > "$out.txt" 2>&1 ;;
        ref-1thread) ref_small "$c" -t 1 -g 2 > "$out.txt" 2>&1 ;;
        cb) cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-ncclmem) COLLBENCH_ALLOC=ncclmem cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-spin) COLLBENCH_CUDA_SYNC=spin cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-ncclmem-spin) COLLBENCH_ALLOC=ncclmem COLLBENCH_CUDA_SYNC=spin cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-gomaxprocs4) GOMAXPROCS=4 cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-both) cb_small "$c" --mode both -o "$out.json" > /dev/null 2>&1 ;;
        cb-nocheck) cb_small "$c" --check 0 --mode out-of-place -o "$out.json" > /dev/null 2>&1 ;;
        cb-*) (export $(echo "${v#cb-}" | tr + " "); cb_small "$c" --mode out-of-place -o "$out.json" > /dev/null 2>&1) ;;
      esac
    done
  done
done
PYTHONPATH=scripts python3 - "$WORK" "$COLLS" "$VARIANTS" <<'PY'
import glob, statistics, sys
from paritylib import cycles, first
w, colls, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def times(path):
    return first(cycles(path))
for c in colls:
    med = {}
    for v in variants:
        acc = {}
        for p in glob.glob(f"{w}/{c}.{v}.*"):
            for s, t in times(p).items():
                acc.setdefault(s, []).append(t)
        med[v] = {s: statistics.median(x) for s, x in acc.items()}
    sizes = sorted(set.intersection(*[set(m) for m in med.values() if m]) if any(med.values()) else [])
    print(f"\n{c}: out-of-place time (us), median of passes")
    print(f"{'size':>6} " + " ".join(f"{v[-16:]:>16}" for v in variants))
    for s in sizes:
        print(f"{s:>6} " + " ".join(f"{med[v].get(s, float('nan')):16.2f}" for v in variants))
    if "ref" in med and med["ref"]:
        print(f"{'mean':>6} " + " ".join(f"{statistics.mean(med[v][s] for s in sizes):16.2f}" if med[v] else f"{'-':>16}" for v in variants))
    print("per pass, mean over sizes (one process each):")
    for v in variants:
        per = []
        for p in sorted(glob.glob(f"{w}/{c}.{v}.*")):
            t = times(p)
            ss = [s for s in sizes if s in t]
            if ss:
                per.append(round(statistics.mean(t[s] for s in ss), 2))
        print(f"  {v:>34}: {per}")
PY
