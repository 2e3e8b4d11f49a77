#!/usr/bin/python3
"""PyTorch eager reference for bench_mlp_step: one SGD-momentum training step of an MLP on the CPU.

bench_mlp_step writes the batch and the initial weights to a raw file (--data), runs this script
and reads its stdout: one "key value" line per result (the value is the rest of the line). The file
holds, little-endian and back to back: x float32 [batch, sizes[0]], labels int64 [batch], then for
each Linear layer its weight float32 [out, in] and its bias float32 [out].

For each thread count (torch.set_num_threads) a fresh model is loaded from those weights and trained
on the same batch: --curve + --warmup untimed steps, then --steps timed ones. A step is
    forward   out = model(x); loss = F.cross_entropy(out, labels)      (mean)
    backward  loss.backward(); loss.item(); the graph is freed
    optim     opt.step(); opt.zero_grad(set_to_none=True)
which is what bench_mlp_step times on the ringgrad side. Per thread count t it prints
t<t>_losses (every step's loss) and t<t>_step_ms / _forward_ms / _backward_ms / _optim_ms (the
timed steps), comma-separated; bench_mlp_step computes medians and percentiles itself, so both
sides use the same statistics.

Run with Debian's interpreter (/usr/bin/python3, package python3-torch). Exits 3 with an
"error ..." line when torch cannot be imported, 2 on a bad data file.
"""
import argparse
import gc
import sys
import time

import torch_common  # bench/torch_common.py, beside this script


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="raw file with x, labels and the initial weights")
    parser.add_argument("--sizes", default="784,1024,1024,10")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--curve", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    args = parser.parse_args()

    torch_common.use_best_blas_core()  # before torch loads OpenBLAS: PyTorch's GEMMs at their best
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or a broken install raising something else
        print("error cannot import torch with %s: %s" % (sys.executable, str(e).splitlines()[0]))
        return 3

    sizes = [int(s) for s in args.sizes.split(",") if s]
    batch = args.batch
    with open(args.data, "rb") as f:
        raw = bytearray(f.read())  # writable, so torch.frombuffer does not warn
    offset = 0

    def take(dtype, shape):
        nonlocal offset
        count = 1
        for s in shape:
            count *= s
        t = torch.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape).clone()
        offset += count * t.element_size()
        return t

    try:
        x = take(torch.float32, (batch, sizes[0]))
        labels = take(torch.int64, (batch,))
        weights = [(take(torch.float32, (o, i)), take(torch.float32, (o,))) for i, o in zip(sizes, sizes[1:])]
    except (ValueError, RuntimeError) as e:
        print("error bad data file %s: %s" % (args.data, e))
        return 2
    if offset != len(raw):
        print("error bad data file %s: %d bytes, expected %d" % (args.data, len(raw), offset))
        return 2

    print("torch_version", torch.__version__)
    print("python", sys.executable)

    for threads in [int(t) for t in args.threads.split(",") if t]:
        torch.set_num_threads(threads)
        layers = []
        for n, (w, b) in enumerate(weights):
            linear = torch.nn.Linear(w.shape[1], w.shape[0])
            with torch.no_grad():
                linear.weight.copy_(w)
                linear.bias.copy_(b)
            layers.append(linear)
            if n + 1 < len(weights):
                layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        cross_entropy = F.cross_entropy
        clock = time.perf_counter_ns

        def step():
            t0 = clock()
            out = model(x)
            loss = cross_entropy(out, labels)
            t1 = clock()
            loss.backward()
            value = loss.item()
            del out, loss  # frees the graph inside the step, as the C++ side does
            t2 = clock()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t3 = clock()
            return value, (t3 - t0, t1 - t0, t2 - t1, t3 - t2)

        losses = []
        for _ in range(args.curve + args.warmup):  # not timed
            losses.append(step()[0])
        times = []
        gc_was_enabled = gc.isenabled()
        gc.disable()  # as timeit does
        try:
            for _ in range(args.steps):
                value, t = step()
                losses.append(value)
                times.append(t)
        finally:
            if gc_was_enabled:
                gc.enable()

        key = "t%d_" % threads
        print(key + "threads", torch.get_num_threads())
        print(key + "losses", ",".join("%.9g" % v for v in losses))
        for i, name in enumerate(["step", "forward", "backward", "optim"]):
            print(key + name + "_ms", ",".join("%.6f" % (t[i] * 1e-6) for t in times))
        sys.stdout.flush()

    for line in torch_common.blas_report():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
