#!/usr/bin/env bash
# watch-plants.sh: how often collbench watch names a planted slow part of a
# running PyTorch job on this host's GPUs, and nothing else.
#
# Each of JOBS fresh jobs (torchrun, one process per GPU, collbench's NCCL
# plugin loaded) runs EPISODES episodes: a plant runs ON_S seconds, then
# nothing for OFF_S. The plants cycle through PLANTS and the victims
# through the GPUs:
#   copy     another program copies 1 GiB back to back on the victim's GPU
#   compute  another program's bf16 matmuls of 8192^2 back to back on the victim's GPU
#   job2     a second training-like PyTorch loop (matmuls, a sync a step)
#   sleep    the victim rank's host thread sleeps 5 ms before each step
#   p2p      another program copies 1 GiB from the victim's GPU to the next
# An episode passes when the victim rank is named within 15 s of the plant's
# start with the plant's cause, stays named while the plant runs, and no
# other rank is named from the plant's start to the next plant's (for p2p:
# the victim's GPU named for NVLink traffic beyond the job's NCCL operations, and
# nothing but it and the GPU it copies to). The
# table (plant x episodes named x p50/p90 time x others named x cleared
# while the plant ran) goes to stdout and $OUT/watch-plants.json; the
# script exits 0 when every episode passed (scripts/watchplants.py judges).
#
#   BIN=bin/collbench JOBS=4 EPISODES=25 scripts/watch-plants.sh   # 20 of each plant
#
# FIRST_JOB=J numbers the jobs from J (episodes and victims go on where job
# J-1 stopped), so a run can come in parts, one per command of a lent
# machine; scripts/watchplants.py table pools their watch-plants.json.
#
# SHARE=N runs N ranks on GPU 0, each its own simulated host (NCCL_HOSTID;
# NCCL joins them over sockets): on a machine of one GPU only the sleep
# plant means anything (PLANTS=sleep), and it checks the whole path, not
# the rate: the ranks' kernels take turns on the one GPU, which watch names
# (rank 1's GPU starts late, "their kernels take turns on it"), so a
# sleeping rank 1 is masked and rank 1 stands beside a sleeping rank 0
# (H200, 2026-12-02: 1 of 6 episodes passed, rank 0 named each time in
# 3.2 s). For example with another NCCL: NCCL_PRELOAD=PATH/libnccl.so.2 puts that
# library under PyTorch (LD_PRELOAD).
# Needs nvidia-smi, PyTorch (/opt/torch/.venv/bin/python or python3) and the
# plugin beside BIN (make plugin). Every command is bounded by timeout.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
OUTDIR=${OUT:-gpu-logs}
WORK=${WORK:-/tmp/collbench-watch-plants}
JOBS=${JOBS:-2}
FIRST_JOB=${FIRST_JOB:-1}
EPISODES=${EPISODES:-12}
ON_S=${ON_S:-6}
OFF_S=${OFF_S:-4}
PLANTS=${PLANTS:-copy compute sleep job2 p2p}
PORT=${PORT:-29650}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUTDIR" "$WORK"
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
SHARE=${SHARE:-0}
case "$SHARE" in *[!0-9]*|'') echo "watch-plants: SHARE=$SHARE: give a number of ranks"; exit 2 ;; esac
case "$FIRST_JOB" in *[!0-9]*|''|0) echo "watch-plants: FIRST_JOB=$FIRST_JOB: give a job number from 1"; exit 2 ;; esac
if [ "$SHARE" -gt 0 ]; then
  [ "$PLANTS" = sleep ] || { echo "watch-plants: SHARE runs every rank on one GPU: only PLANTS=sleep names one of them"; exit 2; }
  ngpu=$SHARE
  export WATCH_PLANTS_SHARE=1
else
  [ "$ngpu" -ge 2 ] || { echo "watch-plants: needs 2 GPUs or more (found ${ngpu:-0}); SHARE=2 PLANTS=sleep shares one"; exit 2; }
fi
export RANKS=$ngpu
plugin=$("$BIN" watch --plugin-path 2>&1) || { echo "watch-plants: $plugin"; exit 2; }

# The job: a training-like step (4 matmuls of 2048^2, an allreduce of
# 64 MiB, an allgather of 4 MiB, a broadcast), until $WORK/stop exists.
# Rank r sleeps 5 ms before each step while $WORK/sleep-r exists. Rank 0
# touches $WORK/ready after 50 steps.
cat > "$WORK/job.py" <<'PY'
import json, os, statistics, sys, time, torch, torch.distributed as dist
work = sys.argv[1]
share = os.environ.get("WATCH_PLANTS_SHARE") == "1"
if share:  # every rank on GPU 0, each its own simulated host
    os.environ["NCCL_HOSTID"] = "watch-plants-host%s" % os.environ["RANK"]
torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
x = torch.randn(16 << 20, device="cuda"); y = torch.randn(1 << 20, device="cuda")
out = [torch.empty_like(y) for _ in range(n)]; w = torch.randn(2048, 2048, device="cuda")
stop = torch.zeros(1, device="cuda"); flag = os.path.join(work, "sleep-%d" % r)
times, steps, limit = [], 0, time.time() + float(sys.argv[2])
while True:
    t0 = time.time()
    if os.path.exists(flag):
        time.sleep(0.005)
    for _ in range(4):
        z = w @ w
    dist.all_reduce(x); dist.all_gather(out, y)
    if r == 0 and (os.path.exists(os.path.join(work, "stop")) or time.time() > limit):
        stop.fill_(1)
    dist.broadcast(stop, 0)
    torch.cuda.synchronize()
    times.append(time.time() - t0); steps += 1
    if r == 0 and steps == 50:
        open(os.path.join(work, "ready"), "w").close()
    if stop.item():
        break
print(json.dumps({"rank": r, "steps": steps, "median_ms": 1000 * statistics.median(times[10:] or times)}), flush=True)
dist.destroy_process_group()
PY

# The planter: CUDA started on every GPU before the first episode, then
# each episode's plant for ON_S seconds and a pause of OFF_S; one JSON
# line per episode with the plant's start and stop (epoch seconds).
cat > "$WORK/planter.py" <<'PY'
import json, os, sys, time, torch
work, on, off, first, plants = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
n = int(os.environ["RANKS"])  # the victims: one rank per GPU, or SHARE ranks on GPU 0
for d in range(torch.cuda.device_count()):
    torch.empty(1, device="cuda:%d" % d)
episodes = int(os.environ["EPISODES"])
while not os.path.exists(os.path.join(work, "ready")):
    time.sleep(0.1)
time.sleep(off)
for e in range(episodes):
    k = first + e
    # round k // len(plants) shifts every plant's victim by one: over n
    # rounds each plant meets every rank (with one plant, victims alternate)
    plant, v = plants[k % len(plants)], (k % len(plants) + k // len(plants)) % n
    dev = "cuda:%d" % v
    if plant == "sleep":
        t0 = time.time(); open(os.path.join(work, "sleep-%d" % v), "w").close()
        time.sleep(on)
        os.remove(os.path.join(work, "sleep-%d" % v)); t1 = time.time()
    else:
        if plant in ("copy", "p2p"):
            a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
            b = torch.empty_like(a, device="cuda:%d" % ((v + 1) % n) if plant == "p2p" else dev)
            work_once = lambda: b.copy_(a)
        elif plant == "compute":
            m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
            work_once = lambda: m @ m
        else:  # job2: a training-like loop of its own, a sync a step
            m = torch.randn(4096, 4096, device=dev)
            def work_once():
                for _ in range(8):
                    z = torch.relu(m @ m)
                z.sum().item()
        torch.cuda.synchronize(dev)
        t0 = time.time()
        while time.time() - t0 < on:
            work_once()
            if plant != "job2":
                torch.cuda.synchronize(dev)
        t1 = time.time()
        del work_once
        torch.cuda.empty_cache()
    print(json.dumps({"episode": k, "plant": plant, "victim": v, "start": t0, "stop": t1}), flush=True)
    time.sleep(off)
open(os.path.join(work, "stop"), "w").close()
PY

export COLLBENCH_TOKEN=watch-plants-secret
total=$((EPISODES * (ON_S + OFF_S) + OFF_S + 120))
for j in $(seq "$FIRST_JOB" "$((FIRST_JOB + JOBS - 1))"); do
  rm -f "$WORK"/ready "$WORK"/stop "$WORK"/sleep-*
  timeout -k 5 $((total + 60)) "$BIN" watch --listen 127.0.0.1:$PORT --for $((total + 30))s -o "$WORK/watch-$j.json" > "$WORK/watch-$j.txt" 2>&1 &
  wpid=$!; sleep 1
  LD_PRELOAD=${NCCL_PRELOAD:-} NCCL_PROFILER_PLUGIN=$plugin COLLBENCH_WATCH=127.0.0.1:$PORT timeout -k 10 "$total" "$py" -m torch.distributed.run --standalone \
    --nproc-per-node "$ngpu" "$WORK/job.py" "$WORK" "$total" > "$WORK/job-$j.log" 2>&1 &
  jpid=$!
  EPISODES=$EPISODES timeout -k 5 "$total" "$py" "$WORK/planter.py" "$WORK" "$ON_S" "$OFF_S" $(((j - 1) * EPISODES)) $PLANTS > "$WORK/plants-$j.jsonl" 2> "$WORK/planter-$j.err"
  prc=$?
  touch "$WORK/stop"
  wait $jpid; jrc=$?
  # The first SIGINT ends the collector with its record written: timed.
  cpid=$(pgrep -P $wpid | head -1); t0=$(date +%s.%N)
  kill -INT "${cpid:-$wpid}" 2>/dev/null; wait $wpid; wrc=$?
  python3 -c "print('job $j: job exit $jrc, planter exit $prc; collector exit $wrc, %.2f s after its first SIGINT' % ($(date +%s.%N) - $t0))"
  tail -1 "$WORK/watch-$j.txt"
  [ "$prc" -eq 0 ] || tail -5 "$WORK/planter-$j.err"
done

python3 scripts/watchplants.py judge "$WORK" "$FIRST_JOB" "$((FIRST_JOB + JOBS - 1))" "$OFF_S" "$ngpu" "$OUTDIR/watch-plants.json"
