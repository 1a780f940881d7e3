#!/usr/bin/env bash
# GPU test run: correctness of every collective x dtype x op on 1, 2, 4 (8) GPUs,
# the GPU unit tests, and a bandwidth sweep compared with the reference figures.
# Uses prebuilt bin/collbench and bin/nccl.test (make gpu-bins); needs no Go.
# Logs go to $OUT (when set) or ./gpu-logs.
set -u
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-gpu-logs}
mkdir -p "$OUTDIR"
BIN=${BIN:-bin/collbench}
export NCCL_NVLS_ENABLE=0
LOG=$OUTDIR/gpu-test.log
exec > >(tee -a "$LOG") 2>&1
fails=0
passes=0
step() { echo; echo "=== $*"; }
ok() { passes=$((passes + 1)); echo "PASS: $*"; }
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
step "machine: $ngpu GPUs"
nvidia-smi -L
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv
nvidia-smi topo -m
"$BIN" version
"$BIN" env || bad "collbench env"

step "topology: collbench topo beside nvidia-smi topo -m"
if "$BIN" topo > "$OUTDIR/topo.txt" 2>&1; then ok "collbench topo"; else bad "collbench topo"; fi
cat "$OUTDIR/topo.txt"
"$BIN" topo --no-nccl --format json --record "$OUTDIR/facts-${ngpu}gpu.json" > /dev/null && ok "topo --record" || bad "topo --record"
nvidia-smi topo -m

step "GPU unit tests (bin/nccl.test)"
if [ -x bin/nccl.test ]; then
  if bin/nccl.test -test.v -test.run GPU -test.timeout 600s > "$OUTDIR/gotest.log" 2>&1; then
    ok "GPU unit tests"
  else
    bad "GPU unit tests"
  fi
  grep -E '^(=== RUN|--- |\s+gpu_test|ok|FAIL|PASS)' "$OUTDIR/gotest.log" | grep -v '=== RUN' | head -60
else
  bad "bin/nccl.test missing (run make gpu-bins where Go is installed)"
fi

step "correctness through the CLI: every collective x dtype x op, roots all, both modes"
for g in 1 2 4 8; do
  [ "$g" -le "$ngpu" ] || continue
  # One rank: NCCL 2.28.3 leaves the unaligned tail of an out-of-place float avg
  # unwritten; the diagnosis step below shows it, so avg is left out here.
  ops=all; [ "$g" -eq 1 ] && ops=sum,prod,max,min
  if "$BIN" sweep --backend nccl -g "$g" --collectives all --dtype all --op "$ops" --root all \
      --sizes 8,1000,1M,4194308 -n 2 -w 1 --check 2 --format csv > "$OUTDIR/correct-g$g.csv" 2> "$OUTDIR/correct-g$g.err"; then
    ok "correctness on $g GPUs ($(($(wc -l < "$OUTDIR/correct-g$g.csv") - 1)) row halves)"
  else
    bad "correctness on $g GPUs (exit $?)"; tail -5 "$OUTDIR/correct-g$g.err"
    awk -F, 'NR > 1 && $12 != "0"' "$OUTDIR/correct-g$g.csv" | head -20
  fi
  rm -f "$OUTDIR/correct-g$g.err"
done
cat "$OUTDIR"/correct-g*.csv > "$OUTDIR/correctness.csv" 2>/dev/null; rm -f "$OUTDIR"/correct-g*.csv

step "bandwidth sweep: six collectives, float sum, 20 iters, 8 B - 4 GiB, --check 1 (wall time, RSS, GPU memory)"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 250 > /tmp/gpumem.csv 2>/dev/null &
smi=$!
python3 - "$BIN" "$OUTDIR" <<'PY'
import resource, subprocess, sys, time
bin_, out = sys.argv[1], sys.argv[2]
six = "allreduce,allgather,reduce-scatter,broadcast,sendrecv,alltoall"
def run(args, stdout):
    """Runs collbench as its own child so each peak RSS is its own."""
    code = ("import resource,subprocess,sys,time;t=time.time();"
            "rc=subprocess.run(sys.argv[1:],stdout=sys.stdout).returncode;"
            "print(round(time.time()-t,2), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code, bin_] + args, stdout=stdout, stderr=subprocess.PIPE, text=True)
    wall, rss, rc = p.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) / 1024, int(rc)
