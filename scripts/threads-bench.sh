#!/usr/bin/env bash
# threads-bench.sh: collbench's two issuing modes (--threads per-gpu and
# --threads one) against NCCL's benchmark in its two (-t N -g 1 and
# -t 1 -g N), on the GPUs CUDA_VISIBLE_DEVICES lists (default 0,1).
#
#   PASSES=4 CYCLES=10 scripts/threads-bench.sh OUTDIR
#
# Small messages (8 B - 64 KiB): scripts/parity.sh runs the four variants
# alternately (ref, refg, cb, cb1), and parity-report.py judges three pairs
# within each latency band: per-gpu against NCCL's -t N -g 1, one against
# NCCL's -t 1 -g N, and per-gpu against one (per-gpu must be at parity or
# faster). Large messages: allreduce 64 MiB - 1 GiB in both modes, REPS
# alternating runs each; the medians' algbw (busbw in proportion; 0 on one GPU) must agree within 1%.
# Exit 0 when every verdict is OK, 1 otherwise, 2 on bad input.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
W=${1:-/tmp/collbench-threads}
REPS=${REPS:-3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1} NCCL_NVLS_ENABLE=0
COLLS=${COLLS:-allreduce allgather broadcast sendrecv}
case $REPS in *[!0-9]*|'') echo "threads-bench.sh: REPS takes a whole number (got $REPS)" >&2; exit 2 ;; esac
mkdir -p "$W" || { echo "threads-bench.sh: cannot make $W" >&2; exit 2; }
# parity.sh judges ref against cb itself (exit 1 on a FAIL); the pairs are
# judged below, so only its bad-input exit stops this script.
COLLS=$COLLS VARIANTS="ref refg cb cb1" BIN=$BIN scripts/parity.sh "$W" > "$W/parity.log" 2>&1
[ $? -eq 2 ] && { tail -5 "$W/parity.log" >&2; exit 2; }
status=0
for pair in ref,cb refg,cb1 cb1,cb; do
  python3 scripts/parity-report.py --pair "$pair" "$W" "$COLLS" > "$W/pair-${pair/,/-}.txt" || exit 2
  verdict=$(grep "WITHIN-BAND" "$W/pair-${pair/,/-}.txt" | tail -1)
  echo "small messages, ${pair/,/ against }: ${verdict#SAME-PROGRAM }"
  case $verdict in *"WITHIN-BAND OK"*) ;; *) status=1 ;; esac
done
for r in $(seq 1 "$REPS"); do
  for mode in per-gpu one; do
    "$BIN" allreduce --threads "$mode" --sizes 64M:1G -n 20 -w 5 -q -o "$W/big-$mode-$r.json" > /dev/null 2>&1 ||
      { echo "threads-bench.sh: collbench --threads $mode failed (see $W/big-$mode-$r.json)" >&2; exit 2; }
  done
done
python3 - "$W" "$REPS" <<'PY' || status=1
import json, statistics as st, sys
w, reps = sys.argv[1], int(sys.argv[2])
bw = {}
for mode in ("per-gpu", "one"):
    for r in range(1, reps + 1):
        for row in json.load(open(f"{w}/big-{mode}-{r}.json"))["results"]:
            bw.setdefault(row["size_bytes"], {}).setdefault(mode, []).append(row["out_of_place"]["algbw_gbps"])
bad = 0
for size in sorted(bw):
    a, b = st.median(bw[size]["per-gpu"]), st.median(bw[size]["one"])
    d = (b - a) / a * 100
    bad += abs(d) > 1
    print(f"large messages, {size >> 20} MiB allreduce algbw: per-gpu {a:.1f} GB/s, one {b:.1f} GB/s ({d:+.1f}%)")
print("LARGE", "OK (within 1%)" if not bad else "FAIL (more than 1% apart)")
sys.exit(1 if bad else 0)
PY
exit $status
