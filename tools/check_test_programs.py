#!/usr/bin/env python3
"""tools/check_test_programs.py: whether every CTest test with a given label runs a program that a
given build target builds.

tools/gpu_check.sh builds one target on the GPU machine, ringgrad_cuda_test_programs, not `all`
(building everything would spend the machine's minutes on benchmarks and examples it never runs).
A test labelled `cuda` whose program that target does not build shows up there as "Not Run", which
fails the whole run for nothing. CMake writes the target's programs to a file; this script compares
them with the programs of the labelled tests, as `ctest --show-only=json-v1` reports them.

  check_test_programs.py --build DIR --labels '^(cuda|multi-gpu)$' --programs FILE [--exist]

--exist also requires each program to be on disk (gpu_check.sh, after its build). Exits 1 naming
each test whose program is missing, 0 otherwise; 2 on a usage error.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def labelled_tests(ctest, build, labels):
    """(name, program) for every test with a label matching `labels`.

    ctest writes Testing/Temporary/ (LastTest.log, CTestCostData.txt) even for -N, and this runs as a
    test while a ctest is running in `build`: it asks about a copy of the build's CTestTestfile.cmake
    tree instead (the files they include are named by absolute paths, and are only read)."""
    with tempfile.TemporaryDirectory(prefix="check_test_programs-") as mirror:
        for folder, _, files in os.walk(build):
            if "CTestTestfile.cmake" in files:
                target = os.path.join(mirror, os.path.relpath(folder, build))
                os.makedirs(target, exist_ok=True)
                shutil.copy(os.path.join(folder, "CTestTestfile.cmake"), target)
        listing = subprocess.run([ctest, "--test-dir", mirror, "-N", "-L", labels, "--show-only=json-v1"],
                                 check=True, capture_output=True, text=True).stdout
    tests = []
    for test in json.loads(listing).get("tests", []):
        command = test.get("command") or []
        tests.append((test["name"], os.path.realpath(command[0]) if command else "(no command)"))
    return tests


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--build", required=True, help="the CMake build folder")
    parser.add_argument("--labels", required=True, help="a CTest label regular expression")
    parser.add_argument("--programs", required=True, help="a file with one program path per line")
    parser.add_argument("--ctest", default="ctest", help="the ctest to ask")
    parser.add_argument("--exist", action="store_true", help="also require each program to exist on disk")
    args = parser.parse_args()
    try:
        with open(args.programs, encoding="utf-8") as f:
            programs = {os.path.realpath(line.strip()) for line in f if line.strip()}
    except OSError as e:
        print(f"check_test_programs: --programs: cannot read {args.programs}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        tests = labelled_tests(args.ctest, args.build, args.labels)
    except (OSError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        print(f"check_test_programs: ctest -N in {args.build} failed: {e}", file=sys.stderr)
        return 2

    missing = []
    for name, program in tests:
        if program not in programs:
            missing.append(f"{name}: runs {program}, which the target does not build")
        elif args.exist and not os.access(program, os.X_OK):
            missing.append(f"{name}: {program} was not built")
    print(f"check_test_programs: {len(tests)} tests labelled {args.labels}, "
          f"{len({p for _, p in tests})} programs; {len(missing)} not built by the target")
    for line in missing[:40]:
        print("  " + line)
    if len(missing) > 40:
        print(f"  ... and {len(missing) - 40} more")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
