"""Tests of paritylib's readers (make smoke runs them where python3 is)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib  # noqa: E402


class RefCycles(unittest.TestCase):
    def read(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            return paritylib.ref_cycles(f.name)
        finally:
            os.unlink(f.name)

    def test_rows_with_and_without_a_reduction(self):
        # Lines as NCCL's benchmark 2.19 prints them: allreduce names its
        # reduction; hypercube leaves that column blank; rows of count 0
        # and comment lines are left out.
        got = self.read(
            "#       size         count      type   redop    root     time\n"
            "        1024           256     float     sum      -1    10.50    0.10    0.18       0    10.20    0.10    0.19       0\n"
            "        1024           256     float     sum      -1    10.70    0.10    0.18       0    10.10    0.10    0.19       0\n"
            "           0             0     float              -1    20.84    0.00    0.00       0    20.95    0.00    0.00       0\n"
            "         128             8     float              -1    27.99    0.00    0.00       0    21.91    0.00    0.00       0\n"
            "# Avg bus bandwidth    : 0.27\n")
        self.assertEqual(got, {1024: [10.5, 10.7], 128: [27.99]})


if __name__ == "__main__":
    unittest.main()