for label, args in [("one 8 B allreduce (CUDA + NCCL baseline)", ["allreduce", "--backend", "nccl", "--sizes", "8", "-n", "1", "-w", "0"]),
                    ("one 4 GiB allreduce", ["allreduce", "--backend", "nccl", "--sizes", "4G", "-n", "2", "-w", "1"])]:
    wall, rss, rc = run(args, subprocess.DEVNULL)
    print(f"{label}: exit {rc}, wall {wall:.1f} s, peak host RSS {rss:.0f} MiB")
with open(out + "/sweep.txt", "w") as f:
    wall, rss, rc = run(["sweep", "--backend", "nccl", "--collectives", six, "--sizes", "8:4G", "--check", "1", "-n", "20",
                         "-o", out + "/sweep.json"], f)
print(f"sweep of six collectives 8 B - 4 GiB: exit {rc}, wall {wall:.1f} s, peak host RSS {rss:.0f} MiB")
with open("/tmp/sweep-all.txt", "w") as f:
    wall, rss, rc2 = run(["sweep", "--backend", "nccl", "--collectives", "all", "--sizes", "8:4G", "--check", "1", "-n", "20"], f)
print(f"sweep --collectives all (seven) 8 B - 4 GiB: exit {rc2}, wall {wall:.1f} s, peak host RSS {rss:.0f} MiB")
sys.exit(rc or rc2)
PY
rc=$?
kill $smi 2>/dev/null
[ $rc -eq 0 ] && ok "bandwidth sweep" || bad "bandwidth sweep (exit $rc)"
awk -F, '{ if ($2+0 > m[$1]) m[$1] = $2+0 } END { for (g in m) printf "GPU %s peak memory used during the sweep: %d MiB\n", g, m[g] }' /tmp/gpumem.csv | sort
grep -E '^#|GiB|MiB|  8 B' "$OUTDIR/sweep.txt" | grep -E '^# (collbench|backend|ranks|[a-z-]+$|wrong|avg)| (8 B|1 MiB|64 MiB|1 GiB|4 GiB) '

step "reference comparison (gpu-machines.md figures, 4x H200, NCCL 2.28.3)"
python3 - "$OUTDIR/sweep.json" "$ngpu" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
ref = {  # collective: (8 B time us, 1 MiB busbw, 64 MiB, 1 GiB, 4 GiB)
    "allreduce": (20, 65, 314, 353, 363), "allgather": (21, 32, 269, 326, 342),
    "reduce-scatter": (21, 35, 271, 330, 348), "broadcast": (21, 44, 316, 360, 363),
    "sendrecv": (21, 41, 158, 361, 365), "alltoall": (21, 29, 264, 336, 352)}
if int(sys.argv[2]) != 4:
    print("reference figures are for 4 GPUs; showing measured values only")
sizes = [8, 1 << 20, 64 << 20, 1 << 30, 4 << 30]
print("small-message column: time of the smallest row that moves data (8 B, or 16 B where 8 B leaves 0 elements per rank)")
print(f"{'collective':15} {'small us':>8} {'1M':>8} {'64M':>8} {'1G':>8} {'4G':>8}   (busbw GB/s, out-of-place; ref in brackets, % diff)")
for coll, r in ref.items():
    rows = {x["size_bytes"]: x for x in doc["results"] if x["collective"] == coll}
    cells = []
    for i, s in enumerate(sizes):
        if i == 0:
            row = min((x for x in rows.values() if x["count"] > 0), key=lambda x: x["size_bytes"], default=None)
        else:
            row = rows.get(s)
        if not row:
            cells.append("-"); continue
        h = row["out_of_place"]
        v = h["time_us"] if i == 0 else h["busbw_gbps"]
        diff = (v - r[i]) / r[i] * 100
        tag = f"@{row['size_bytes']}B " if i == 0 else ""
        cells.append(f"{tag}{v:.1f} [{r[i]}] {diff:+.1f}%")
    print(f"{coll:15} " + " | ".join(cells))
print("wrong total:", doc["summary"]["wrong_total"])
PY

