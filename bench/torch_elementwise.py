#!/usr/bin/python3
"""PyTorch eager reference numbers for bench_elementwise, measured on the CPU.

bench_elementwise runs this script and reads its stdout: one "key value" line per result (the value
is the rest of the line). For each op and size, "<op>_<n>_ns median min max": nanoseconds per call,
measured as bench/bench_util.h measures ringgrad -- an untimed warm-up grows the iteration count
until one loop takes at least --min-time seconds, then --reps loops are timed. The ops and shapes
are bench_elementwise.cpp's (see the table there), under torch.no_grad(), a fresh output per call.

Run with Debian's interpreter (/usr/bin/python3, package python3-torch). Exits 3 with an
"error ..." line when torch cannot be imported.
"""
import argparse
import os
import statistics
import sys

import torch_common  # bench/torch_common.py, beside this script


def shape_of(op, n):
    """(rows, cols) of op's matrix at n elements, as bench_elementwise.cpp's shape_of."""
    if op == "xent":
        return (n // 10, 10) if n >= 10 else (1, n)
    if op in ("sum_dim1", "softmax"):
        return (n // 1024, 1024) if n >= 1024 else (1, n)
    if op == "copy":
        cols = 1024 if n >= 32768 else 32
        return (n // cols, cols) if n >= cols else (1, n)
    return (1, n)


def make_call(torch, op, n):
    """A no-argument function doing one call of `op` at n elements, on inputs made once."""
    import torch.nn.functional as F

    rows, cols = shape_of(op, n)
    gen = torch.Generator().manual_seed(1)
    flat = op in ("add", "relu", "sum", "tanh", "gelu")
    x = torch.randn((rows * cols,) if flat else (rows, cols), generator=gen)
    if op == "add":
        y = torch.randn(rows * cols, generator=gen)
        return lambda: x + y
    if op == "relu":
        return lambda: torch.relu(x)
    if op == "tanh":
        return lambda: torch.tanh(x)
    if op == "gelu":
        return lambda: torch.nn.functional.gelu(x)
    if op == "sum":
        return lambda: torch.sum(x)
    if op == "sum_dim1":
        return lambda: torch.sum(x, 1)
    if op == "softmax":
        return lambda: torch.softmax(x, 1)
    if op == "copy":
        xt = x.t()
        return lambda: xt.contiguous()
    labels = (torch.arange(rows, dtype=torch.int64) * 7 + 3) % cols
    return lambda: F.cross_entropy(x, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--sizes", default="1,1024,1048576,4194304,16777216,67108864")
    parser.add_argument("--ops", default="add,relu,sum,sum_dim1,softmax,xent,copy")
    args = parser.parse_args()

    torch = torch_common.import_torch(args.threads)
    if torch is None:
        return 3

    with torch.no_grad():
        for op in [o for o in args.ops.split(",") if o]:
            for n in [int(s) for s in args.sizes.split(",") if s]:
                call = make_call(torch, op, n)

                def loop(count, call=call):
                    for _ in range(count):
                        call()

                ns = torch_common.time_per_call(loop, args.reps, args.min_time)
                rows, cols = shape_of(op, n)
                print("%s_%d_ns %.3f %.3f %.3f" % (op, rows * cols, statistics.median(ns), min(ns), max(ns)))
                sys.stdout.flush()
                del call

    for line in torch_common.blas_report():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
