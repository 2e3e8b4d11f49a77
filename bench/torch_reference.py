#!/usr/bin/python3
"""PyTorch eager reference numbers for bench_dispatch, measured on the CPU.

bench_dispatch runs this script and reads its stdout: one "key value" line per result (the value
is the rest of the line). Measured the same way as bench/bench_util.h: an untimed warm-up grows the
iteration count until one loop takes at least --min-time seconds, then --reps loops are timed and
the median time per call is reported. The Python loop is part of the time, as it is for any eager
PyTorch user.

Run with Debian's interpreter (/usr/bin/python3, package python3-torch). Exits 3 with an
"error ..." line when torch cannot be imported.
"""
import argparse
import os
import statistics
import sys

import torch_common  # bench/torch_common.py, beside this script


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--sizes", default="256,1024,2048")
    args = parser.parse_args()

    torch_common.use_best_blas_core()  # before torch loads OpenBLAS: PyTorch's GEMMs at their best
    torch = torch_common.import_torch(args.threads)
    if torch is None:
        return 3
    import torch.nn.functional as F

    def report(key, ns):
        print(key, "%.3f" % statistics.median(ns))
        sys.stdout.flush()

    # Per-op dispatch: torch.add on 1-element float32 tensors; the result is dropped at once.
    add = torch.add
    a, b = torch.ones(1), torch.full((1,), 2.0)

    def add_loop(n):
        for _ in range(n):
            add(a, b)

    report("add_nograd_ns", torch_common.time_per_call(add_loop, args.reps, args.min_time))
    a.requires_grad_(True)
    b.requires_grad_(True)
    report("add_grad_ns", torch_common.time_per_call(add_loop, args.reps, args.min_time))  # records, then frees, a graph

    # linear forward + backward: x (64, 64), W (64, 64), b (64), all requiring grad.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=gen).requires_grad_(True)
    w = torch.randn(64, 64, generator=gen).requires_grad_(True)
    bias = torch.randn(64, generator=gen).requires_grad_(True)
    linear = F.linear

    def linear_loop(n):
        for _ in range(n):
            x.grad = None
            w.grad = None
            bias.grad = None
            linear(x, w, bias).sum().backward()

    report("linear_fwd_bwd_ns", torch_common.time_per_call(linear_loop, args.reps, args.min_time))

    # GEMM: torch.mm of contiguous square float32 matrices, 2 N^3 FLOPs per call.
    for size in [int(s) for s in args.sizes.split(",") if s]:
        ma = torch.randn(size, size, generator=gen)
        mb = torch.randn(size, size, generator=gen)
        mm = torch.mm

        def mm_loop(n):
            for _ in range(n):
                mm(ma, mb)

        ns = statistics.median(torch_common.time_per_call(mm_loop, args.reps, args.min_time))
        print("gemm_%d_gflops %.3f" % (size, 2.0 * size ** 3 / ns))
        sys.stdout.flush()

    for line in torch_common.blas_report():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
