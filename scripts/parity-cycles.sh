#!/usr/bin/env bash
# Small-message parity with NCCL's benchmark, sampled over time: PASSES
# alternating passes per collective, each running the 8 B - 64 KiB sweep
# CYCLES times in one process (NCCL's benchmark -N, collbench --cycles),
# out-of-place, 50 iterations, 10 warm-up, GPUs 0 and 1, both tools timing
# out-of-place and in-place as NCCL's benchmark always does.
#
# Per size and tool it reports the median over every cycle of every pass.
# On hosts whose host-GPU path flips between two latencies (see
# scripts/probes/copylat.py and the README), every time falls in one of two
# clusters; the report also splits each collective's times at the gap
# between the clusters (two-means) and compares the tools within each
# cluster, which takes out how much of each run the host spent slow.
# Before each process, PROBE seconds of 4-byte copies (copylat.py) record
# the state of the host-GPU path.
#   PASSES=4 CYCLES=10 scripts/parity-cycles.sh OUTDIR
# Variants (VARIANTS): ref, ref-C (its host time, -C 1), ref2 (ref again: with
# ref, an A/A control of how far one program lands from itself), ref-busy
# (ref while BUSY, default 8, busy-looping processes keep other CPUs
# loaded), cb (collbench, -C), cb-busy (cb under the same load),
# cb-stdout (results on stdout, no file after each row), cb-shm (the file
# on /dev/shm), cb-VAR=x+VAR2=y (environment variables), cb~NAME (the
# collbench binary bin/NAME, for example one built from an earlier commit).
# With variants other than ref and cb, scripts/parity-variants.py then
# compares them all by their share of slow cycles. BACKEND=cpu tries the
# script's collbench variants on a machine without GPUs.
set -u
cd "$(dirname "$0")/.."
. scripts/parity-env.sh
W=${1:-/tmp/collbench-pc}
PASSES=${PASSES:-4}
CYCLES=${CYCLES:-10}
PROBE=${PROBE:-0}
COLLS=${COLLS:-allreduce allgather reduce-scatter broadcast reduce alltoall sendrecv}
VARIANTS=${VARIANTS:-"ref cb"}
BACKEND=${BACKEND:-nccl}
for v in $VARIANTS; do
  case $v in cb~*) [ -x "bin/${v#cb~}" ] || { echo "parity-cycles.sh: variant $v: no executable bin/${v#cb~} (copy an earlier build there)" >&2; exit 2; } ;; esac
done
mkdir -p "$W"
# Even passes run the variants in reverse order, so that no tool always
# runs right after the other.
for pass in $(seq 1 "$PASSES"); do
  order=$VARIANTS
  [ $((pass % 2)) -eq 0 ] && order=$(echo "$VARIANTS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for c in $COLLS; do
    for v in $order; do
      if [ "$PROBE" != 0 ]; then
        copy_median 0 "$PROBE" > "$W/$v-$c-$pass.probe"
      fi
      busy=()
      case $v in *-busy)
        for _ in $(seq 1 "${BUSY:-8}"); do (while :; do :; done) & busy+=($!); done ;;
      esac
      case $v in
        ref|ref2|ref-C|ref-busy) ref_small "$c" -N "$CYCLES" $([ "$v" = ref-C ] && echo -C 1) > "$W/$v-$c-$pass.txt" 2>&1 ;;
        cb|cb-busy) cb_small "$c" --cycles "$CYCLES" -C -o "$W/$v-$c-$pass.json" > /dev/null 2>&1 ;;
        cb-stdout) cb_small "$c" --cycles "$CYCLES" -C --format json > "$W/$v-$c-$pass.json" 2> /dev/null ;;
        cb-shm) cb_small "$c" --cycles "$CYCLES" -C -o "/dev/shm/cb-pc-$$.json" > /dev/null 2>&1
                mv "/dev/shm/cb-pc-$$.json" "$W/$v-$c-$pass.json" 2> /dev/null ;;
        cb~*) BIN="bin/${v#cb~}" cb_small "$c" --cycles "$CYCLES" -C -o "$W/$v-$c-$pass.json" > /dev/null 2>&1 ;;
        cb-*) (export $(echo "${v#cb-}" | tr + " "); cb_small "$c" --cycles "$CYCLES" -C -o "$W/$v-$c-$pass.json" > /dev/null 2>&1) ;;
      esac
      [ ${#busy[@]} -gt 0 ] && { kill "${busy[@]}"; wait "${busy[@]}"; } 2> /dev/null
    done
  done
done
python3 scripts/parity-report.py "$W" "$COLLS"
case " $VARIANTS " in *" ref2 "*) python3 scripts/parity-report.py --pair ref,ref2 "$W" "$COLLS" ;; esac
[ "$VARIANTS" = "ref cb" ] || python3 scripts/parity-variants.py "$W" "$COLLS" "$VARIANTS"
