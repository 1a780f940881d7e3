#!/usr/bin/env bash
# shellcheck disable=SC2086 # ARGS, COMPARE_ARGS and the repeat flag are words to pass on
# compare-noise.sh: how often `collbench compare` calls two runs of the same
# build on the same machine a regression (false alarms), and whether it still
# catches a planted slowdown. Runs RUNS+1 sweeps of COLL (allreduce) on
# BACKEND (cpu; nccl on GPUs), each with --stable (CYCLES=N: --cycles N)
# and ARGS, compares every run with the one before it, then compares
# each run with the next one slowed by SLOW percent (every time multiplied,
# every bandwidth divided: the same noisy data, shifted).
#
#   RUNS=20 SLOW=25 scripts/compare-noise.sh
#   BACKEND=nccl SIZES=1M:1G SLOW=5 scripts/compare-noise.sh
#
# Prints one line per pair and a summary; exits 1 on any same-build FAIL
# (compare's exit 5, inconclusive, is no false alarm), any slowed pair that
# passes, or fewer than MIN_PASS same-build PASS or MIN_CAUGHT slowed
# pairs caught (both 0 by default: on a noisy host the honest verdict is
# inconclusive).
set -uo pipefail
BIN=${BIN:-bin/collbench}
RUNS=${RUNS:-20}
CYCLES=${CYCLES:-stable}
SLOW=${SLOW:-10}
SIZES=${SIZES:-8:32M}
BACKEND=${BACKEND:-cpu}
COLL=${COLL:-allreduce}
ARGS=${ARGS:-}
COMPARE_ARGS=${COMPARE_ARGS:-} # thresholds, e.g. --time-threshold 15 --busbw-threshold 15
MIN_PASS=${MIN_PASS:-0}
MIN_CAUGHT=${MIN_CAUGHT:-0}
command -v python3 >/dev/null || { echo "compare-noise.sh: needs python3 (to plant the slowdown)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "compare-noise.sh: no $BIN: run make build first" >&2; exit 2; }
dir=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] && mkdir -p "$dir" || trap 'rm -rf "$dir"' EXIT
for i in $(seq 0 "$RUNS"); do
  if [ "$CYCLES" = stable ]; then repeat=--stable; else repeat="-N $CYCLES"; fi
  timeout -k 10 "${RUN_TIMEOUT:-900}" "$BIN" "$COLL" --backend "$BACKEND" --sizes "$SIZES" $repeat $ARGS -q -o "$dir/run$i.json" > /dev/null || { echo "compare-noise.sh: run $i failed" >&2; exit 2; }
done
slowdown() { # slowdown IN OUT: every row SLOW percent slower
  python3 - "$1" "$2" "$SLOW" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); f = 1 + float(sys.argv[3]) / 100
for r in d["results"]:
    for k in ("out_of_place", "in_place"):
        h = r.get(k)
        if not h:
            continue
        h["time_us"] *= f; h["algbw_gbps"] /= f; h["busbw_gbps"] /= f
        c = h.get("cycles")
        if c:
            c["times_us"] = [t * f for t in c["times_us"]]
            c["time_min_us"] *= f; c["time_max_us"] *= f
            c["busbw_min_gbps"] /= f; c["busbw_max_gbps"] /= f
json.dump(d, open(sys.argv[2], "w"))
PY
}
pass=0 caught=0 falsefail=0 unjudged=0 missed=0
verdict() { # verdict EXIT: compare's exit code in words
  case $1 in 0) echo PASS ;; 1) echo FAIL ;; 5) echo INCONCLUSIVE ;; *) echo "ERROR($1)" ;; esac
}
for i in $(seq 1 "$RUNS"); do
  "$BIN" compare $COMPARE_ARGS "$dir/run$((i-1)).json" "$dir/run$i.json" > "$dir/same$i.txt" 2>&1; rc=$?
  v=$(verdict $rc)
  case $rc in 0) pass=$((pass+1)) ;; 1) falsefail=$((falsefail+1)) ;; esac
  slowdown "$dir/run$i.json" "$dir/slow$i.json"
  "$BIN" compare $COMPARE_ARGS "$dir/run$((i-1)).json" "$dir/slow$i.json" > "$dir/slowed$i.txt" 2>&1; rc=$?
  case $rc in 1) caught=$((caught+1)); w=caught ;; 5) unjudged=$((unjudged+1)); w="said inconclusive" ;; *) missed=$((missed+1)); w=MISSED ;; esac
  "$BIN" compare $COMPARE_ARGS --format json -o "$dir/same$i.json" "$dir/run$((i-1)).json" "$dir/run$i.json" > /dev/null 2>&1 || true
  "$BIN" compare $COMPARE_ARGS --format json -o "$dir/slowed$i.json" "$dir/run$((i-1)).json" "$dir/slow$i.json" > /dev/null 2>&1 || true
  echo "pair $i: same build $v; ${SLOW}% slower: $w"
done
echo "same build: $pass of $RUNS PASS, $falsefail FAIL (want none), the rest inconclusive; ${SLOW}% slowdown: caught in $caught, inconclusive in $unjudged, missed (PASS) in $missed (want none)"
echo "(MIN_PASS=$MIN_PASS and MIN_CAUGHT=$MIN_CAUGHT also asked: PASS and caught counts)"
[ "$falsefail" -eq 0 ] && [ "$missed" -eq 0 ] && [ "$pass" -ge "$MIN_PASS" ] && [ "$caught" -ge "$MIN_CAUGHT" ]
