#!/usr/bin/env bash
# Doctor's accuracy on a real GPU host, against what can be planted there
# without changing the machine's settings. Each condition runs RUNS times
# (default 10) with doctor --quick (MODE="" for the full one); the table
# says, per condition: right (exit and verdict as planted), false (a clean
# run not healthy, or a part named that nothing was planted in), missed
# (the planted part not named), the wall times and the counter lines.
#
# Conditions:
#   clean            nothing planted: healthy, no part named
#   copy:G compute:G a copy or compute loop (PyTorch) on GPU G, or on every
#                    GPU (G=all): each loaded GPU named with the loop's pid
#   p2poff           NCCL_P2P_DISABLE=1: the host named once, as a host
#                    whose every GPU pair is slow, no GPU or pair on its own
#   shmoff           NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1: the same
#   late:R           COLLBENCH_FAULTS=late-rank:R:$LATE (rank R's thread
#                    issues every operation late): rank R named, no other
#   subset:A,B       CUDA_VISIBLE_DEVICES=A,B: healthy, over exactly those
#
#   RUNS=10 CONDITIONS="clean copy:1 compute:1 copy:all compute:all" scripts/doctor-real.sh
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
RUNS=${RUNS:-10}
MODE=${MODE---quick}
OUTDIR=${OUT:-gpu-logs}
WORK=${WORK:-/tmp/collbench-doctor-real}
mkdir -p "$OUTDIR" "$WORK"
export NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$ngpu" -ge 1 ] || { echo "no GPU"; exit 2; }
CONDITIONS=${CONDITIONS:-clean copy:1 compute:1 copy:all compute:all}
LATE=${LATE:-20ms}
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
loads=()
# start_loads KIND GPUS: a copy loop (1 GiB back to back) or a compute loop
# (matrix products) on each GPU listed, until stop_loads.
start_loads() {
  local kind=$1; shift
  for g in "$@"; do
    "$py" -c "
import torch, sys
d = 'cuda:$g'
if '$kind' == 'copy':
    a = torch.empty(1 << 30, dtype=torch.uint8, device=d); b = torch.empty_like(a)
    step = lambda: b.copy_(a)
else:
    a = torch.randn(8192, 8192, device=d); b = torch.randn(8192, 8192, device=d)
    step = lambda: torch.mm(a, b)
step(); torch.cuda.synchronize(d)
print('running', flush=True)
while True:
    step()
" > "$WORK/load-$g.txt" 2>&1 &
    loads+=($!)
  done
  for g in "$@"; do
    for _ in $(seq 1 120); do grep -q running "$WORK/load-$g.txt" && break; sleep 0.25; done
  done
}
stop_loads() { for p in "${loads[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; loads=(); }
trap stop_loads EXIT
printf '%-12s %4s %5s %5s %6s %s\n' condition runs right false missed "wall s (min-max), counter lines"
for cond in $CONDITIONS; do
  kind=${cond%%:*}; where=${cond#*:}
  gpus=() env=() expect=gpus
  case $kind in
    clean) expect=healthy ;;
    p2poff) env=(NCCL_P2P_DISABLE=1); expect=hostpairs ;;
    shmoff) env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1); expect=hostpairs ;;
    late) env=("COLLBENCH_FAULTS=late-rank:$where:$LATE"); expect=rank:$where ;;
    subset) env=("CUDA_VISIBLE_DEVICES=$where"); expect=subset:$where ;;
    *) if [ "$where" = all ]; then gpus=($(seq 0 $((ngpu - 1)))); else gpus=($where); fi ;;
  esac
  [ ${#gpus[@]} -gt 0 ] && start_loads "$kind" "${gpus[@]}"
  pids=" ${loads[*]} "
  right=0 false=0 missed=0 walls="" ctr=""
  for i in $(seq 1 "$RUNS"); do
    t0=$(date +%s.%N)
    env "${env[@]}" timeout -k 10 300 "$BIN" doctor $MODE -o "$WORK/d.json" > "$WORK/d.txt" 2>&1; rc=$?
    walls="$walls $(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")"
    cp "$WORK/d.txt" "$WORK/doctor-$kind-$where-$i.txt" 2>/dev/null
    verdict=$(python3 - "$WORK/d.json" "$rc" "${gpus[*]:-}" "$pids" "$expect" <<'PY'
import json, re, sys
try:
    rep = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("missed 0"); sys.exit()
rc, loaded, pids, expect = int(sys.argv[2]), [int(g) for g in sys.argv[3].split()], set(sys.argv[4].split()), sys.argv[5]
fails = [f for f in rep.get("findings", []) if f["severity"] in ("FAIL", "WARN")]
named = {}  # rank -> text of the findings naming it alone (a GPU, rank or its links)
for f in fails:
    if f.get("stage") not in ("gpu", "host", "pair", "world", "data"):
        continue
    if len(f.get("ranks", [])) > 2:
        continue  # a host or world finding names no one part
    for r in f.get("ranks", []):
        named.setdefault(r, []).append(f.get("msg", "") + " " + f.get("cause", ""))
counters = sum(1 for f in rep.get("findings", []) if f.get("stage") == "counters" or f.get("kind", "").startswith("counter") or "nvlink" in f.get("kind", ""))
kinds = {f.get("kind") for f in fails}
if expect == "healthy" or expect.startswith("subset:"):
    ok = rc == 0 and rep.get("healthy") and not named
    if ok and expect.startswith("subset:"):
        ok = len(rep.get("gpus", [])) == len(expect[7:].split(","))
    print("right" if ok else "false", counters)
elif expect == "hostpairs":
    host = any(f.get("kind") == "slow-host-pairs" for f in fails)
    print(("false" if named else "right") if rc == 1 and host else "missed", counters)
elif expect.startswith("rank:"):
    r = int(expect[5:])
    others = [f for f in fails if f.get("stage") != "counters" and f.get("ranks") and r not in f["ranks"]]
    print(("false" if others else "right") if rc == 1 and r in named else "missed", counters)
else:
    missed = [g for g in loaded if g not in named or not any(re.search(r"pid (%s)\b" % "|".join(pids), t) or "another workload" in t for t in named[g])]
    extra = [r for r in named if r not in loaded]
    print("missed" if missed else ("false" if extra else "right"), counters)
PY
)
    case ${verdict%% *} in right) right=$((right + 1)) ;; false) false=$((false + 1)) ;; missed) missed=$((missed + 1)) ;; esac
    ctr="$ctr ${verdict#* }"
  done
  stop_loads
  printf '%-12s %4d %5d %5d %6d %s\n' "$cond" "$RUNS" "$right" "$false" "$missed" "$(echo $walls | tr ' ' '\n' | sort -n | sed -n '1p;$p' | paste -sd-), counters:$ctr"
done
# Every run's text, in one file (a run's own copy is in $WORK).
tar czf "$OUTDIR/doctor-real.tgz" -C "$WORK" $(cd "$WORK" && ls doctor-*.txt 2>/dev/null) 2>/dev/null
