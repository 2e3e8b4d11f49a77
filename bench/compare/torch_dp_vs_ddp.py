"""PyTorch on dp_vs_ddp's model and step, so bench/dp_vs_ddp can print PyTorch rows in its table.

    /usr/bin/python3 bench/compare/torch_dp_vs_ddp.py --layers 784,1024,1024,10 --global-batch 256 \
        --devices 2 --steps 30 --warmup 5 --lr 0.01 --caps 25 [--device cpu|cuda] [--threads-per-device 1]
    /usr/bin/python3 bench/compare/torch_dp_vs_ddp.py --model gpt --gpt 4,256,4,64 --global-batch 16 ...

Run it with Debian's interpreter (/usr/bin/python3, package python3-torch).

The model (--model) is an MLP of Linear layers with a ReLU after every layer but the last, or the GPT
of examples/gpt (--gpt LAYERS,WIDTH,HEADS,CONTEXT; the model of examples/gpt/torch_gpt.py, with
PyTorch's default initialisation: this script measures time, not loss). The loss is cross-entropy
(per token for the GPT) and the optimizer SGD(lr, momentum 0.9). One step is

    opt.zero_grad(set_to_none=True); loss = cross_entropy(model(x), y); loss.backward(); opt.step(); loss.item()

The data are synthetic and made once, before any timing: 4 global batches of randn inputs with labels
(i * 7) % classes (i = row), or of random byte tokens and their next tokens for the GPT, used in turn. The global batch is the same in every mode, so the modes
divide the same work differently. Modes:

    torch-single  one process, torch.set_num_threads(threads-per-device), the whole global batch.
    torch-ddp     torch.nn.parallel.DistributedDataParallel: --devices processes (torch.multiprocessing
                  spawn), gloo on the CPU or nccl with one GPU per process; rank r trains on rows
                  r*b .. (r+1)*b-1 of the global batch (b = global / devices). One row per value of
                  --caps (DDP's bucket_cap_mb). A step's time is the slowest rank's time for that step.
    torch-dp      torch.nn.DataParallel over --devices GPUs; only with --device cuda and enough GPUs
                  (on the CPU DataParallel just calls the module, which would measure nothing new).

Output (stdout): one JSON object per measured mode and line, for example
    {"mode": "torch-ddp", "devices": 2, "bucket_cap_mb": 25, "step_ms": [10.1, ...], "torch": "1.13.1", "blas": "..."}
with every timed step's milliseconds (warmup steps are not timed; dp_vs_ddp computes the medians
itself, so both sides use the same statistics). bucket_cap_mb is null except for torch-ddp. Every other
stdout line begins with '#'. Exits 0 on success, 3 when torch cannot be imported, 2 on bad arguments.
"""
import argparse
import gc
import json
import os
import socket
import sys
import time

# torch_common.py sits one folder up, in bench/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import torch_common  # noqa: E402

torch_common.use_best_blas_core()  # before torch loads OpenBLAS; a spawned rank reuses the choice

# The caller (dp_vs_ddp) needs a clear answer when torch is missing, not a traceback: main() reports
# the error and exits 3.
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    TORCH_ERROR = None
except Exception as e:  # ImportError, or a broken install raising something else
    TORCH_ERROR = e

BATCHES = 4       # pre-made global batches, used in turn
MOMENTUM = 0.9
GPT_VOCAB = 256   # bytes, as examples/gpt


# ---------------------------------------------------------------------------------------------
# Model, data and one training step: shared by every mode.
# ---------------------------------------------------------------------------------------------

def build_model(args):
    """The model --model names: the GPT of examples/gpt, or an MLP (below)."""
    if args.model == "gpt":
        # examples/gpt/torch_gpt.py builds the same GPT for its checkpoint test: one definition.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                        "examples", "gpt"))
        import torch_gpt
        layers, width, heads, context = args.gpt
        return torch_gpt.build_model(torch, layers, width, heads, context, GPT_VOCAB)
    return build_mlp(args.layers)


