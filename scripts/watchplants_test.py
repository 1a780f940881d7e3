"""Tests of watchplants's judge and its pooling (make smoke runs them where python3 is)."""
import datetime
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import watchplants  # noqa: E402

T0 = 1_800_000_000.0  # the first plant's start, epoch seconds


def at(s):
    """A finding's "at" for T0 + s."""
    return datetime.datetime.fromtimestamp(T0 + s, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def finding(rank, s, cause=watchplants.GPU_LATE, cleared=False, nvlink=None):
    f = {"rank": rank, "at": at(s), "cause": cause, "late_us": 700.0}
    if cleared:
        f["cleared"] = True
    if nvlink is not None:
        f["nvlink"] = nvlink
    return f


def episode(k, plant, victim, start):
    return {"episode": k, "plant": plant, "victim": victim, "start": T0 + start, "stop": T0 + start + 6}


class Judge(unittest.TestCase):
    def judge(self, findings, e, n=4):
        return watchplants.judge_episode(findings, e, 4, n, 1)

    def test_each_way_an_episode_passes_or_fails(self):
        copy = episode(0, "copy", 2, 0)
        for name, fs, ok in [
            ("named with the plant's cause", [finding(2, 2.1)], True),
            ("never named", [], False),
            ("named before the plant began (another episode's)", [finding(2, -1)], False),
            ("named with another cause", [finding(2, 2.1, cause="issued late")], False),
            ("another rank named while it ran", [finding(2, 2.1), finding(1, 3)], False),
            ("another rank named in the pause after it", [finding(2, 2.1), finding(1, 8)], False),
            ("another rank's clear in the pause is no name", [finding(2, 2.1), finding(1, 8, cleared=True)], True),
            ("cleared while the plant ran", [finding(2, 2.1), finding(2, 4, cleared=True)], False),
            ("cleared after the plant stopped", [finding(2, 2.1), finding(2, 7, cleared=True)], True),
        ]:
            with self.subTest(name):
                r = self.judge(fs, copy)
                self.assertEqual(r["ok"], ok, r)
        r = self.judge([finding(2, 2.1)], copy)
        self.assertAlmostEqual(r["named_s"], 2.1, places=3)

    def test_the_sleeping_host_is_named_as_issued_late(self):
        e = episode(3, "sleep", 0, 0)
        self.assertTrue(self.judge([finding(0, 2.3, cause="issued late")], e)["ok"])
        self.assertFalse(self.judge([finding(0, 2.3)], e)["ok"])

    def test_a_peer_copy_names_its_gpu_by_nvlink_and_may_name_the_gpu_it_copies_to(self):
        e = episode(4, "p2p", 3, 0)
        cause = watchplants.CAUSE["p2p"]
        by_link = dict(cause=cause, nvlink={"out_gbps": 90})
        # GPU 3 copies to GPU 0 (the wrap of 4): both ends may be named
        self.assertTrue(self.judge([finding(3, 2.0, **by_link), finding(0, 2.2, **by_link)], e)["ok"])
        self.assertFalse(self.judge([finding(3, 2.0, **by_link), finding(1, 2.2, **by_link)], e)["ok"])
        # named as late, not by its links: the finding is not the one wanted
        self.assertFalse(self.judge([finding(3, 2.0)], e)["ok"])


class Pool(unittest.TestCase):
    def write(self, d, name, obj, lines=False):
        with open(os.path.join(d, name), "w") as f:
            if lines:
                f.write("".join(json.dumps(o) + "\n" for o in obj))
            else:
                json.dump(obj, f)
        return os.path.join(d, name)

    def test_two_calls_pool_into_one_table(self):
        with tempfile.TemporaryDirectory() as d:
            rec = {"findings": [finding(0, 2.0), finding(1, 12.0)], "counts": {"operations_judged": 10}}
            for j, start in ((1, 0), (2, 10)):
                self.write(d, "watch-%d.json" % j, rec)
                self.write(d, "plants-%d.jsonl" % j, [episode(j - 1, "copy", j - 1, start)], lines=True)
            said = []
            first = watchplants.judge(d, 1, 1, 4, 4, out=said.append)
            second = watchplants.judge(d, 2, 3, 4, 4, out=said.append)  # job 3 has no files
            self.assertTrue(any("job 3: no record" in s for s in said), said)
            a = self.write(d, "a.json", first)
            b = self.write(d, "b.json", second)
            out = io.StringIO()
            with redirect_stdout(out):
                rc = watchplants.main(["watchplants.py", "table", a, b])
            self.assertEqual(rc, 0, out.getvalue())
            self.assertIn("| copy | 2 of 2 | 2.0 / 2.0 s | 0 | 0 |", out.getvalue())
            with redirect_stdout(io.StringIO()):
                self.assertEqual(watchplants.main(["watchplants.py", "table", a, a]), 2)  # the same call twice
                self.assertEqual(watchplants.main(["watchplants.py", "table", self.write(d, "none.json", [])]), 1)

    def test_a_miss_fails_the_pool(self):
        rows = [dict(episode(0, "copy", 0, 0), job=1, named_s=None, cause=None, late_us=None, others=0, cleared_while_on=False, ok=False)]
        self.assertFalse(watchplants.passed(rows))
        self.assertIn("| copy | 0 of 1 | - / - s | 0 | 0 |", watchplants.table(rows))


if __name__ == "__main__":
    unittest.main()
