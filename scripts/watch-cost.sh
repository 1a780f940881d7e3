#!/usr/bin/env bash
# watch-cost.sh: what collbench watch's plugin costs a running PyTorch job:
# PAIRS alternating runs of one job without the plugin and with it (its
# collector listening), each JOB_S seconds; the slowest rank's median step
# time of each run, the medians of both sides, their difference and each
# side's spread. Exit 1 when the plugin's side is slower by more than
# LIMIT_PCT (default 1).
#
# The job: a training-like step (4 matmuls of 2048^2, an allreduce of
# 16 MiB, an allgather of 1 MiB per rank, 8 allreduces of 4 KiB, a
# broadcast), one process per GPU; SHARE=N runs N ranks on GPU 0, each its
# own simulated host (NCCL_HOSTID: NCCL joins them over sockets).
# NCCL_PRELOAD=PATH/libnccl.so.2 puts another NCCL under PyTorch
# (LD_PRELOAD), to measure the plugin on that version's interface.
#
#   BIN=bin/collbench SHARE=2 PAIRS=5 scripts/watch-cost.sh
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
WORK=${WORK:-/tmp/collbench-watch-cost}
PAIRS=${PAIRS:-5}
JOB_S=${JOB_S:-20}
SHARE=${SHARE:-0}
LIMIT_PCT=${LIMIT_PCT:-1}
PORT=${PORT:-29653}
plugin=$(dirname "$BIN")/libcollbench-watch.so
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
[ -f "$plugin" ] || { echo "watch-cost: no plugin at $plugin (make plugin)"; exit 2; }
case "$SHARE" in *[!0-9]*|'') echo "watch-cost: SHARE=$SHARE: give a number of ranks"; exit 2 ;; esac
if [ "$SHARE" -gt 0 ]; then n=$SHARE; else n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
[ "${n:-0}" -ge 1 ] || { echo "watch-cost: no GPU"; exit 2; }
mkdir -p "$WORK"
cat > "$WORK/job.py" <<'PY'
import json, os, statistics, sys, time, torch, torch.distributed as dist
share = os.environ.get("WATCH_COST_SHARE") == "1"
if share:
    os.environ["NCCL_HOSTID"] = "watch-cost-host%s" % os.environ["RANK"]
dist.init_process_group("nccl")
torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
r, n = dist.get_rank(), dist.get_world_size()
x = torch.randn(4 << 20, device="cuda"); y = torch.randn(256 << 10, device="cuda"); s = torch.randn(1024, device="cuda")
out = [torch.empty_like(y) for _ in range(n)]; w = torch.randn(2048, 2048, device="cuda")
stop = torch.zeros(1, device="cuda"); end = time.time() + float(sys.argv[1]); times = []
while True:
    t0 = time.time()
    for _ in range(4):
        z = w @ w
    dist.all_reduce(x); dist.all_gather(out, y)
    for _ in range(8):
        dist.all_reduce(s)
    if r == 0 and time.time() > end:
        stop.fill_(1)
    dist.broadcast(stop, 0)
    torch.cuda.synchronize()
    times.append(time.time() - t0)
    if stop.item():
        break
print(json.dumps({"rank": r, "steps": len(times), "median_ms": 1000 * statistics.median(times[20:] or times)}), flush=True)
dist.destroy_process_group()
PY
[ "$SHARE" -gt 0 ] && export WATCH_COST_SHARE=1
export COLLBENCH_TOKEN=${COLLBENCH_TOKEN:-watch-cost-secret}
job() { # job LOG [plugin]
  local env=(LD_PRELOAD=${NCCL_PRELOAD:-})
  [ "${2:-}" = plugin ] && env+=(NCCL_PROFILER_PLUGIN="$plugin" COLLBENCH_WATCH=127.0.0.1:$PORT)
  env "${env[@]}" timeout -k 10 $((JOB_S + 120)) "$py" -m torch.distributed.run --standalone --nproc-per-node "$n" "$WORK/job.py" "$JOB_S" > "$1" 2>&1
}
medstep() { python3 -c "import json,re,sys; v=[json.loads(m)['median_ms'] for m in re.findall(r'\{[^{}]*\"median_ms\"[^{}]*\}', open(sys.argv[1]).read())]; print('%.3f' % max(v) if v else 'nan')" "$1"; }
timeout -k 5 $((PAIRS * (2 * JOB_S + 120) + 60)) "$BIN" watch --listen 127.0.0.1:$PORT --for $((PAIRS * (2 * JOB_S + 100)))s > "$WORK/collector.txt" 2>&1 &
wpid=$!; sleep 1
offs=""; ons=""
for i in $(seq 1 "$PAIRS"); do
  job "$WORK/off-$i.log"; off=$(medstep "$WORK/off-$i.log")
  job "$WORK/on-$i.log" plugin; on=$(medstep "$WORK/on-$i.log")
  echo "pair $i: step time (the slowest rank's median) without the plugin $off ms, with it $on ms"
  offs="$offs $off"; ons="$ons $on"
done
kill -INT $wpid 2>/dev/null; wait $wpid 2>/dev/null
grep -h "profiler interface\|processes" "$WORK/collector.txt" | tail -2
python3 - "$offs" "$ons" "$LIMIT_PCT" <<'PY'
import math, statistics, sys
off, on = ([float(v) for v in a.split()] for a in sys.argv[1:3])
if not off or any(math.isnan(v) for v in off + on):
    sys.exit("watch-cost: a job wrote no step time: see its log")
mo, mn = statistics.median(off), statistics.median(on)
d = (mn - mo) / mo * 100
print(f"step time: without {mo:.3f} ms (runs {min(off):.3f}-{max(off):.3f}, spread {(max(off) - min(off)) / mo * 100:.1f}%), "
      f"with {mn:.3f} ms (runs {min(on):.3f}-{max(on):.3f}, spread {(max(on) - min(on)) / mn * 100:.1f}%): {d:+.2f}%")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