def build_mlp(layers):
    """Linear layers of the given widths, a ReLU after each but the last (the logits)."""
    modules = []
    for n, (fan_in, fan_out) in enumerate(zip(layers, layers[1:])):
        modules.append(torch.nn.Linear(fan_in, fan_out))
        if n + 2 < len(layers):
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def make_global_batches(args):
    """BATCHES (inputs, labels) pairs on the CPU; every mode and rank makes the same ones (same seed)."""
    g = torch.Generator().manual_seed(1234)
    global_batch = args.global_batch
    if args.model == "gpt":
        context = args.gpt[3]
        streams = [torch.randint(0, GPT_VOCAB, (global_batch, context + 1), generator=g) for _ in range(BATCHES)]
        return [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in streams]
    layers = args.layers
    classes = layers[-1]
    labels = torch.tensor([(i * 7) % classes for i in range(global_batch)], dtype=torch.int64)
    return [(torch.randn(global_batch, layers[0], generator=g), labels.clone()) for _ in range(BATCHES)]


def time_steps(step, batches, warmup, steps, cuda):
    """Runs warmup + steps training steps over the batches in turn; returns the timed ones in ms.

    On a GPU the work is queued asynchronously, so the clock is read only after
    torch.cuda.synchronize(): otherwise a step would look as fast as its kernel launches.
    """
    def now():
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    for s in range(warmup):  # not timed: first-touch allocations, thread pools, gloo connections
        step(*batches[s % len(batches)])
    times = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection in the middle of a step is noise, not the step's cost (as timeit does)
    try:
        for s in range(steps):
            x, y = batches[(warmup + s) % len(batches)]
            start = now()
            step(x, y)
            times.append((now() - start) * 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def make_step(model, lr):
    """The training step every mode times: zero_grad, forward, loss, backward, SGD step, item()."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        logits = model(x)  # [B, classes], or the GPT's [B, T, vocab] against [B, T] next tokens
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()  # a real training loop reads the loss; on a GPU this also waits for the step

    return step


def emit(mode, devices, bucket_cap_mb, times):
    """Prints one result line of the output protocol."""
    row = {"mode": mode, "devices": devices, "bucket_cap_mb": bucket_cap_mb,
           "step_ms": [float("%.6g" % t) for t in times],
           "torch": torch.__version__, "blas": torch_common.blas_libraries()}
    print(json.dumps(row), flush=True)


# ---------------------------------------------------------------------------------------------
# The three modes.
# ---------------------------------------------------------------------------------------------

def run_single(args):
    """torch-single: one process (one GPU, or threads-per-device CPU threads), the whole batch."""
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    torch.manual_seed(0)
    model = build_model(args).to(device)
    batches = [(x.to(device), y.to(device)) for x, y in make_global_batches(args)]
    times = time_steps(make_step(model, args.lr), batches, args.warmup, args.steps, args.device == "cuda")
    emit("torch-single", 1, None, times)


def run_dp(args):
    """torch-dp: one process drives --devices GPUs with torch.nn.DataParallel."""
    torch.manual_seed(0)
    model = torch.nn.DataParallel(build_model(args).to("cuda:0"), device_ids=list(range(args.devices)))
    # DataParallel scatters the batch from cuda:0 itself, so the inputs live there.
    batches = [(x.to("cuda:0"), y.to("cuda:0")) for x, y in make_global_batches(args)]
    times = time_steps(make_step(model, args.lr), batches, args.warmup, args.steps, True)
    emit("torch-dp", args.devices, None, times)


def ddp_rank_main(rank, args, port):
    """torch-ddp, one rank: one process per device, gradients averaged by DDP's bucketed all-reduce."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads_per_device)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=args.devices)

    # Rank r trains on rows r*b .. (r+1)*b-1 of each global batch: its contiguous slice, as in dp_vs_ddp.
    b = args.global_batch // args.devices
    batches = [(x[rank * b:(rank + 1) * b].to(device), y[rank * b:(rank + 1) * b].to(device))
               for x, y in make_global_batches(args)]

    for cap in args.caps:
        torch.manual_seed(0)  # the same start for every cap (DDP broadcasts rank 0's weights anyway)
        model = build_model(args).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[rank] if cuda else None, bucket_cap_mb=cap)
        dist.barrier()  # all ranks start timing together
        times = time_steps(make_step(ddp, args.lr), batches, args.warmup, args.steps, cuda)
        # A DDP step ends when the slowest rank ends: take each step's maximum over the ranks.
        t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            emit("torch-ddp", args.devices, cap, t.tolist())
        del ddp, model
    dist.destroy_process_group()


