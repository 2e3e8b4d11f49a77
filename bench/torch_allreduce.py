"""torch.distributed all-reduce with the gloo backend: the reference bench_allreduce runs in the same run.

    /usr/bin/python3 bench/torch_allreduce.py --world 2 --min-bytes 4 --max-bytes 268435456

Same method as bench_allreduce.cpp: per size, 5 untimed all-reduces, then a timed loop (about 0.2 s,
5 to 1000 iterations); time is the slowest rank's mean. Prints one line per size:
    row torch-gloo <bytes> <seconds>
"""
import argparse
import os
import time

import torch_common  # bench/torch_common.py, beside this script

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iterations_for(nbytes):
    return int(min(max((200 << 20) // max(nbytes, 1 << 16), 5), 1000))


def rank_main(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        t = torch.zeros(max(1, nbytes // 4))
        for _ in range(5):
            dist.all_reduce(t)
        iters = iterations_for(nbytes)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"row torch-gloo {t.numel() * 4} {seconds.item():.9g}", flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    args = parser.parse_args()
    port = 40000 + os.getpid() % 20000
    # No GEMM here, so no core is chosen; the BLAS is still reported, as by every reference script.
    for line in torch_common.blas_report():
        print(line, flush=True)
    mp.spawn(rank_main, args=(args, port), nprocs=args.world)


if __name__ == "__main__":
    main()
