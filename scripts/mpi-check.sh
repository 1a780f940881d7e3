#!/usr/bin/env bash
# The MPI build under mpirun, 4 processes (make mpi-check): the world forms;
# every collective on --backend mpi from 8 B to 64 MiB, every row verified;
# groups (verify-groups, and [[1,2,3],[0]]); a hung, a stopped and a killed
# rank named exactly, with the -o file keeping every finished row and the
# verdict; doctor healthy, then with a hung rank named; and the cpu backend
# under mpirun; first the bootstrap package's MPI tests. Usage:
# scripts/mpi-check.sh BIN
# With QUICK=1 (make test) each path runs once: the world, the bootstrap's
# MPI tests, every collective from 8 B to 64 KiB, the reversed groups, a
# hung rank, doctor (full) healthy, the cpu backend; the forced algorithm,
# verify-groups, the stopped and killed ranks and doctor's hung rank are
# make test-long's (make mpi-check).
set -euo pipefail
bin=${1:-bin/collbench-mpi}
# Every goroutine's stack if a process crashes.
base=(mpirun --oversubscribe -np 4 -x GOTRACEBACK=all)
[ "$(id -u)" = 0 ] && base+=(--allow-run-as-root)
# mpirun ends the job at once when a process dies; a few seconds let the
# others write their verdict first.
mpirun=("${base[@]}" --mca odls_base_sigkill_timeout 10)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SECONDS=0
quick=${QUICK:-0}
top=64M; [ "$quick" = 1 ] && top=64K
fail() { echo "mpi-check: FAIL: $*"; exit 1; }

"${mpirun[@]}" "$bin" world | tee "$tmp/world.txt"
grep -q "world of 4 processes, launched by open mpi, joined over TCP (rank 0's address shared over MPI)" "$tmp/world.txt" || fail "world"

# The bootstrap's own MPI calls, under mpirun: rank 0's broadcast reaches
# every rank and writes nothing past its frame (gompi's byte broadcast wrote
# four times its length into the Go heap: docs/mpi.md).
go test -c -tags mpi -o "$tmp/bootstrap.test" ./bootstrap
"${mpirun[@]}" "$tmp/bootstrap.test" -test.run 'MPI' > "$tmp/bootstrap.txt" 2>&1 \
  || { cat "$tmp/bootstrap.txt"; fail "the bootstrap's MPI tests under mpirun"; }
echo "mpi-check: the bootstrap's broadcast stays in its frame on 4 processes [${SECONDS}s]"

# The MPI backend's table has a row for every collective (built with its tag).
CGO_CFLAGS="$(pkg-config --cflags ompi)" CGO_LDFLAGS="$(pkg-config --libs ompi)" go test -count=1 -tags mpi -run 'TestEveryCollectiveHasAnMPIRow' ./backend/mpi > "$tmp/table.txt" 2>&1 \
  || { cat "$tmp/table.txt"; fail "the MPI backend's table"; }

"${mpirun[@]}" "$bin" sweep --backend mpi --collectives all --sizes "8:$top" -n 2 -w 1 -o "$tmp/sweep.json" > "$tmp/sweep.txt"
ok=$(grep -c "wrong elements:    0 (OK)" "$tmp/sweep.txt")
[ "$ok" = 11 ] || fail "sweep --backend mpi: $ok of 11 collectives verified"
grep -q '"name": "mpi"' "$tmp/sweep.json" && grep -q '"transport": "pml/' "$tmp/sweep.json" || fail "the results file does not name the mpi backend and its transport"
echo "mpi-check: every collective on --backend mpi, 8 B to $top, every row verified ($(grep -o 'Open MPI v[0-9.]*' "$tmp/sweep.txt" | head -1)) [${SECONDS}s]"

# A forced algorithm is what the rows say (Open MPI's settings, read through
# MPI_T), and its results are verified like any other.
if [ "$quick" != 1 ]; then
"${mpirun[@]}" --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 "$bin" allreduce --backend mpi \
  --sizes 1K,1M -n 2 -o "$tmp/ring.json" > "$tmp/ring.txt" 2>&1 || { cat "$tmp/ring.txt"; fail "allreduce with a forced ring"; }
python3 - "$tmp/ring.json" <<'PY' || fail "the rows do not name the forced algorithm"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["results"], "no rows"
for r in d["results"]:
    assert r["algorithm"]["algo"] == "ring", r["algorithm"]
    assert r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0, r
