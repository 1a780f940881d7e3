#!/usr/bin/env bash
# The mpi backend against the same MPI calls in a plain C loop
# (scripts/mpiref/ref.c), and collbench's TCP engine (--backend cpu) against
# MPI, on NP processes of this machine, out of place, float. Each cell is
# the median of REPS runs, the three tools taking turns. Prints a Markdown
# table. Usage: scripts/mpi-bench.sh [BIN] (needs mpicc: libopenmpi-dev, or
# REF_BIN, the reference loop built elsewhere).
set -euo pipefail
bin=${1:-bin/collbench-mpi}
NP=${NP:-4} REPS=${REPS:-3} ITERS=${ITERS:-10} WARMUP=${WARMUP:-2}
SIZES=${SIZES:-1M 16M 256M}
COLLS=${COLLS:-allreduce allgather reduce-scatter alltoall broadcast}
mpirun=(mpirun --oversubscribe -np "$NP")
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${REF_BIN:-}" ]; then cp "$REF_BIN" "$tmp/ref" # built elsewhere (a machine without mpicc)
else mpicc -O2 -pthread -o "$tmp/ref" "$(dirname "$0")/mpiref/ref.c"; fi
bytes() { python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
csvbw() { # collective backend sizes -> "bytes busbw" lines
  "${mpirun[@]}" "$bin" "$1" --backend "$2" --sizes "$3" --mode out-of-place -n "$ITERS" -w "$WARMUP" --format csv 2>/dev/null |
    awk -F, 'NR>1 {print $6, $11}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sizes_csv=$(echo $SIZES | tr ' ' ,)
byte_list=$(for s in $SIZES; do bytes "$s"; done)
for c in $COLLS; do
  for rep in $(seq "$REPS"); do
    REF_ITERS=$ITERS REF_WARMUP=$WARMUP "${mpirun[@]}" "$tmp/ref" "$c" $byte_list | sed "s/^/ref /" >> "$tmp/$c"
    csvbw "$c" mpi "$sizes_csv" | sed "s/^/mpi /" >> "$tmp/$c"
    csvbw "$c" cpu "$sizes_csv" | sed "s/^/cpu /" >> "$tmp/$c"
  done
done
echo "| collective | size | MPI in C (GB/s busbw) | collbench --backend mpi | mpi / C | collbench --backend cpu (TCP) | cpu / mpi |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for c in $COLLS; do
  for s in $SIZES; do
    b=$(bytes "$s")
    ref=$(awk -v b="$b" '$1=="ref" && $2==b {print $3}' "$tmp/$c" | median)
    mpi=$(awk -v b="$b" '$1=="mpi" && $2==b {print $3}' "$tmp/$c" | median)
    cpu=$(awk -v b="$b" '$1=="cpu" && $2==b {print $3}' "$tmp/$c" | median)
    python3 -c "import sys; c,s,r,m,p=sys.argv[1:]; r,m,p=float(r),float(m),float(p); print(f'| {c} | {s}iB | {r:.2f} | {m:.2f} | {m/r*100:.0f} % | {p:.2f} | {p/m*100:.0f} % |')" "$c" "$s" "$ref" "$mpi" "$cpu"
  done
done
echo
echo "($NP processes on $(hostname), $(nproc) cores; $(mpirun --version | head -1); iters $ITERS, warmup $WARMUP, median of $REPS)"
