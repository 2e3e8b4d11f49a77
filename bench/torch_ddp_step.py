"""PyTorch's DistributedDataParallel (gloo) on bench_ddp_step's model and step, in the same run.

    /usr/bin/python3 bench/torch_ddp_step.py --world 2 --batch 128 --steps 50 --warmup 10

Each rank: torch.set_num_threads(1), MLP 784-1024-1024-10 (ReLU), SGD lr 0.01 momentum 0.9, batch
`--batch` per rank; step = zero_grad(set_to_none), forward, cross-entropy, backward, step, item().
Times `--steps` steps after `--warmup`, with DDP and inside no_sync(); per step, the slowest rank's
time. Prints "row torch-ddp <ms> <ms> ..." and "row torch-no_sync ...".
"""
import argparse
import os
import sys
import time

import torch_common  # bench/torch_common.py, beside this script

torch_common.use_best_blas_core()  # before torch loads OpenBLAS; a spawned rank reuses the choice

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rank_main(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(args.batch, 784, generator=g)
    y = torch.tensor([(i * 7 + rank) % 10 for i in range(args.batch)])

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        loss.item()

    for name in ("torch-ddp", "torch-no_sync"):
        dist.barrier()
        times = []
        for s in range(args.warmup + args.steps):
            start = time.perf_counter()
            if name == "torch-ddp":
                step()
            else:
                with ddp.no_sync():
                    step()
            if s >= args.warmup:
                times.append((time.perf_counter() - start) * 1e3)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print("row " + name + " " + " ".join("%.6g" % v for v in t.tolist()), flush=True)
    # Leave without destroy_process_group(): with torch 1.13's gloo it sometimes never returned here
    # (2 runs in 4 hung after printing their rows). Everything is printed and both ranks are past
    # their last collective once this barrier returns, so the process can simply end.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    for line in torch_common.blas_report():
        print(line, flush=True)
    mp.spawn(rank_main, args=(args, 40000 + os.getpid() % 20000), nprocs=args.world)


if __name__ == "__main__":
    main()
