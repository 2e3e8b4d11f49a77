#!/usr/bin/python3
"""PyTorch reference for bench_gemm_cpu: torch.mm in float32 on the CPU, at OpenBLAS's best core.

bench_gemm_cpu runs this script and reads its stdout: one "key value" line per result. For each
shape MxNxK:AB (A, B: N as stored, T stored transposed, as bench_gemm_cpu.cpp has them), the line
"gemm_<shape>_ns median min max" gives nanoseconds per call, measured as bench/bench_util.h measures
ringgrad. The output of each call is a fresh tensor, as in eager PyTorch.

Run with Debian's interpreter (/usr/bin/python3, package python3-torch). Exits 3 with an "error ..."
line when torch cannot be imported, 2 on a malformed shape.
"""
import argparse
import re
import statistics

import torch_common  # bench/torch_common.py, beside this script


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", required=True, help="comma-separated MxNxK:AB")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.05)
    args = parser.parse_args()

    shapes = []
    for item in args.shapes.split(","):
        match = re.fullmatch(r"(\d+)x(\d+)x(\d+):([NT])([NT])", item)
        if not match:
            print("error malformed shape %r (expected MxNxK:AB, A and B each N or T)" % item)
            return 2
        shapes.append((item, int(match[1]), int(match[2]), int(match[3]), match[4] == "T", match[5] == "T"))

    torch_common.use_best_blas_core()  # before torch loads OpenBLAS
    torch = torch_common.import_torch(args.threads)
    if torch is None:
        return 3
    for line in torch_common.blas_report():
        print(line)

    gen = torch.Generator().manual_seed(1)
    for name, m, n, k, trans_a, trans_b in shapes:
        # Stored as bench_gemm_cpu stores them: a transposed operand is the .t() view of its storage.
        a = torch.rand((k, m) if trans_a else (m, k), generator=gen) * 2 - 1
        b = torch.rand((n, k) if trans_b else (k, n), generator=gen) * 2 - 1
        a_op = a.t() if trans_a else a
        b_op = b.t() if trans_b else b

        def loop(count, a_op=a_op, b_op=b_op):
            for _ in range(count):
                torch.mm(a_op, b_op)

        ns = torch_common.time_per_call(loop, args.reps, args.min_time)
        print("gemm_%s_ns %.1f %.1f %.1f" % (name, statistics.median(ns), min(ns), max(ns)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
