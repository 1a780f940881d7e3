"""Tests of busbwcmp's judges (make smoke runs them where python3 is)."""
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import busbwcmp  # noqa: E402

MiB = 1 << 20
SIZES = [32 * MiB, 64 * MiB, 2048 * MiB]


class Judges(unittest.TestCase):
    def setUp(self):
        self.w = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.w)

    def write(self, name, coll, bw, us=None):
        """A results file of coll's rows: busbw per size, and, where us is
        given, each row's time per operation."""
        rows = [{"collective": coll, "size_bytes": s, "out_of_place": {"busbw_gbps": v, "time_us": (us or {}).get(s, 0.0)}} for s, v in bw.items()]
        with open(os.path.join(self.w, name), "w") as f:
            json.dump({"results": rows}, f)

    def judge(self, fn, *args):
        """Runs one of busbwcmp's judges on the work directory: its verdict
        and what it printed."""
        out = io.StringIO()
        ok = fn(self.w, *args, out)
        return ok, out.getvalue()

    def machine(self, ag_nccl_checked, ag_cb_unchecked=340.0, sweep=None):
        """Every collective at 300 GB/s in both tools' 4 passes each, but
        allgather at 2 GiB: NCCL's benchmark checking at ag_nccl_checked,
        collbench checking at 339, both unchecked at 340 (collbench at
        ag_cb_unchecked)."""
        sw = []
        for c in busbwcmp.SIX:
            for k in range(1, 5):
                ref = {s: 300.0 + 0.1 * k for s in SIZES}
                cb = {s: 300.0 + 0.1 * k for s in SIZES}
                if c == "allgather":
                    ref[2048 * MiB] = ag_nccl_checked + 0.1 * k
                    cb[2048 * MiB] = 339.0 + 0.1 * k
                    self.write(f"nocheck-nref-{c}-{k}.json", c, {s: 340.0 + 0.1 * k for s in SIZES})
                    self.write(f"nocheck-cb-{c}-{k}.json", c, {s: ag_cb_unchecked + 0.1 * k for s in SIZES})
                self.write(f"nref-{c}-{k}.json", c, ref)
                self.write(f"cbref-{c}-{k}.json", c, cb)
            for s in SIZES:
                v = 300.2 if not (c == "allgather" and s == 2048 * MiB) else 339.2
                if sweep and (c, s) in sweep:
                    v = sweep[(c, s)]
                sw.append({"collective": c, "size_bytes": s, "out_of_place": {"busbw_gbps": v}})
        with open(os.path.join(self.w, "sweep.json"), "w") as f:
            json.dump({"results": sw}, f)

    def test_within_one_percent(self):
        self.machine(ag_nccl_checked=338.0)
        ok, text = self.judge(busbwcmp.checked)
        self.assertTrue(ok)
        self.assertIn("12 rows", text)  # 64 MiB and 2 GiB: 32 MiB is not judged
        self.assertIn("again: \n", text)

    def test_beyond_with_the_checks_within_without(self):
        # 4x H200, build e894a30: allgather 2 GiB, NCCL's benchmark's check
        # cost it 1.3%, collbench's 0.3%; without either, 0.1% apart.
        self.machine(ag_nccl_checked=335.5)
        ok, text = self.judge(busbwcmp.checked)
        self.assertFalse(ok)
        self.assertIn("again: allgather", text)
        ok, text = self.judge(busbwcmp.unchecked)
        self.assertTrue(ok)
        self.assertIn("within without the checks: allgather 2048 MiB", text)
        self.assertIn("NCCL's benchmark -1.3%, collbench -0.3%", text)

    def test_beyond_without_the_checks_too(self):
        self.machine(ag_nccl_checked=335.5, ag_cb_unchecked=346.0)
        self.assertFalse(self.judge(busbwcmp.checked)[0])
        ok, text = self.judge(busbwcmp.unchecked)
        self.assertFalse(ok)
        self.assertIn("beyond 1% without the checks: allgather 2048 MiB", text)
        self.assertTrue(text.endswith("long: allgather:2048M\n"), text)

    def long_loops(self, cb_long_bw):
        """allgather 2 GiB beyond without the checks (NCCL's benchmark 340,
        collbench 346 GB/s in loops of 20), then 4 passes of each on long
        loops: NCCL's benchmark at 346 GB/s, collbench at cb_long_bw. Times
        per operation: 2 GiB at each busbw's 3/4 algbw factor, so the loops
        of 20 carry a cost per loop the long ones barely do."""
        self.machine(ag_nccl_checked=335.5, ag_cb_unchecked=346.0)
        for k in range(1, 5):
            for pre, bw in (("nocheck-nref", 340.0), ("nocheck-cb", 346.0), ("long-nref", 346.0), ("long-cb", cb_long_bw)):
                us = {s: s * 0.75 / (bw * 1e3) for s in SIZES}
                self.write(f"{pre}-allgather-{k}.json", "allgather", {s: bw for s in SIZES}, us)
        self.assertFalse(self.judge(busbwcmp.checked)[0])
        self.assertFalse(self.judge(busbwcmp.unchecked)[0])
        return self.judge(busbwcmp.long)

    def test_within_on_long_loops(self):
        # 4x H200, build beb5e38: broadcast 64 MiB without the checks,
        # NCCL's benchmark 1.5% slower in loops of 20; the same in loops
        # of 200.
        ok, text = self.long_loops(cb_long_bw=346.5)
        self.assertTrue(ok, text)
        self.assertIn("within on loops of 200: allgather 2048 MiB: collbench 346.5 (+0.1%), NCCL's benchmark 346.0 GB/s", text)
        # NCCL's benchmark: 4737.1 us an operation in loops of 20 (340
        # GB/s) and 4654.9 in loops of 200 (346), so 82.1 us / (1/20 -
        # 1/200) a loop; collbench: 4654.9 and 4648.2 us.
        self.assertIn("NCCL's benchmark 1825 us, collbench 149 us", text)

    def test_per_loop(self):
        # 4x H200, build beb5e38, broadcast 64 MiB without the checks, 3
        # alternating passes: NCCL's benchmark's times per operation in
        # loops of 20 and of 200, then collbench's.
        self.assertEqual(round(busbwcmp.per_loop([209.99, 210.12, 211.35], [207.02, 206.61, 207.48])), 69)
        self.assertEqual(round(busbwcmp.per_loop([207.36, 206.77, 208.30], [206.97, 206.80, 207.53])), 9)

    def test_beyond_on_long_loops(self):
        ok, text = self.long_loops(cb_long_bw=352.0)
        self.assertFalse(ok)
        self.assertIn("FAILS on loops of 200: allgather 2048 MiB", text)

    def test_long_loops_missing_fail(self):
        self.machine(ag_nccl_checked=335.5, ag_cb_unchecked=346.0)
        self.judge(busbwcmp.checked)
        self.judge(busbwcmp.unchecked)
        ok, text = self.judge(busbwcmp.long)
        self.assertFalse(ok)
        self.assertIn("FAILS on long loops: allgather 2048 MiB: passes missing (collbench 0, NCCL's benchmark 0)", text)

    def test_a_sweep_row_outside_stays_failed(self):
        # The one sweep's row beyond every pass is no gap of medians: the
        # runs without the checks do not judge it.
        self.machine(ag_nccl_checked=338.0, sweep={("broadcast", 64 * MiB): 290.0})
        ok, text = self.judge(busbwcmp.checked)
        self.assertFalse(ok)
        self.assertIn("FAILS: broadcast 64 MiB", text)
        ok, text = self.judge(busbwcmp.unchecked)
        self.assertFalse(ok)
        self.assertIn("another reason", text)

    def test_missing_passes_fail(self):
        self.machine(ag_nccl_checked=338.0)
        for k in range(2, 5):
            os.unlink(os.path.join(self.w, f"nref-sendrecv-{k}.json"))
        ok, text = self.judge(busbwcmp.checked)
        self.assertFalse(ok)
        self.assertIn("sendrecv 64 MiB: rows are missing", text)

    def test_an_unreadable_file_is_a_missing_pass(self):
        self.machine(ag_nccl_checked=338.0)
        for k in range(2, 5):
            with open(os.path.join(self.w, f"cbref-alltoall-{k}.json"), "w") as f:
                f.write("{not json")
        ok, text = self.judge(busbwcmp.checked)
        self.assertFalse(ok)
        self.assertIn("alltoall 64 MiB: rows are missing (sweep True, collbench 1 passes", text)

    def test_within_without_the_checks_is_not_judged_long(self):
        self.machine(ag_nccl_checked=335.5)
        self.judge(busbwcmp.checked)
        ok, text = self.judge(busbwcmp.unchecked)
        self.assertTrue(ok)
        self.assertTrue(text.endswith("long: \n"), text)
        self.assertTrue(self.judge(busbwcmp.long)[0])

    def test_one_rank_judges_algbw(self):
        # 1x H200, build e0673a2: on one rank both tools give allreduce a
        # busbw of 0; the judge divided by it. algbw stands in, and a gap
        # in it is still found.
        for c in busbwcmp.SIX:
            for k in range(1, 3):
                for pre, alg in (("nref", 2110.0 + k), ("cbref", 2112.0 + k if c != "alltoall" else 2060.0)):
                    rows = [{"collective": c, "size_bytes": s, "out_of_place": {"busbw_gbps": 0.0, "algbw_gbps": alg}} for s in SIZES]
                    with open(os.path.join(self.w, f"{pre}-{c}-{k}.json"), "w") as f:
                        json.dump({"results": rows}, f)
        rows = [{"collective": c, "size_bytes": s, "out_of_place": {"busbw_gbps": 0.0, "algbw_gbps": 2112.0}} for c in busbwcmp.SIX for s in SIZES]
        with open(os.path.join(self.w, "sweep.json"), "w") as f:
            json.dump({"results": rows}, f)
        ok, text = self.judge(busbwcmp.checked)
        self.assertFalse(ok)
        self.assertIn("  allreduce 64 MiB: collbench 2113.5 (+0.1%), NCCL's benchmark 2111.5 GB/s", text)
        self.assertIn("beyond 1%: alltoall 64 MiB: collbench 2060.0 (-2.4%)", text)
        self.assertIn("again: alltoall\n", text)

    def test_a_step_before_that_wrote_nothing_fails_in_a_line(self):
        for fn, name in ((busbwcmp.unchecked, "sixfail.json"), (busbwcmp.long, "longfail.json")):
            ok, text = self.judge(fn)
            self.assertFalse(ok)
            self.assertIn(f"FAILS: {name} of the step before cannot be read (No such file or directory)", text)


if __name__ == "__main__":
    unittest.main()
