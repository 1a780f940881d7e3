#!/usr/bin/env bash
# doctor-counters-gpu.sh: on a GPU machine, NVIDIA's NVLink and ECC counters before and
# after three doctor runs (two --quick, one full) kept in one --history, what
# doctor saw grow, and the history page. Writes under $OUT (default ./out-counters).
OUT=${OUT:-./out-counters}; mkdir -p "$OUT"
set -x
nvidia-smi nvlink -s 2>&1 | head -5; nvidia-smi -q | grep -i -A2 'replay' | head -8
nvidia-smi nvlink -e 2>&1 | head -30
nvidia-smi -q -d ECC 2>&1 | grep -A3 -i "volatile" | head -12
export NCCL_NVLS_ENABLE=0
H=$OUT/hist
for i in 1 2; do /usr/bin/time -f "wall %e s" ./bin/collbench doctor --quick -q --history $H -o $OUT/quick$i.json --prom $OUT/quick$i.prom > $OUT/quick$i.txt 2>$OUT/quick$i.err; echo rc=$?; cat $OUT/quick$i.err; done
/usr/bin/time -f "wall %e s" ./bin/collbench doctor -q --history $H -o $OUT/full.json > $OUT/full.txt 2>$OUT/full.err; echo rc=$?; cat $OUT/full.err
nvidia-smi nvlink -e 2>&1 | head -30
python3 - <<'P'
import json,os
for f in ["quick1","quick2","full"]:
    d=json.load(open(os.environ["OUT"]+"/"+f+".json"))
    print(f, "healthy", d["healthy"], "findings", [x["severity"]+" "+x["part"]+": "+x["msg"] for x in d["findings"]])
    print("  counter_growth", d.get("counter_growth"))
    print("  history", [(h["part"],h["metric"],round(h["now"],1),round(h["baseline"],1),h.get("flagged",False)) for h in d.get("history",[])])
    print("  stages", [(s["stage"], round(s["seconds"],2)) for s in d.get("stages",[])], "seconds", round(d["seconds"],2))
    print("  notes", d.get("notes"))
    print("  watched", d.get("counters_watched"))
P
./bin/collbench report --history $H -o $OUT/history.html; echo rc=$?
find $H -type f
