#!/usr/bin/env bash
# The cpu backend across processes beside its yardstick, in one run:
# allreduce busbw across 4 local processes at 256 MiB, and one plain TCP
# loopback stream between two processes. Prints both and their ratio.
#
# Usage: scripts/cpu-bench.sh [BIN]     (default bin/collbench)
set -euo pipefail
BIN=${1:-bin/collbench}
PROCS=${PROCS:-4}
SIZE=${SIZE:-256M}
command -v python3 >/dev/null || { echo "cpu-bench: needs python3 to read the JSON result"; exit 2; }

echo "== host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" stream --listen 127.0.0.1:"$port" > /tmp/cpu-bench-stream.$$ &
rx=$!
"$BIN" stream --connect 127.0.0.1:"$port" --duration 3s >/dev/null
wait $rx
stream=$(sed -n 's/.*: \([0-9.]*\) GB\/s/\1/p' /tmp/cpu-bench-stream.$$)
rm -f /tmp/cpu-bench-stream.$$
echo "plain TCP loopback stream, 2 processes:        $stream GB/s"

out=/tmp/cpu-bench-ar.$$.json
"$BIN" launch -n "$PROCS" -- allreduce --backend cpu --sizes "$SIZE" -n 5 -w 1 --mode out-of-place -q -o "$out" >/dev/null
busbw=$(python3 -c "import json,sys; d=json.load(open('$out')); print('%.2f' % d['results'][0]['out_of_place']['busbw_gbps'])")
sent=$(python3 -c "import json,sys; d=json.load(open('$out')); h=d['results'][0]['out_of_place']; print(max(h['rank_bytes_sent']))")
rm -f "$out"
echo "allreduce $SIZE, $PROCS processes, busbw:           $busbw GB/s (each rank sends $sent B per operation)"
python3 - "$busbw" "$stream" "$PROCS" <<'PY'
import sys
busbw, stream, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print("ratio busbw / stream:                          %.2f" % (busbw / stream))
print("ratio all ranks' bytes on the wire / stream:   %.2f  (%d x busbw: every rank sends busbw at once)" % (n * busbw / stream, n))
PY
