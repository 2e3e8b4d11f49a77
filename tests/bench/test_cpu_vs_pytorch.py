"""bench/cpu_vs_pytorch.py's goal judges, on rows shaped as the benchmarks' --json writes them.

A judge that finds nothing reports nothing, and a missing goal would pass unnoticed; so each judge
must find its goals in rows of the real schema, and compute them the way the goal is worded.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench"))
import cpu_vs_pytorch as cvp  # noqa: E402


def result(*rows):
    return {"program": "test", "run": {}, "rows": list(rows)}


class Judges(unittest.TestCase):
    def test_allreduce_compares_busbw_with_the_memcpy_column_and_judges_latency(self):
        r = result({"table": "ring-shm", "size": 4, "median": 12.0, "max": 80.0, "busbw": 0.0, "memcpy": 0.4},
                   {"table": "ring-shm", "size": 4096, "median": 6.0, "max": 9.0, "busbw": 0.3, "memcpy": 2.0},
                   {"table": "ring-shm", "size": 1 << 20, "median": 100.0, "max": 120.0, "busbw": 8.0, "memcpy": 16.0},
                   {"table": "busbw", "size": 1 << 20, "ring-shm": 8.0, "torch-gloo": 1.0})
        goals = {name: (value, op, target) for name, value, op, target in cvp.goals_allreduce(r)}
        self.assertAlmostEqual(goals["ring-shm busbw / memcpy GB/s, 1M B"][0], 0.5)
        self.assertEqual(goals["ring-shm 4 B-4 KB, worst median latency (us)"][0], 12.0)
        self.assertEqual(goals["ring-shm 4 B-4 KB, worst slowest call latency (us)"], (80.0, "<=", 100.0))
        self.assertEqual(goals["ring-shm busbw / memcpy GB/s, 1M B"][1:], (">=", 0.8))
        self.assertEqual(len(goals), 3)

    def test_gemm_goal_is_the_worst_mlp_shape(self):
        r = {"rows": [{"table": "gemm", "shape": "256x1024x784:NT", "ratio": 1.1},
                      {"table": "gemm", "shape": "1024x784x256:TN", "ratio": 0.93},
                      {"table": "gemm", "shape": "512x512x512:NN", "ratio": 0.5},  # not an MLP shape
                      {"table": "gemm", "shape": "256x1024x1024:NN", "ratio": None}]}
        self.assertEqual(cvp.goals_gemm(2)(r),
                         [("gemm at the MLP's shapes, worst, 2 thread(s): ringgrad / torch.mm GFLOP/s", 0.93, ">=", 1.0)])
        self.assertEqual(cvp.goals_gemm(1)({"rows": []}), [])

    def test_ddp_goals_are_ratios_of_step_times(self):
        r = result({"table": "ddp_step", "mode": "ddp", "step": 12.0},
                   {"table": "ddp_step", "mode": "ddp-copy", "step": 13.0},
                   {"table": "ddp_step", "mode": "ddp-no_sync", "step": 10.0},
                   {"table": "ddp_step", "mode": "torch-ddp", "step": 30.0})
        goals = {name: (value, op, target) for name, value, op, target in cvp.goals_ddp(r)}
        self.assertAlmostEqual(goals["ddp / ddp-no_sync step"][0], 1.2)
        self.assertEqual(goals["ddp / ddp-no_sync step"][1:], ("<=", 1.10))
        self.assertAlmostEqual(goals["ddp / torch-ddp step"][0], 0.4)
        self.assertEqual(len(goals), 2)  # ddp-copy (gradient_as_bucket_view off) is no goal

    def test_elementwise_judges_only_1m_elements_and_more(self):
        r = result({"table": "elementwise", "op": "add", "elements": 1024, "ratio": 7.0},
                   {"table": "elementwise", "op": "add", "elements": 1 << 20, "ratio": 0.8},
                   {"table": "one_element", "op": "add", "ratio": 9.0})
        goals = cvp.goals_elementwise(2)(r)
        self.assertEqual(goals, [("add, 1M elements, 2 thread(s): ringgrad / pytorch GB/s", 0.8, ">=", 1.0)])

    def test_mlp_and_dispatch_read_the_ringgrad_rows(self):
        mlp = result({"table": "mlp_step", "framework": "ringgrad", "threads": 1, "ratio": 1.2},
                     {"table": "mlp_step", "framework": "pytorch", "threads": 1, "ratio": "-"})
        self.assertEqual(cvp.goals_mlp(mlp), [("mlp step, 1 thread(s): ringgrad / pytorch time", 1.2, "<=", 0.9)])
        dispatch = result({"table": "dispatch", "op": "add 1-elem", "grad": "no", "ratio": 0.12},
                          {"table": "dispatch", "op": "add 1-elem", "grad": "yes", "ratio": 0.16})
        self.assertEqual(cvp.goals_dispatch(dispatch), [("add of 1 element: ringgrad / pytorch time", 0.12, "<=", 0.25)])

    def test_results_replace_a_file_but_never_a_directory(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "summary.json")
            cvp.write_file(path, "one")
            cvp.write_file(path, "two")
            with open(path) as f:
                self.assertEqual(f.read(), "two")
            self.assertEqual(os.listdir(d), ["summary.json"])  # no temp file left behind
            os.mkdir(os.path.join(d, "dir"))
            with self.assertRaises(SystemExit):
                cvp.write_file(os.path.join(d, "dir"), "three")


if __name__ == "__main__":
    unittest.main()
