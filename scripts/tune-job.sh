#!/usr/bin/env bash
# tune-job.sh: does collbench tune pay off in a real training step on this
# host's GPUs? It runs a PyTorch job (torchrun, one process per GPU) in
# three phases:
#   1. record: the job runs STEPS steps with collbench watch's plugin
#      loaded and a collector keeping its record (what the job issues:
#      collective, type, count, calls);
#   2. tune:   collbench tune --from that record, on the same GPUs, writes
#      a tuner file (BUDGET at most);
#   3. pairs:  PAIRS pairs of runs of STEPS steps, one without a tuner and
#      one with collbench's tuner applying the file (the plugin's library
#      as NCCL_TUNER_PLUGIN, COLLBENCH_TUNER_FILE), which goes first
#      alternating; each run's median step time after WARM steps.
# The verdict (each pair's change, their median and spread) goes to stdout
# and $OUT/tune-job.json. tune loads NCCL_LIB (default: PyTorch's NCCL),
# the library the job runs on.
#
# MODE picks the job: ddp (DistributedDataParallel over an MLP of
# LAYERS x WIDTH^2 weights: bucketed allreduces of the gradients) or fsdp
# (FullyShardedDataParallel over the same: allgathers and reduce-scatters).
#
#   BIN=bin/collbench MODE=ddp PAIRS=5 scripts/tune-job.sh
# Needs nvidia-smi, PyTorch (/opt/torch/.venv/bin/python or python3) and the
# plugin beside BIN (make plugin). Every command is bounded by timeout.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/collbench}
OUTDIR=${OUT:-gpu-logs}
WORK=${WORK:-/tmp/collbench-tune-job}
MODE=${MODE:-ddp}
STEPS=${STEPS:-300}
WARM=${WARM:-50}
PAIRS=${PAIRS:-5}
LAYERS=${LAYERS:-8}
WIDTH=${WIDTH:-4096}
BUDGET=${BUDGET:-120s}
PORT=${PORT:-29660}
# tune measures with the NCCL the job loads (PyTorch's, where it has one).
NCCL_LIB=${NCCL_LIB:-$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUTDIR" "$WORK"
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$ngpu" -ge 2 ] || { echo "tune-job: needs 2 GPUs or more (found ${ngpu:-0})"; exit 2; }
case "$MODE" in ddp|fsdp) ;; *) echo "tune-job: MODE=$MODE: give ddp or fsdp"; exit 2 ;; esac
plugin=$("$BIN" watch --plugin-path 2>&1) || { echo "tune-job: $plugin"; exit 2; }

# The job: STEPS training steps of an MLP (forward, backward, SGD), the
# step time taken with the GPU synchronised; rank 0 prints the median of
# the steps after WARM as JSON.
cat > "$WORK/job.py" <<'PY'
import json, os, statistics, sys, time, torch, torch.distributed as dist
mode, steps, warm, layers, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).cuda()
if mode == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(model)
else:
    from torch.distributed.fsdp import FullyShardedDataParallel
    model = FullyShardedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, width, device="cuda")
times = []
for s in range(steps):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    model(x).float().pow(2).mean().backward()
    opt.step()
    torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
dist.barrier()
if dist.get_rank() == 0:
    t = times[warm:]
    print(json.dumps({"median_ms": statistics.median(t) * 1e3, "p90_ms": sorted(t)[int(len(t) * 0.9)] * 1e3, "steps": len(t)}))
dist.destroy_process_group()
PY

job() { # job LOG [ENV...]: one run of the job, bounded
  local log=$1; shift
  env "$@" timeout -k 10 600 "$py" -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
    "$WORK/job.py" "$MODE" "$STEPS" "$WARM" "$LAYERS" "$WIDTH" > "$log" 2>&1
}

# 1. What the job issues, from collbench watch's record.
export COLLBENCH_TOKEN=tune-job-secret
timeout -k 5 700 "$BIN" watch --listen 127.0.0.1:$PORT --for 660s -o "$WORK/watch.json" > "$WORK/watch.txt" 2>&1 &
wpid=$!; sleep 1
job "$WORK/record.log" NCCL_PROFILER_PLUGIN="$plugin" COLLBENCH_WATCH=127.0.0.1:$PORT
jrc=$?
cpid=$(pgrep -P $wpid | head -1); kill -INT "${cpid:-$wpid}" 2>/dev/null; wait $wpid
[ "$jrc" -eq 0 ] || { echo "tune-job: the recorded job failed (exit $jrc)"; tail -20 "$WORK/record.log"; exit 3; }

# 2. Tune what it issues.
timeout -k 10 900 "$BIN" tune --from "$WORK/watch.json" ${NCCL_LIB:+--nccl-lib "$NCCL_LIB"} --budget "$BUDGET" -o "$WORK/tune.json" --tuner-file "$WORK/tuned.csv" \
  > "$WORK/tune.txt" 2> "$WORK/tune.err"
trc=$?
cat "$WORK/tune.txt"
[ "$trc" -eq 0 ] || { echo "tune-job: tune failed (exit $trc)"; tail -5 "$WORK/tune.err"; exit 3; }

# 3. Alternating pairs: without a tuner, and with collbench's tuner.
for p in $(seq 1 "$PAIRS"); do
  for arm in $( [ $((p % 2)) -eq 1 ] && echo "tuned base" || echo "base tuned" ); do
    if [ "$arm" = tuned ]; then
      job "$WORK/pair-$p-$arm.log" NCCL_TUNER_PLUGIN="$plugin" COLLBENCH_TUNER_FILE="$WORK/tuned.csv"
    else
      job "$WORK/pair-$p-$arm.log"
    fi
    echo "pair $p $arm: exit $? $(grep -h median_ms "$WORK/pair-$p-$arm.log" | tail -1)"
  done
done

python3 - "$WORK" "$PAIRS" "$MODE" "$OUTDIR/tune-job.json" <<'PY'
import json, statistics, sys
work, pairs, mode, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def median_ms(p, arm):
    for line in open("%s/pair-%d-%s.log" % (work, p, arm)):
        if line.startswith("{") and "median_ms" in line:
            return json.loads(line)["median_ms"]
    return None
rows = []
for p in range(1, pairs + 1):
    b, t = median_ms(p, "base"), median_ms(p, "tuned")
    rows.append({"pair": p, "base_ms": b, "tuned_ms": t, "change_pct": None if not b or t is None else (t / b - 1) * 100})
changes = [r["change_pct"] for r in rows if r["change_pct"] is not None]
verdict = {"mode": mode, "pairs": rows, "median_change_pct": statistics.median(changes) if changes else None,
           "spread_pct": (max(changes) - min(changes)) / 2 if len(changes) > 1 else None}
for r in rows:
    print("pair %d: without %s ms, with the tuner %s ms, %s" % (r["pair"], r["base_ms"], r["tuned_ms"],
          "n/a" if r["change_pct"] is None else "%+.2f%%" % r["change_pct"]))
print("median change %s over %d pairs (half-range %s)" % (
    "n/a" if verdict["median_change_pct"] is None else "%+.2f%%" % verdict["median_change_pct"], len(changes),
    "n/a" if verdict["spread_pct"] is None else "%.2f%%" % verdict["spread_pct"]))
json.dump(verdict, open(out, "w"), indent=2)
PY