step "small-message latency: allreduce 8 B, plain (3 runs; thread-per-GPU reference 8.5 us) and CUDA graph (100 replays; reference 7.9 us)"
for i in 1 2 3; do "$BIN" allreduce --backend nccl --sizes 8 -n 20 | grep -E ' 8 B '; done
"$BIN" allreduce --backend nccl --sizes 8 -n 20 --cuda-graph 100 && ok "cuda-graph run" || bad "cuda-graph run"

step "per-iteration statistics: allreduce 1 MiB and 1 GiB"
"$BIN" allreduce --backend nccl --sizes 1M,1G -n 50 --iter-stats && ok "iter-stats run" || bad "iter-stats run"

step "groups: verify-groups on NCCL (default layouts) on 2 and 4 GPUs"
for g in 2 4 8; do
  [ "$g" -le "$ngpu" ] || continue
  if "$BIN" verify-groups --backend nccl -g "$g" >> "$OUTDIR/verify-groups.txt"; then
    ok "verify-groups on $g GPUs"
  else
    bad "verify-groups on $g GPUs"
  fi
  grep -E '^# (PASS|FAIL|mismatch)' "$OUTDIR/verify-groups.txt" | tail -3
done

step "groups: allreduce 1 MiB - 1 GiB with --rank-list [[0,1],[2,3]] and without"
if [ "$ngpu" -ge 4 ]; then
  "$BIN" allreduce --backend nccl -g 4 --rank-list '[[0,1],[2,3]]' --sizes 1M:1G && ok "allreduce with groups" || bad "allreduce with groups"
  "$BIN" allreduce --backend nccl -g 4 --sizes 1M:1G | grep -E '^ +[0-9]+ [KMG]iB' && ok "allreduce without groups" || bad "allreduce without groups"
fi

step "multi-process: one process per GPU under mpirun (MPI build), collbench launch, and 2 simulated nodes"
sizes=8,1M,64M,1G
echo "single process, for comparison:"
"$BIN" allreduce --backend nccl --sizes $sizes | grep -E '^ +[0-9]+ [KMG]?i?B |wrong elements'
if [ -x bin/collbench-mpi ] && command -v mpirun > /dev/null; then
  if mpirun --allow-run-as-root -np "$ngpu" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH bin/collbench-mpi allreduce --backend nccl --sizes $sizes > /tmp/mpi.txt 2>&1; then
    ok "mpirun -np $ngpu (MPI build)"
  else
    bad "mpirun -np $ngpu (MPI build)"
  fi
  grep -E '^# (ranks|command)|^ +[0-9]+ [KMG]?i?B |wrong elements|slowest|collbench:' /tmp/mpi.txt | head -12
  mpirun --allow-run-as-root -np "$ngpu" bin/collbench-mpi world | head -8
else
  bad "mpirun or bin/collbench-mpi missing"
fi
if "$BIN" launch -n "$ngpu" -- allreduce --backend nccl --sizes $sizes > /tmp/launch.txt 2>&1; then
  ok "collbench launch -n $ngpu"
else
  bad "collbench launch -n $ngpu"
fi
grep -E '^# (ranks|command)|^ +[0-9]+ [KMG]?i?B |wrong elements|slowest|collbench:|rank' /tmp/launch.txt | head -12
if [ "$ngpu" -ge 2 ] && [ $((ngpu % 2)) -eq 0 ]; then
  if "$BIN" launch -n "$ngpu" --nodes 2 -- allreduce --backend nccl --sizes 8,2M,64M,1G -n 10 -w 2 > /tmp/nodes.txt 2>&1; then
    ok "2 simulated nodes x $((ngpu / 2)) GPUs (NCCL_HOSTID)"
  else
    bad "2 simulated nodes x $((ngpu / 2)) GPUs"
  fi
  grep -E '^# (ranks|command|env)|^ +[0-9]+ [KMG]?i?B |wrong elements|slowest|collbench:|rank' /tmp/nodes.txt | head -12
  if "$BIN" launch -n "$ngpu" --nodes 2 -- verify-groups --backend nccl --sizes 1K > /tmp/vg-nodes.txt 2>&1; then
    ok "verify-groups over 2 simulated nodes (node, cross-node layouts)"
  else
    bad "verify-groups over 2 simulated nodes"
  fi
  grep -E 'node|PASS|FAIL|mismatch' /tmp/vg-nodes.txt | grep -vE '^ +[0-9] \|' | tail -10
  cat /tmp/vg-nodes.txt >> "$OUTDIR/verify-groups.txt"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "$BIN" launch -n "$ngpu" --nodes 2 -- allreduce --backend nccl --sizes 1M -n 2 -w 1 2>&1 | grep -E 'via NET|nNodes' | head -4
