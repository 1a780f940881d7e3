"""Tests of parity.sh and parity-report.py on stand-ins for both tools (make
smoke runs them where python3 and bash are): the verdicts, and the passes
run again for a collective that no band could judge."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# Both stand-ins' time for this pass: tool's pass k (counted in a file)
# takes the k-th time of STUB_<TOOL> (the last for later passes).
STUB_HEAD = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, os, sys


    def this_pass(tool):
        count = f"{os.environ['STUB_DIR']}/{tool}.count"
        k = int(open(count).read()) + 1 if os.path.exists(count) else 1
        open(count, "w").write(str(k))
        times = os.environ["STUB_" + tool.upper()].split(",")
        return float(times[min(k, len(times)) - 1])
""")

# A stand-in for NCCL's benchmark: rows of 8-32 B, -N cycles each, at the
# band its environment names for this pass.
REF = STUB_HEAD + textwrap.dedent("""\
    a = sys.argv
    n = int(a[a.index("-N") + 1])
    if a[a.index("-t") + 1] != os.environ.get("STUB_GPUS", a[a.index("-t") + 1]):
        sys.exit("asked for more GPUs than the machine has: Test failure common.cu:1454")
    us = this_pass("ref")
    print("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong")
    for c in range(n):
        for s in (8, 16, 32):
            t = us + 0.01 * ((c * 7 + s) % 5)
            print(f"{s:>8} {s // 4:>6} float sum -1 {t:.2f} 0.00 0.00 0 {t:.2f} 0.00 0.00 0")
""")

# A stand-in for collbench: the same rows as its JSON document, written
# to -o, every cycle's time in the row.
CB = STUB_HEAD + textwrap.dedent("""\
    a = sys.argv
    n = int(a[a.index("--cycles") + 1])
    us = this_pass("cb")
    rows = []
    for s in (8, 16, 32):
        ts = [us + 0.01 * ((c * 3 + s) % 5) for c in range(n)]
        rows.append({"collective": a[1], "size_bytes": s, "count": s // 4, "out_of_place": {"time_us": ts[0], "cycles": {"times_us": ts}}})
    json.dump({"results": rows}, open(a[a.index("-o") + 1], "w"))
""")


class Parity(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        os.makedirs(self.d + "/nt/build")
        for name, text in (("nt/build/reduce_scatter_perf", REF), ("nt/build/all_reduce_perf", REF), ("collbench", CB)):
            p = os.path.join(self.d, name)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o755)

    def tearDown(self):
        shutil.rmtree(self.d)

    def parity(self, ref, cb, gpus="0,1", **more):
        """parity.sh on reduce-scatter with 2 passes of 10 cycles, NCCL's
        benchmark's pass k at the time ref[k] (the last for later passes),
        collbench's at cb[k], and the environment more: its exit status
        and output."""
        env = dict(os.environ, STUB_DIR=self.d, STUB_REF=ref, STUB_CB=cb, BIN=self.d + "/collbench",
                   NCCL_TESTS=self.d + "/nt", PASSES="2", CYCLES="10", EMAX="32", VARIANTS="ref cb",
                   COLLS="reduce-scatter", CUDA_VISIBLE_DEVICES=gpus, **more)
        if "MORE" not in more:
            env.pop("MORE", None)
        p = subprocess.run(["bash", os.path.join(HERE, "parity.sh"), self.d + "/out"], env=env,
                           capture_output=True, text=True, timeout=120)
        with open(self.d + "/out/runs.txt") as f:
            self.runs = f.read()
        return p.returncode, p.stdout + p.stderr

    def test_same_band_is_judged_once(self):
        rc, out = self.parity("6.5", "6.5")
        self.assertEqual(rc, 0, out)
        self.assertIn("unjudged: \n", out)
        self.assertNotIn("again", out)
        self.assertEqual(self.runs.count("pass"), 4)

    def test_a_gap_within_the_band_fails(self):
        rc, out = self.parity("6.5", "7.2")
        self.assertEqual(rc, 1, out)
        self.assertIn("WITHIN-BAND FAIL reduce-scatter", out)

    def test_tools_in_different_bands_get_more_passes(self):
        # 2x H200, build e0673a2: NCCL's benchmark in the fast band, and
        # collbench in the slow one, in every pass; the later passes
        # bring both into both bands.
        rc, out = self.parity("6.5,6.5,9.2,6.5", "9.2,9.2,6.5,9.2")
        self.assertIn("unjudged: reduce-scatter", out)
        self.assertIn("measuring reduce-scatter again: 2 more alternating passes", out)
        self.assertIn("reduce-scatter pass 4: exit 0", self.runs)
        self.assertEqual(rc, 0, out)
        self.assertIn("WITHIN-BAND OK", out)
        with open(self.d + "/out/parity.json") as f:
            self.assertEqual(len(json.load(f)["reduce-scatter"]["passes"]), 8)

    def test_still_unjudged_fails_with_the_reason(self):
        rc, out = self.parity("6.5", "9.2")
        self.assertEqual(rc, 1, out)
        self.assertIn("measuring reduce-scatter again", out)
        self.assertIn("no size with 10 times of each tool in one cluster", out)
        self.assertIn("WITHIN-BAND FAIL reduce-scatter", out)

    def test_no_more_passes_when_asked(self):
        rc, out = self.parity("6.5", "9.2", MORE="0")
        self.assertEqual(rc, 1, out)
        self.assertNotIn("again", out)
        self.assertEqual(self.runs.count("pass"), 4)

    def test_one_gpu_machine(self):
        # 1x H200, build e0673a2: without CUDA_VISIBLE_DEVICES, parity.sh
        # gave NCCL's benchmark -t 2 on a machine of one GPU, and every
        # pass failed. A stand-in nvidia-smi lists one GPU.
        smi = os.path.join(self.d, "nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
        os.chmod(smi, 0o755)
        rc, out = self.parity("6.5", "6.5", gpus="", STUB_GPUS="1", PATH=self.d + os.pathsep + os.environ["PATH"])
        self.assertEqual(rc, 0, out)
        self.assertIn("WITHIN-BAND OK", out)


if __name__ == "__main__":
    sys.exit(unittest.main())
