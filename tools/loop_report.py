#!/usr/bin/env python3
"""tools/loop_report.py: which stride loops of the CUDA kernels the tests ran for more than one trip.

A grid-stride loop (`for (i = global_thread(); i < n; RG_STEP(i, grid_threads()))`) runs once per
thread whenever the grid covers the work, which is what most test sizes give on an H200-sized grid;
a barrier or a reset that matters only between two trips is then never tested. The kernel emulator's
small device (RINGGRAD_EMU_SMALL_DEVICE=1: one SM, grids at most 3 blocks high) makes grids small,
and with RINGGRAD_EMU_LOOP_REPORT=FILE it appends to FILE, per kernel and RG_STEP loop, in how many
launches the loop ran and in how many some thread made a second trip in one pass
(tests/cuda_emu/src/loop_trips.h). This script prints that as a table, and checks it against the
sources: every RG_STEP of --sources must have made a second trip.

  loop_report.py --sources kernels/cuda --report FILE
  loop_report.py --sources kernels/cuda --run PROGRAM [ARGUMENT...]

--run runs PROGRAM (a test program built on the emulator) on the small device with a fresh report,
then reads it. Exits 1 naming every loop that never ran, or never made a second trip; 2 on a usage
error or when the program fails.
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

STEP = re.compile(r"\bRG_STEP\(")


def loops_in(sources):
    """{(file name, line)} of every RG_STEP use in the .cu and .cuh files of `sources`."""
    sites = set()
    for path in sorted(glob.glob(os.path.join(sources, "*.cu")) + glob.glob(os.path.join(sources, "*.cuh"))):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                code = line.split("//", 1)[0]
                if STEP.search(code) and "#define" not in code:
                    sites.add((os.path.basename(path), number))
    return sites


def read_report(path):
    """{(file name, line): {kernel: [launches, launches with a second trip]}} summed over the report's lines."""
    counts = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            where, _, line_number = fields[0].rpartition(":")
            if len(fields) != 4 or not line_number.isdigit():
                sys.exit(f"loop_report.py: {path}:{number}: expected file:line, kernel, launches and repeats, "
                         f"got {line.rstrip()!r}")
            count = counts[(os.path.basename(where), int(line_number))][fields[1]]
            count[0] += int(fields[2])
            count[1] += int(fields[3])
    return counts


def run_program(command, report):
    env = dict(os.environ, RINGGRAD_EMU_SMALL_DEVICE="1", RINGGRAD_EMU_LOOP_REPORT=report)
    print("loop_report.py: running on the small device: " + " ".join(command), flush=True)
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout[-4000:])
        print(f"loop_report.py: the program failed (exit {result.returncode}); no report", file=sys.stderr)
        sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", required=True, help="the folder of the kernels' .cu files (kernels/cuda)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--report", help="a report the emulator wrote (RINGGRAD_EMU_LOOP_REPORT)")
    what.add_argument("--run", nargs=argparse.REMAINDER, help="a program to run on the small device, and its arguments")
    args = parser.parse_args()
    if args.run is not None and not args.run:
        parser.error("--run needs a program")
    sites = loops_in(args.sources)
    if not sites:
        parser.error(f"--sources {args.sources}: no RG_STEP loop in its .cu or .cuh files")

    if args.run is not None:
        with tempfile.TemporaryDirectory(prefix="loop_report-") as folder:
            report = os.path.join(folder, "loops.tsv")
            run_program(args.run, report)
            counts = read_report(report) if os.path.exists(report) else {}
    else:
        counts = read_report(args.report)

    print(f"{'loop':<22} {'launches':>9} {'2+ trips':>9}  kernels")
    for site in sorted(set(counts) | sites):
        kernels = counts.get(site, {})
        launches = sum(c[0] for c in kernels.values())
        repeated = sum(c[1] for c in kernels.values())
        names = ", ".join(sorted(kernels)) or "-"
        print(f"{site[0] + ':' + str(site[1]):<22} {launches:>9} {repeated:>9}  {names}")

    never_ran = sorted(s for s in sites if s not in counts)
    once = sorted(s for s in sites if s in counts and not any(c[1] for c in counts[s].values()))
    print(f"\n{len(sites) - len(never_ran) - len(once)} of {len(sites)} stride loops in {args.sources} made a "
          "second trip in some launch")
    for file, line in never_ran:
        print(f"  {file}:{line}: never ran: no test launches its kernel")
    for file, line in once:
        print(f"  {file}:{line}: never made a second trip: give a test more work than a small device's grid covers")
    return 1 if never_ran or once else 0


if __name__ == "__main__":
    sys.exit(main())