fi

step "suites: collbench run --config configs/quick.yaml, then acceptance.yaml (60% of peak from 1 GiB)"
if "$BIN" run --config configs/quick.yaml --output /tmp/cb-quick --quiet > /tmp/quick.txt 2>&1; then ok "run quick.yaml"; else bad "run quick.yaml"; fi
tail -3 /tmp/quick.txt
if "$BIN" run --config configs/acceptance.yaml --output /tmp/cb-acc --quiet > /tmp/acc.txt 2>&1; then ok "run acceptance.yaml"; else bad "run acceptance.yaml"; fi
grep -E "acceptance|collbench:" /tmp/acc.txt | head -12
"$BIN" baseline make /tmp/cb-quick/results.json -o /tmp/quick-base.json 2>/dev/null
"$BIN" run --config configs/quick.yaml --baseline /tmp/quick-base.json --output /tmp/cb-quick2 --quiet > /tmp/quick2.txt 2>&1
echo "quick.yaml against its own earlier run (run-to-run noise, not gating): exit $?"; tail -2 /tmp/quick2.txt

step "diagnosis (not gating): single-rank avg on float at a size that leaves a tail (rows show the wrong elements)"
"$BIN" allreduce --backend nccl -g 1 --op avg --dtype float,half --sizes 1000,786432,3145740 -n 1 -w 0 --check 1 | grep -E 'MiB|KiB| B |mismatch'
"$BIN" allreduce --backend nccl -g 2 --op avg --dtype float --sizes 3145740 -n 1 -w 0 | grep -E 'MiB|KiB| B |mismatch'

step "host memory: RSS by rank count and with the kernels' JIT disabled (host-copy fallback)"
for v in "-g 1" "-g 2" "-g 4" "-g 4 jit-off"; do
  set -- $v
  env=""; [ "${3:-}" = jit-off ] && env="CUDA_DISABLE_PTX_JIT=1"
  python3 -c "
