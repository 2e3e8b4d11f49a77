#!/usr/bin/python3
"""Runs the CPU benchmarks that compare ringgrad with PyTorch --runs times and judges every goal.

    /usr/bin/python3 bench/cpu_vs_pytorch.py --build build [--runs 3] [--out build/cpu_vs_pytorch]

One run is: bench_mlp_step, bench_gemm_cpu (at 1 thread and at 2), bench_elementwise (at 2 threads
and at 1), bench_dispatch, bench_ddp_step and bench_allreduce --transport shm, one after the other, so
no two share the cores. The header names the CPU, and each benchmark's kernels as it chose them. Each writes its
table to OUT/<name>-<run>.txt and its JSON beside it. Then every goal's ratio is printed as the median
over the runs with the spread (min-max), and whether the median meets it. The PyTorch reference
scripts pick OpenBLAS's fastest correct core themselves (bench/torch_common.py); the core of each run
is printed here too, so a ratio is never read against a fallback peer.

Exits 0 when every benchmark ran (goals met or not), 1 when one failed or reported wrong results.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name, program, arguments (the JSON path is appended)
BENCHES = [
    ("mlp_step", "bench_mlp_step", []),
    ("gemm_t1", "bench_gemm_cpu", ["--threads", "1"]),
    ("gemm_t2", "bench_gemm_cpu", ["--threads", "2"]),
    ("elementwise_t2", "bench_elementwise", ["--threads", "2"]),
    ("elementwise_t1", "bench_elementwise", ["--threads", "1"]),
    ("dispatch", "bench_dispatch", []),
    ("ddp_step", "bench_ddp_step", []),
    ("allreduce_shm", "bench_allreduce", ["--transport", "shm"]),
]


def write_file(path, text):
    """Writes text to path through a temp file and a rename, and only over a regular file."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise SystemExit("cpu_vs_pytorch: %s exists and is not a regular file; not replacing it" % path)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def rows(result, table=None):
    return [r for r in result.get("rows", []) if table is None or r.get("table") == table]


def goals_mlp(result):
    out = []
    for r in rows(result, "mlp_step"):
        if r.get("framework") == "ringgrad" and isinstance(r.get("ratio"), (int, float)):
            out.append(("mlp step, %d thread(s): ringgrad / pytorch time" % r["threads"], r["ratio"], "<=", 0.90))
    return out


# The products of the MLP step's forward and backward (bench_gemm_cpu's default shapes): the step
# can only beat PyTorch's if its GEMMs keep up with OpenBLAS's.
MLP_GEMM_SHAPES = ("256x1024x784:NT", "256x1024x1024:NT", "256x1024x1024:NN", "256x784x1024:NN",
                   "1024x784x256:TN", "1024x1024x256:TN")


def goals_gemm(threads):
    def goals(result):
        ratios = [r["ratio"] for r in rows(result, "gemm")
                  if r.get("shape") in MLP_GEMM_SHAPES and isinstance(r.get("ratio"), (int, float))]
        if not ratios:
            return []
        return [("gemm at the MLP's shapes, worst, %d thread(s): ringgrad / torch.mm GFLOP/s" % threads,
                 min(ratios), ">=", 1.0)]
    return goals


def goals_dispatch(result):
    out = []
    for r in rows(result, "dispatch"):
        if r.get("op") == "add 1-elem" and r.get("grad") == "no" and isinstance(r.get("ratio"), (int, float)):
            out.append(("add of 1 element: ringgrad / pytorch time", r["ratio"], "<=", 0.25))
    return out


def goals_elementwise(threads):
    def goals(result):
        out = []
        for r in rows(result):
            ratio = r.get("ratio")
            if not isinstance(ratio, (int, float)) or not isinstance(r.get("elements"), (int, float)):
                continue
            if r["elements"] >= 1000000:  # xent has n/10 rows of 10: 1048570 elements at "1M"
                out.append(("%s, %s elements, %d thread(s): ringgrad / pytorch GB/s" % (
                    r["op"], human(r["elements"]), threads), ratio, ">=", 1.0))
        return out
    return goals


def goals_ddp(result):
    step = {r["mode"]: r["step"] for r in rows(result, "ddp_step") if isinstance(r.get("step"), (int, float))}
    out = []
    # "ddp" runs DDP's defaults (gradient_as_bucket_view on); its "ddp-copy" row, with the view off,
    # is there to show what the view saves, and is no goal.
    if "ddp" in step and "ddp-no_sync" in step:
        out.append(("ddp / ddp-no_sync step", step["ddp"] / step["ddp-no_sync"], "<=", 1.10))
    if "ddp" in step and "torch-ddp" in step:
        out.append(("ddp / torch-ddp step", step["ddp"] / step["torch-ddp"], "<=", 0.5))
    return out