print("mpi-check: a forced algorithm named in every row: %s" % d["results"][0]["algorithm"]["source"])
PY

"${mpirun[@]}" "$bin" verify-groups --backend mpi > "$tmp/groups.txt" || { cat "$tmp/groups.txt"; fail "verify-groups --backend mpi"; }
grep -q "PASS: every value matched" "$tmp/groups.txt" || fail "verify-groups --backend mpi"
fi
# (Output to a file first: a failed mpirun inside $(...) would end the
# script under set -e without showing why.)
"${mpirun[@]}" "$bin" sweep --backend mpi --collectives all --sizes 1K,1M -n 2 --rank-list '[[1,2,3],[0]]' > "$tmp/reversed.txt" 2>&1 \
  || { rc=$?; cat "$tmp/reversed.txt"; fail "--rank-list [[1,2,3],[0]] on --backend mpi: mpirun exited $rc"; }
ok=$(grep -c "wrong elements:    0 (OK)" "$tmp/reversed.txt" || true)
[ "$ok" = 10 ] || fail "--rank-list [[1,2,3],[0]] on --backend mpi: $ok of 10 collectives verified"
echo "mpi-check: $([ "$quick" = 1 ] || echo "verify-groups and ")--rank-list [[1,2,3],[0]] on --backend mpi pass [${SECONDS}s]"

# Planted faults: the rank must be named, the rows before it kept.
fault() { # spec, expected words, file
  local rc=0
  COLLBENCH_FAULTS="$1" timeout 180 "${mpirun[@]}" -x COLLBENCH_FAULTS "$bin" allreduce --backend mpi --sizes 1K:1M -n 5 -w 1 \
    -o "$3" --timeout 8s --heartbeat-timeout 6s > "$3.txt" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "$1: the run did not fail"
  python3 - "$3" "$2" <<'PY' || fail "$1: the results file does not name it"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["results"]) >= 1, "no rows kept"
assert sys.argv[2] in d.get("error", ""), d.get("error")
print("mpi-check: %s named in the results file (%d rows kept): %s" % (sys.argv[2].split(" (")[0], len(d["results"]), d["error"][:100]))
PY
}
fault "hang:1@40" "rank 1 (" "$tmp/hang.json"
if [ "$quick" != 1 ]; then
fault "stop:2@40" "rank 2 (" "$tmp/stop.json"
fault "kill:3@40" "rank 3 (" "$tmp/kill.json"
fi

# doctor on --backend mpi: a healthy run, then a rank hung in the last
# stage, named in the report that the run still writes.
"${mpirun[@]}" "$bin" doctor --backend mpi -o "$tmp/doctor.json" > "$tmp/doctor.txt" 2>&1 || { cat "$tmp/doctor.txt"; fail "doctor --backend mpi on a healthy world"; }
grep -q "mpi backend.*: healthy" "$tmp/doctor.txt" || { cat "$tmp/doctor.txt"; fail "doctor --backend mpi did not say healthy"; }
if [ "$quick" != 1 ]; then
rc=0
# Here mpirun kills the job 5 s after the first process exits: the verdict
# must be on disk by then, not wait for MPI to end (it waited 9 s).
COLLBENCH_FAULTS="hang:3@30" timeout 180 "${base[@]}" --mca odls_base_sigkill_timeout 5 -x COLLBENCH_FAULTS "$bin" doctor --backend mpi --quick \
  -o "$tmp/doctor-hang.json" --timeout 8s --heartbeat-timeout 6s > "$tmp/doctor-hang.txt" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "doctor --backend mpi with a hung rank exited 0"
python3 - "$tmp/doctor-hang.json" <<'PY' || { cat "$tmp/doctor-hang.txt"; fail "doctor --backend mpi: the hung rank is not named in the report"; }
import json, sys
d = json.load(open(sys.argv[1]))
hung = [f for f in d["findings"] if f["kind"] == "hung-rank"]
assert not d["healthy"] and hung and hung[0]["ranks"] == [3], d["findings"]
print("mpi-check: doctor --backend mpi healthy, then its hung rank named (%s, stopped in %s)" % (hung[0]["part"], d["stopped_in"]))
PY
fi

ok=$("${mpirun[@]}" "$bin" sweep --backend cpu --collectives allreduce,alltoall --sizes 1K,64K -n 2 | grep -c "wrong elements:    0 (OK)")
[ "$ok" = 2 ] || fail "the cpu backend under mpirun"
echo "mpi-check: ok [${SECONDS}s]"
