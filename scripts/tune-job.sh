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
# the library the job runs on: where NCCL_LIB is given, every run of the
# job loads it under PyTorch too (LD_PRELOAD), so that tune and the job
# run one NCCL (NCCL 2.30 and later: the chunk sizes too).
#
# MODE picks the job: ddp (DistributedDataParallel over an MLP of
# LAYERS x WIDTH^2 weights: bucketed allreduces of the gradients) or fsdp
# (FullyShardedDataParallel over the same, each layer its own unit: per
# layer an allgather of WIDTH^2 floats and a reduce-scatter of its gradient).
#
#   BIN=bin/collbench MODE=ddp PAIRS=5 scripts/tune-job.sh
#   CHECK=tuned.csv PAIRS=7 scripts/tune-job.sh   # a given file, the pairs only
#
# Verdict, from the pairs (a sign test): SLOWER where every pair ran slower
# with the file (5 of 5 by chance: 1 in 32), FASTER where every pair ran
# faster, else WITHIN NOISE. The script exits 1 on SLOWER, so a file that
# makes the job slower fails, as tune --check fails a slower line.
#
# SHARE=N runs N processes on GPU 0, each its own simulated host (its own
# NCCL_HOSTID, so NCCL joins them over its socket transport): on a machine
# of one GPU this checks the whole path (record, tune --from under collbench
# launch, the tuner applying the file in PyTorch); its step times say
# nothing of NVLink. TRACE=1 adds one short run of each arm with NCCL's
# TUNING log and checks, from rank 0's lines, that every operation a line
# of the file covers ran the line's algorithm and protocol, and every other
# one what NCCL chose without a tuner ($OUT/tune-job-trace.txt).
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
# tune measures with the NCCL the job loads (PyTorch's, where it has one);
# one given is preloaded under the job too.
PRELOAD=${NCCL_LIB:-}
NCCL_LIB=${NCCL_LIB:-$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUTDIR" "$WORK"
OUTDIR=$(cd "$OUTDIR" && pwd)
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
SHARE=${SHARE:-0}
case "$SHARE" in *[!0-9]*|'') echo "tune-job: SHARE=$SHARE: give a number of processes"; exit 2 ;; esac
if [ "$SHARE" -gt 0 ]; then
  [ "${ngpu:-0}" -ge 1 ] || { echo "tune-job: needs a GPU"; exit 2; }
  ngpu=$SHARE
  export TUNE_JOB_SHARE=1
else
  [ "$ngpu" -ge 2 ] || { echo "tune-job: needs 2 GPUs or more (found ${ngpu:-0}); SHARE=2 shares one"; exit 2; }
fi
case "$MODE" in ddp|fsdp) ;; *) echo "tune-job: MODE=$MODE: give ddp or fsdp"; exit 2 ;; esac
plugin=$("$BIN" watch --plugin-path 2>&1) || { echo "tune-job: $plugin"; exit 2; }

# The job: STEPS training steps of an MLP (forward, backward, SGD), the
# step time taken with the GPU synchronised; rank 0 prints the median of
# the steps after WARM as JSON.
cat > "$WORK/job.py" <<'PY'
import json, os, statistics, sys, time, torch, torch.distributed as dist
mode, steps, warm, layers, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
share = os.environ.get("TUNE_JOB_SHARE") == "1"
if share:  # every rank on GPU 0, each its own simulated host
    os.environ["NCCL_HOSTID"] = "tune-job-host%s" % os.environ["RANK"]
torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).cuda()
if mode == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(model)
else:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    # each layer its own unit: an allgather and a reduce-scatter per layer
    model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
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
  env ${PRELOAD:+LD_PRELOAD="$PRELOAD"} "$@" timeout -k 10 600 "$py" -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
    "$WORK/job.py" "$MODE" "$STEPS" "$WARM" "$LAYERS" "$WIDTH" > "$log" 2>&1
}

if [ -n "${CHECK:-}" ]; then
  # CHECK=FILE: the file is given; only the pairs run (tune --check, in the job).
  [ -r "$CHECK" ] || { echo "tune-job: CHECK=$CHECK: no such file"; exit 2; }
  cp "$CHECK" "$WORK/tuned.csv" || exit 2