def goals_allreduce(result):
    out = []
    shm = {r["size"]: r for r in rows(result, "ring-shm")}  # its "memcpy" column: one thread's memcpy, same run
    for size, r in sorted(shm.items()):
        if (1 << 20) <= size <= (256 << 20) and all(isinstance(r.get(k), (int, float)) for k in ("busbw", "memcpy")):
            out.append(("ring-shm busbw / memcpy GB/s, %s B" % human(size), r["busbw"] / r["memcpy"], ">=", 0.8))
    small = [r for size, r in shm.items() if 4 <= size <= 4096]
    if small:  # <= 10 us a call in the median, and no single call over 100 us: the worst of each
        for key, what, target in (("median", "median", 10.0), ("max", "slowest call", 100.0)):
            if all(isinstance(r.get(key), (int, float)) for r in small):
                out.append(("ring-shm 4 B-4 KB, worst %s latency (us)" % what, max(r[key] for r in small), "<=", target))
    return out


JUDGES = {"mlp_step": goals_mlp, "gemm_t1": goals_gemm(1), "gemm_t2": goals_gemm(2), "elementwise_t2": goals_elementwise(2), "elementwise_t1": goals_elementwise(1),
          "dispatch": goals_dispatch, "ddp_step": goals_ddp, "allreduce_shm": goals_allreduce}


def human(n):
    n = int(n)
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def blas_lines(text):
    return [line for line in text.splitlines() if line.startswith("# pytorch blas_core") or "WARNING" in line]


def cpu_model():
    """The processor's model as lscpu names it (/proc/cpuinfo's "model name")."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="the build folder holding bench/ (default: build)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of the whole set (default: 3)")
    parser.add_argument("--out", default=None, help="folder for tables and JSON (default: BUILD/cpu_vs_pytorch)")
    parser.add_argument("--only", default="", help="comma-separated names to run, of: " +
                        ",".join(b[0] for b in BENCHES) + " (default: all)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to the benchmarks that have it")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1, got %d" % args.runs)
    only = set(filter(None, args.only.split(",")))
    unknown = only - {b[0] for b in BENCHES}
    if unknown:
        parser.error("--only: unknown name(s) %s" % ",".join(sorted(unknown)))
    out_dir = args.out or os.path.join(args.build, "cpu_vs_pytorch")
    os.makedirs(out_dir, exist_ok=True)

    print("# cpu: %s, %d logical CPUs" % (cpu_model(), os.cpu_count() or 0), flush=True)
    measured = {}  # goal name -> (op, target, [values])
    failed = []
    kernel_lines = set()  # each benchmark's "# cpu:" line names the kernels it chose; printed once
    for run in range(1, args.runs + 1):
        for name, program, extra in BENCHES:
            if only and name not in only:
                continue
            exe = os.path.join(args.build, "bench", program)
            if not os.path.exists(exe):
                print("# %s: %s not built, skipped" % (name, exe), flush=True)
                continue
            quick = ["--quick"] if args.quick and program in ("bench_mlp_step", "bench_dispatch",
                                                              "bench_elementwise") else []
            if args.quick and program == "bench_gemm_cpu":
                quick = ["--reps", "3"]
            json_path = os.path.join(out_dir, "%s-%d.json" % (name, run))
            start = time.time()
            proc = subprocess.run([exe] + extra + quick + ["--json", json_path], capture_output=True, text=True)
            write_file(os.path.join(out_dir, "%s-%d.txt" % (name, run)), proc.stdout + proc.stderr)
            print("run %d/%d  %-15s %5.1f s  exit %d" % (run, args.runs, name, time.time() - start, proc.returncode),
                  flush=True)
            for line in blas_lines(proc.stdout):
                print("    " + line)
            for line in proc.stdout.splitlines():
                if line.startswith("# cpu: ") and line not in kernel_lines:
                    kernel_lines.add(line)
                    print("    " + line)
            if proc.returncode != 0 or not os.path.exists(json_path):
                failed.append("%s (run %d, exit %d)" % (name, run, proc.returncode))
                continue
            with open(json_path) as f:
                result = json.load(f)
            for goal, value, op, target in JUDGES[name](result):
                measured.setdefault(goal, (op, target, []))[2].append(value)

    print("\n# goal                                                          median   spread (min-max)   goal    met")
    summary = []
    for goal, (op, target, values) in measured.items():
        med = statistics.median(values)
        met = med <= target if op == "<=" else med >= target
        print("  %-60s %8.3f   %7.3f-%-7.3f   %s %-5g %s" % (goal, med, min(values), max(values), op, target,
                                                             "yes" if met else "NO"))
        summary.append({"goal": goal, "median": med, "min": min(values), "max": max(values), "runs": len(values),
                        "op": op, "target": target, "met": met})
    write_file(os.path.join(out_dir, "summary.json"),
               json.dumps({"runs": args.runs, "goals": summary, "failed": failed}, indent=1))
    if failed:
        print("# failed: " + ", ".join(failed))
    print("# tables and JSON in " + out_dir)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
