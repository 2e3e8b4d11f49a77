#!/usr/bin/env python3
"""bench_gemm_cpu end to end, without PyTorch: the table and its JSON hold one row per shape with a
positive GFLOP/s, the header names the CPU and the kernels chosen, and bad input is refused with a
message naming the flag or variable.

    python3 test_bench_gemm_cpu.py BENCH_GEMM_CPU OUT_DIR
"""
import json
import os
import subprocess
import sys


def run(args, env=None):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


def main():
    bench, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "gemm.json")
    shapes = ["13x17x19:TN", "40x33x500:NT"]
    r = run([bench, "--no-torch", "--reps", "1", "--shapes", ",".join(shapes), "--json", path])
    assert r.returncode == 0, r.stderr
    assert "# cpu: " in r.stdout and "ringgrad's CPU kernels: " in r.stdout, r.stdout
    assert "# ringgrad cpu gemm: " in r.stdout, r.stdout
    with open(path) as f:
        result = json.load(f)
    rows = result["rows"]
    assert [row["shape"] for row in rows] == shapes, rows
    for row in rows:
        assert row["ringgrad"] > 0, row
        assert row["pytorch"] is None, row  # --no-torch
    assert result["run"]["cpu"], result["run"]

    bad = run([bench, "--no-torch", "--shapes", "13x17:NN"])
    assert bad.returncode == 2 and "--shapes" in bad.stderr, (bad.returncode, bad.stderr)
    bad = run([bench, "--no-torch", "--shapes", "13x17x19:NX"])
    assert bad.returncode == 2 and "--shapes" in bad.stderr, (bad.returncode, bad.stderr)

    env = dict(os.environ, RINGGRAD_CPU_ISA="avx1024")
    bad = run([bench, "--no-torch", "--reps", "1", "--shapes", "8x8x8:NN"], env)
    assert bad.returncode == 1 and "RINGGRAD_CPU_ISA" in bad.stderr and "avx1024" in bad.stderr, bad.stderr
    print("bench_gemm_cpu: table, JSON and refusals as expected")


if __name__ == "__main__":
    main()
