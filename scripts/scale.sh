#!/usr/bin/env bash
# Usage: scripts/scale.sh [PROCS ...]        (default: 64 128 256)
#
# Runs collbench worlds of PROCS real processes on this machine (CPU
# backend, 8 processes per simulated host) and measures, for each size:
# how long the world takes to form (launch ... world: the whole command,
# and rank 0's own join as `world` reports it), a small verified sweep,
# verify-groups on three layouts, doctor --quick, and a rank well inside the
# world that stops itself mid-sweep: how long until it is named and how
# many rows the -o file kept. While each command runs it samples every
# process's resident memory and rank 0's open sockets (from /proc). Prints
# one markdown table. Needs a built bin/collbench (make build); Linux only.
# Each step is killed after STEP_LIMIT seconds (default 900).
# Exits 1 when a step does not end as it should.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${COLLBENCH_BIN:-$PWD/bin/collbench}
[ -x "$BIN" ] || { echo "scale.sh: $BIN not found (make build first)" >&2; exit 2; }
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(64 128 256)
for n in "${sizes[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 16 ] && [ $((n % 8)) -eq 0 ] ||
    { echo "scale.sh: $n is not a process count (a multiple of 8, at least 16)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# descendants PID: every process below PID (timeout, then launch, then ranks).
descendants() {
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    descendants "$c"
  done
}

# sample FILE PID...: until the launch (first pid) ends, record the largest
# resident set of any collbench process and rank 0's sockets.
sample() {
  local out=$1 launch=$2 rss=0 socks=0 total=0
  while kill -0 "$launch" 2>/dev/null; do
    local t=0
    for p in $(descendants "$launch"); do
      local r
      r=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
      [ -n "$r" ] || continue
      t=$((t + r))
      [ "$r" -gt "$rss" ] && rss=$r
      if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx 'COLLBENCH_RANK=0'; then
        local s
        s=$(find "/proc/$p/fd" -lname 'socket:*' 2>/dev/null | wc -l)
        [ "$s" -gt "$socks" ] && socks=$s
      fi
    done
    [ "$t" -gt "$total" ] && total=$t
    sleep 0.5
  done
  echo "$rss $total $socks" >"$out"
}

# run NAME N ENV... -- ARGS...: one launch, sampled; sets took, code, stats.
run() {
  local name=$1 n=$2
  shift 2
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local start end
  start=$(date +%s.%N)
  # Every step is bounded: a world that outlives STEP_LIMIT is killed (exit 124).
  timeout -k 10 "${STEP_LIMIT:-900}" env "${env[@]}" "$BIN" launch -n "$n" --nodes $((n / 8)) -- "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  sample "$tmp/$name.mem" "$pid" &
  local sampler=$!
  wait "$pid"
  code=$?
  end=$(date +%s.%N)
  wait "$sampler"
  took=$(echo "$end - $start" | bc)
  read -r rss total socks <"$tmp/$name.mem"
}

echo "| processes (hosts) | world formed (launch, rank 0's join) | sweep 1K-64K | verify-groups (3 layouts, 1K) | doctor --quick | stopped rank named, rows kept | largest process RSS | all processes RSS | rank 0's sockets |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in "${sizes[@]}"; do
  maxrss=0 maxsocks=0 maxtotal=0
  note() { [ "$rss" -gt "$maxrss" ] && maxrss=$rss; [ "$total" -gt "$maxtotal" ] && maxtotal=$total; [ "$socks" -gt "$maxsocks" ] && maxsocks=$socks; }

  run world "$n" -- world
  note
  join=$(sed -n 's/.* in \([0-9.]*\) s; every process.*/\1/p' "$tmp/world.out")
  [ "$code" = 0 ] && [ -n "$join" ] || { echo "scale.sh: $n: world failed ($code)" >&2; cat "$tmp/world.err" >&2; fail=1; }
  world_cell=$(printf "%.1f s, %s s" "$took" "${join:-?}")

  run sweep "$n" -- allreduce --backend cpu --sizes 1K:64K:x4 -n 2 -w 1 -q
  note
  grep -q "wrong elements:    0 (OK)" "$tmp/sweep.out" && [ "$code" = 0 ] || { echo "scale.sh: $n: sweep failed ($code)" >&2; fail=1; }
  sweep_cell=$(printf "%.1f s" "$took")

  run vg "$n" -- verify-groups --backend cpu --sizes 1K --rank-list node --rank-list cross-node --rank-list pairs
  note
  grep -q "PASS: every value matched" "$tmp/vg.out" && [ "$code" = 0 ] || { echo "scale.sh: $n: verify-groups failed ($code)" >&2; fail=1; }
  vg_cell=$(printf "%.1f s" "$took")

  run doctor "$n" -- doctor --backend cpu --quick -q
  note
  verdict=$(head -1 "$tmp/doctor.out" | sed 's/.*: //')
  lines=$(wc -l <"$tmp/doctor.out")
  [ "$code" = 0 ] || { echo "scale.sh: $n: doctor exited $code" >&2; fail=1; }
  doctor_cell=$(printf "%.1f s, %s, %d lines" "$took" "$verdict" "$lines")

  # A rank well inside the world stops itself at its 60th collective.
  victim=$((n * 2 / 3 + 3))
  run stop "$n" "COLLBENCH_FAULTS=stop:$victim@60" -- allreduce --backend cpu --sizes 1K:64K:x4 -n 5 -w 1 -q -o "$tmp/rows.json"
  note
  rows=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['results']))" "$tmp/rows.json" 2>/dev/null || echo 0)
  if [ "$code" = 4 ] && grep -q "rank $victim (" "$tmp/stop.err" "$tmp/stop.out"; then
    stop_cell=$(printf "rank %d: exit 4 after %.1f s, %s rows" "$victim" "$took" "$rows")
  else
    stop_cell="rank $victim: exit $code, not named"
    echo "scale.sh: $n: the stopped rank $victim was not named (exit $code)" >&2
    fail=1
  fi
  printf "| %d (%d) | %s | %s | %s | %s | %s | %d MiB | %d MiB | %d |\n" "$n" $((n / 8)) "$world_cell" "$sweep_cell" "$vg_cell" "$doctor_cell" "$stop_cell" \
    $((maxrss / 1024)) $((maxtotal / 1024)) "$maxsocks"
done
exit $fail
