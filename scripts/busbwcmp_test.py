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

    def write(self, name, coll, bw):
        rows = [{"collective": coll, "size_bytes": s, "out_of_place": {"busbw_gbps": v}} for s, v in bw.items()]
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
        self.assertIn("FAILS without the checks: allgather 2048 MiB", text)

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

    def test_room_is_shown(self):
        self.machine(ag_nccl_checked=338.0)
        for k in (1, 2):
            self.write(f"room-nref-allgather-{k}.json", "allgather", {s: 341.0 for s in SIZES})
        _, text = self.judge(busbwcmp.room, "allgather")
        self.assertIn("1 GiB buffers (2 passes)", text)
        self.assertIn("2048M 341.0/338.2/339.2", text)


if __name__ == "__main__":
    unittest.main()
