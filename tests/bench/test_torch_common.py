"""bench/torch_common.py's choice of OpenBLAS core, on made-up probe results (no torch needed).

The rule under test: a reference is never timed on a fallback core in silence. OpenBLAS's own pick
is replaced by the fastest correct core when that is more than kBetterBy faster; a wrong core is
never chosen; a core the user forced is kept, with a warning when it is slow or wrong.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench"))
import torch_common as tc  # noqa: E402


def core(name, gflops, error=1e-7):
    return {"core": name, "gflops": gflops, "error": error}


class Decide(unittest.TestCase):
    def test_a_generic_fallback_is_replaced_by_the_fastest_correct_core(self):
        default = core("Prescott", 36)
        out = tc.decide(default, [default, core("SkylakeX", 170), core("Haswell", 110)], None)
        self.assertEqual(out["use"], "SkylakeX")
        self.assertIn("generic fallback", out["note"])
        self.assertIn("SkylakeX 170", out["probed"])
        self.assertNotIn("warning", out)

    def test_a_fast_but_wrong_core_is_never_chosen(self):
        default = core("Prescott", 36)
        out = tc.decide(default, [default, core("Cooperlake", 200, error=0.3), core("Haswell", 110)], None)
        self.assertEqual(out["use"], "Haswell")
        self.assertIn("Cooperlake 200 (wrong)", out["probed"])

    def test_a_good_own_choice_is_kept(self):
        default = core("SkylakeX", 164)
        out = tc.decide(default, [default, core("Cooperlake", 174)], None)  # 1.06x: within kBetterBy
        self.assertIsNone(out["use"])
        self.assertIn("within", out["note"])

    def test_a_wrong_own_choice_is_replaced_even_when_fast(self):
        default = core("Cooperlake", 200, error=1.0)
        out = tc.decide(default, [default, core("SkylakeX", 150)], None)
        self.assertEqual(out["use"], "SkylakeX")
        self.assertIn("wrong results", out["note"])

    def test_a_slow_forced_core_is_kept_with_a_warning(self):
        default = core("Prescott", 36)
        out = tc.decide(default, [default, core("SkylakeX", 170)], "Prescott")
        self.assertIsNone(out["use"])
        self.assertIn("handicapped", out["warning"])

    def test_no_correct_core_warns(self):
        default = core("Prescott", 36, error=float("inf"))
        out = tc.decide(default, [default], None)
        self.assertIsNone(out["use"])
        self.assertIn("not trustworthy", out["warning"])

    def test_only_cores_the_cpu_can_run_are_candidates(self):
        avx2_only = {"avx", "avx2", "fma", "sse4_2", "pni", "GenuineIntel"}
        names = [name for name, needs in tc.CANDIDATE_CORES if needs <= avx2_only]
        self.assertEqual(names, ["Haswell", "Sandybridge", "Nehalem", "Prescott"])


if __name__ == "__main__":
    unittest.main()
