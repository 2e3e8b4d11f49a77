#!/usr/bin/env python3
"""tools/ptxas_report.py: ptxas's resource report for every kernel in kernels/cuda/*.cu, as a markdown table.

    python3 tools/ptxas_report.py [--nvcc /usr/local/cuda/bin/nvcc] [--arch 90] > table.md

Compiles each .cu file for sm_<arch> with -Xptxas -v (no GPU needed) and lists, per kernel, the
registers per thread, the bytes spilled to local memory (stores / loads) and the static shared
memory per block. A kernel that spills inside a hot loop, or whose registers limit how many blocks
fit on an SM, shows here first; docs/kernels.md keeps the table.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_report(nvcc, arch, source, out_dir):
    cmd = [nvcc, f"-I{ROOT}", "-O3", "-DNDEBUG", "-std=c++17", f"--generate-code=arch=compute_{arch},code=[sm_{arch}]",
           "-Xptxas", "-v", "-x", "cu", "-c", source, "-o", os.path.join(out_dir, os.path.basename(source) + ".o")]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"ptxas_report: {' '.join(cmd)} failed:\n{run.stderr}")
    return run.stderr


def parse(text):
    kernels, current = [], None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_\d+'", line)
        if m:
            current = {"mangled": m.group(1), "regs": 0, "spill_st": 0, "spill_ld": 0, "smem": 0}
            kernels.append(current)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current["spill_st"], current["spill_ld"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            current["smem"] = int(m.group(1))
    return kernels


def short_name(demangled):
    name = demangled.replace("ringgrad::kernels::cuda::", "").replace("ringgrad::kernels::", "")
    name = name.replace("ringgrad::cuda::", "").replace("(anonymous namespace)::", "")
    name = name.replace("ringgrad::", "").replace("__nv_bfloat16", "bf16").replace("__half", "f16")
    name = name.replace("void ", "", 1)
    return re.sub(r"\(.*\)$", "", name)  # drop the parameter list


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    parser.add_argument("--arch", default="90")
    args = parser.parse_args()
    nvcc_version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"ptxas report, {nvcc_version}, sm_{args.arch} (`python3 tools/ptxas_report.py`):\n")
    print("| file | kernel | registers | spill stores / loads (B) | static shared (B) |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as out_dir:
        for source in sorted(glob.glob(os.path.join(ROOT, "kernels", "cuda", "*.cu"))):
            kernels = parse(compile_report(args.nvcc, args.arch, source, out_dir))
            demangled = subprocess.run(["c++filt"], input="\n".join(k["mangled"] for k in kernels),
                                       capture_output=True, text=True).stdout.splitlines()
            rows = sorted(zip(demangled, kernels), key=lambda p: short_name(p[0]))
            for name, k in rows:
                spill = f"**{k['spill_st']} / {k['spill_ld']}**" if k["spill_st"] or k["spill_ld"] else "0 / 0"
                print(f"| {os.path.basename(source)} | `{short_name(name)}` | {k['regs']} | {spill} | {k['smem']} |")


if __name__ == "__main__":
    main()