import resource,subprocess,sys
rc=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL).returncode
print('  $v: exit', rc, 'peak RSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss//1024, 'MiB')" \
    env $env "$BIN" allreduce --backend nccl $1 $2 --sizes 8,64M -n 2
done

step "bad input and failures on the GPU backend"
"$BIN" allreduce --backend nccl -g $((ngpu + 1)) --sizes 8 > /dev/null 2>/tmp/err; rc=$?
cat /tmp/err; [ $rc -eq 3 ] && ok "too many ranks exits 3" || bad "too many ranks exit $rc"
"$BIN" allreduce --backend nccl --nccl-lib /nonexistent/libnccl.so.2 > /dev/null 2>/tmp/err; rc=$?
cat /tmp/err; [ $rc -eq 2 ] && ok "missing --nccl-lib exits 2" || bad "missing --nccl-lib exit $rc"
"$BIN" allreduce --backend nccl --sizes 1K,64G,200G -g 1 --format json > /tmp/oom.json 2>/tmp/err; rc=$?
cat /tmp/err
[ $rc -eq 2 ] && grep -q "cannot fit" /tmp/err && ok "sizes beyond free GPU memory refused before the run, exit 2" || bad "sizes beyond GPU memory: exit $rc"

step "faults: a rank stopped with SIGSTOP under launch -n 2 is named; the run ends within the bound, rows kept"
if [ "$ngpu" -ge 2 ]; then
  rm -f "$OUTDIR/fault.json"
  start=$(date +%s.%N)
  "$BIN" launch -n 2 -- allreduce --backend nccl --sizes 64M:4G -n 1000 -w 5 --timeout 30s --heartbeat-timeout 10s \
    -o "$OUTDIR/fault.json" > /tmp/fault.txt 2>&1 &
  lp=$!
  for i in $(seq 1 600); do
    python3 -c "import json,sys; sys.exit(0 if len(json.load(open('$OUTDIR/fault.json'))['results']) >= 2 else 1)" 2>/dev/null && break
    sleep 0.1
  done
  r1=$(for p in $(pgrep -P $lp); do tr '\0' '\n' < /proc/$p/environ | grep -qx COLLBENCH_RANK=1 && echo $p; done)
  echo "rank 1 is pid $r1; rows on disk: $(python3 -c "import json; print(len(json.load(open('$OUTDIR/fault.json'))['results']))")"
  kill -STOP "$r1"; stopped=$(date +%s.%N)
  wait $lp; rc=$?; ended=$(date +%s.%N)
  python3 -c "print('named and ended %.1f s after SIGSTOP (heartbeat bound 10 s, watchdog 30 s), exit $rc' % ($ended - $stopped))"
  grep -E 'stopped answering|the cause|launch:' /tmp/fault.txt | head -6
  python3 -c "import json; d=json.load(open('$OUTDIR/fault.json')); print('rows kept:', len(d['results']), '| error:', d.get('error'))"
  left=$(pgrep -f 'collbench allreduce' | wc -l)
  [ $rc -eq 4 ] && grep -q "rank 1 (.*) stopped answering" /tmp/fault.txt && [ "$left" -eq 0 ] \
    && ok "stopped rank named, exit 4, no process left" || bad "stopped rank: exit $rc, $left processes left"
fi

step "doctor: clean (quick and full), NCCL_P2P_DISABLE=1, and a GPU slowed by another workload"
if [ "$ngpu" -ge 2 ]; then
  for mode in --quick ""; do
    start=$(date +%s.%N)
    "$BIN" doctor $mode -o "$OUTDIR/doctor${mode:+-quick}.json" > /tmp/doctor.txt 2>&1; rc=$?
    python3 -c "print('doctor ${mode:-full}: exit $rc, wall %.1f s' % ($(date +%s.%N) - $start))"
    head -3 /tmp/doctor.txt
    [ $rc -eq 0 ] && ok "doctor ${mode:-full} on a clean machine is healthy" || { bad "doctor ${mode:-full} clean: exit $rc"; cat /tmp/doctor.txt; }
  done
  cat /tmp/doctor.txt
  NCCL_P2P_DISABLE=1 "$BIN" doctor -o "$OUTDIR/doctor-p2p-off.json" > /tmp/doctor.txt 2>&1; rc=$?
  head -4 /tmp/doctor.txt
  grep -E '^ *[a-z0-9-]+ \| +0-1 ' /tmp/doctor.txt
  [ $rc -eq 1 ] && grep -q "GPU 0 (.*) ↔ GPU 1 (.*).*NCCL used SHM" /tmp/doctor.txt \
    && ok "NCCL_P2P_DISABLE=1 named on the pair, with the transport" || bad "NCCL_P2P_DISABLE=1: exit $rc"
  # Another workload on GPU 1: copies of 1 GiB back to back for two minutes.
  PY=/opt/torch/.venv/bin/python; [ -x "$PY" ] || PY=python3
  "$PY" -c "
import time, torch
a = torch.empty(1 << 30, dtype=torch.uint8, device='cuda:1'); b = torch.empty_like(a)
print('load on GPU 1 running', flush=True); t = time.time()
while time.time() - t < 120: b.copy_(a)
" > /tmp/load.txt 2>&1 &
  load=$!
  for i in $(seq 1 60); do grep -q running /tmp/load.txt && break; sleep 0.5; done
  "$BIN" doctor -o "$OUTDIR/doctor-loaded.json" > /tmp/doctor.txt 2>&1; rc=$?
  kill $load 2>/dev/null; wait $load 2>/dev/null
  head -4 /tmp/doctor.txt; cat /tmp/load.txt | tail -2
  sed -n '/each GPU alone/,/^$/p' /tmp/doctor.txt
  [ $rc -eq 1 ] && grep -qE "^FAIL rank 1 \(.*GPU" /tmp/doctor.txt && ok "a GPU slowed by another workload is named" || bad "loaded GPU: exit $rc"
fi

step "summary: $passes passed, $fails failed"
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