else
  # 1. What the job issues, from collbench watch's record.
  export COLLBENCH_TOKEN=tune-job-secret
  timeout -k 5 700 "$BIN" watch --listen 127.0.0.1:$PORT --for 660s -o "$WORK/watch.json" > "$WORK/watch.txt" 2>&1 &
  wpid=$!; sleep 1
  job "$WORK/record.log" NCCL_PROFILER_PLUGIN="$plugin" COLLBENCH_WATCH=127.0.0.1:$PORT
  jrc=$?
  cpid=$(pgrep -P $wpid | head -1); kill -INT "${cpid:-$wpid}" 2>/dev/null; wait $wpid
  [ "$jrc" -eq 0 ] || { echo "tune-job: the recorded job failed (exit $jrc)"; tail -20 "$WORK/record.log"; exit 3; }

  # 2. Tune what it issues (SHARE: one process per rank on GPU 0, each a host).
  tune_cmd=("$BIN" tune)
  [ "$SHARE" -gt 0 ] && tune_cmd=("$BIN" launch -n "$SHARE" --nodes "$SHARE" -- tune --device 0)
  timeout -k 10 900 "${tune_cmd[@]}" --from "$WORK/watch.json" ${NCCL_LIB:+--nccl-lib "$NCCL_LIB"} --budget "$BUDGET" -o "$WORK/tune.json" --tuner-file "$WORK/tuned.csv" \
    > "$WORK/tune.txt" 2> "$WORK/tune.err"
  trc=$?
  cat "$WORK/tune.txt"
  [ "$trc" -eq 0 ] || { echo "tune-job: tune failed (exit $trc)"; tail -5 "$WORK/tune.err"; exit 3; }
fi

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

# 4. TRACE=1: which algorithm and protocol NCCL ran for each operation,
# without a tuner and with the file (rank 0's TUNING lines), against the file.
if [ "${TRACE:-0}" = 1 ]; then
  for arm in base tuned; do
    rm -f "$WORK/trace-$arm".*
    extra=(); [ "$arm" = tuned ] && extra=(NCCL_TUNER_PLUGIN="$plugin" COLLBENCH_TUNER_FILE="$WORK/tuned.csv")
    STEPS=$((WARM + 10)) job "$WORK/trace-$arm.log" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
      NCCL_DEBUG_FILE="$WORK/trace-$arm.%h.%p" "${extra[@]}"
    echo "trace $arm: exit $?"
  done
  python3 - "$WORK" "$ngpu" > "$OUTDIR/tune-job-trace.txt" <<'PY'
import glob, re, sys
work, nranks = sys.argv[1], int(sys.argv[2])
op = re.compile(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)")
def ran(arm):
    seen = {}
    for p in glob.glob(f"{work}/trace-{arm}.*"):
        for line in open(p, errors="replace"):
            m = op.search(line)
            if m:
                seen.setdefault((m[1], int(m[2])), set()).add((m[3].lower(), m[4].lower()))
    return seen
names = {"AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reducescatter", "Broadcast": "broadcast", "Reduce": "reduce"}
lines = []
for line in open(f"{work}/tuned.csv"):
    f = [x.strip() for x in line.split("#")[0].split(",")]
    if len(f) >= 5:
        lines.append((f[0], int(f[1]), int(f[2]), f[3], f[4], int(f[7]) if len(f) > 7 else -1))
base, tuned = ran("base"), ran("tuned")
plugin = any("collbench" in l and "tuner" in l.lower() for p in glob.glob(f"{work}/trace-tuned.*") for l in open(p, errors="replace"))
print(f"tuner plugin named in NCCL's log of the tuned run: {plugin}; operation kinds: {len(base)} without, {len(tuned)} with")
bad = 0
for (fn, b), got in sorted(tuned.items()):
    # what the tuner sees: the larger of the send and receive parts
    nb = b * nranks if fn in ("AllGather", "ReduceScatter") else b
    cover = next((l for l in lines if l[0] == names.get(fn) and l[1] <= nb <= l[2] and l[5] in (-1, nranks)), None)
    want = {(cover[3], cover[4])} if cover else base.get((fn, b))
    ok = want is not None and got == want
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} {fn} {b} B: ran {sorted(got)}; {'the file says' if cover else 'without a tuner'} {sorted(want) if want else '?'}")
print("TRACE OK" if bad == 0 and tuned and plugin else f"TRACE FAIL ({bad} operation kinds differ; plugin named: {plugin})")
PY
  cat "$OUTDIR/tune-job-trace.txt"
fi

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
slower = len(changes) >= 5 and min(changes) > 0
faster = len(changes) >= 5 and max(changes) < 0
verdict["verdict"] = "SLOWER" if slower else "FASTER" if faster else "WITHIN NOISE"
print("verdict: %s (%d of %d pairs slower with the file)" % (verdict["verdict"], sum(c > 0 for c in changes), len(changes)))
json.dump(verdict, open(out, "w"), indent=2)
sys.exit(1 if slower else 0)
PY
vrc=$?
(cd "$WORK" && tar czf "$OUTDIR/tune-job-work.tgz" --exclude=job.py ./*.csv ./*.json ./*.txt ./*.log ./*.err ./trace-* 2>/dev/null) || true
exit $vrc