def free_port():
    """A TCP port nobody listens on now, for the rendezvous of the DDP ranks."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(args):
    mp.spawn(ddp_rank_main, args=(args, free_port()), nprocs=args.devices)


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------

def parse_args():
    def int_list(text):
        return [int(v) for v in text.split(",") if v]

    def float_list(text):
        # 25 stays an int in the JSON output (25, not 25.0), as dp_vs_ddp writes it.
        return [int(float(v)) if float(v).is_integer() else float(v) for v in text.split(",") if v]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    parser.add_argument("--layers", type=int_list, default=[784, 1024, 1024, 10], help="layer widths, e.g. 784,1024,1024,10")
    parser.add_argument("--gpt", type=int_list, default=[4, 256, 4, 64], help="with --model gpt: LAYERS,WIDTH,HEADS,CONTEXT")
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--devices", type=int, default=2, help="DDP processes / DataParallel GPUs")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--caps", type=float_list, default=[25], help="DDP bucket_cap_mb values, e.g. 1,5,25")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads-per-device", type=int, default=1, help="torch.set_num_threads per process")
    args = parser.parse_args()
    if len(args.layers) < 2:
        parser.error("--layers needs at least two widths")
    if len(args.gpt) != 4 or min(args.gpt) < 1 or args.gpt[1] % args.gpt[2] != 0:
        parser.error("--gpt expects LAYERS,WIDTH,HEADS,CONTEXT, positive, HEADS dividing WIDTH")
    if args.devices < 1 or args.global_batch % args.devices != 0:
        parser.error("--global-batch %d must split evenly over --devices %d" % (args.global_batch, args.devices))
    if args.steps < 1 or args.warmup < 0 or args.threads_per_device < 1:
        parser.error("--steps and --threads-per-device must be >= 1, --warmup >= 0")
    return args


def main():
    args = parse_args()
    if TORCH_ERROR is not None:
        print("# error: cannot import torch with %s: %s" % (sys.executable, str(TORCH_ERROR).splitlines()[0]), flush=True)
        return 3
    if args.device == "cuda" and torch.cuda.device_count() < args.devices:
        print("# error: --device cuda --devices %d, but torch sees %d GPU(s)" % (args.devices, torch.cuda.device_count()))
        return 2

    model = "gpt=" + ",".join(map(str, args.gpt)) if args.model == "gpt" else "layers=" + ",".join(map(str, args.layers))
    print("# torch %s  python %s  device=%s  devices=%d  threads-per-device=%d  %s  global-batch=%d"
          % (torch.__version__, sys.executable, args.device, args.devices, args.threads_per_device,
             model, args.global_batch), flush=True)
    for line in torch_common.blas_report():  # which BLAS core PyTorch's GEMMs ran on, and why
        print("# " + line, flush=True)
    torch.set_num_threads(args.threads_per_device)
    run_single(args)
    run_ddp(args)
    if args.device != "cuda":
        print("# torch-dp: skipped, on the CPU torch.nn.DataParallel just calls the module (no replicas)", flush=True)
    elif args.devices < 2:
        print("# torch-dp: skipped, DataParallel needs --devices >= 2", flush=True)
    else:
        run_dp(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
