#!/usr/bin/env python3
"""tools/ci_times.py: where CI's time goes -- the slowest compile steps and the slowest tests.

    python3 tools/ci_times.py build DIR [--top 5]    the build's steps from DIR/.ninja_log: how many,
                                                    their summed time, and the slowest ones
    python3 tools/ci_times.py tests FILE [--top 5]   the slowest tests of one run: FILE is CTest's log
                                                    (BUILD/Testing/Temporary/LastTest.log) or the output of
                                                    a Catch2 program run with --durations yes
    python3 tools/ci_times.py costs FILE...          tests/ctest_costs.txt anew from CTest's cost files
                                                    (BUILD/Testing/Temporary/CTestCostData.txt) of past
                                                    runs: each test that took at least 1 s, at its
                                                    longest; CTest starts the costliest first

.ci/run calls both after each stage, so every CI log says, build by build, what to cut next. Nothing
here changes a build; a missing file is reported and is not an error (a stage may build nothing).
"""
import argparse
import os
import re
import sys


def ninja_steps(build_dir):
    """Each step of the build's last run: (seconds, output). A step that makes several outputs is one
    step (ninja logs each output on its own line with the same times and command hash)."""
    path = os.path.join(build_dir, ".ninja_log")
    steps = {}
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 5:
                continue
            start_ms, end_ms, _, output, cmd_hash = fields[:5]
            # ninja rewrites an output's line when it rebuilds it, so the last line per output wins.
            steps[output] = (int(start_ms), int(end_ms), cmd_hash)
    merged = {}
    for output, (start_ms, end_ms, cmd_hash) in steps.items():
        key = (start_ms, end_ms, cmd_hash)
        merged.setdefault(key, output)
    return sorted(((end - start) / 1000.0, output) for (start, end, _), output in merged.items())


def tests_from_ctest(text):
    """(seconds, name) for each test in CTest's LastTest.log."""
    found = []
    name = None
    for line in text.splitlines():
        started = re.match(r"^\d+/\d+ Testing: (.*)$", line)
        if started:
            name = started.group(1)
            continue
        took = re.match(r"^Test time =\s*([0-9.]+) sec", line)
        if took and name is not None:
            found.append((float(took.group(1)), name))
            name = None
    return found


def tests_from_catch(text):
    """(seconds, name) for each test case a Catch2 program printed with --durations yes. Catch prints
    one line per run of a test case (each section and generated value is a run): they are added up."""
    found = {}
    for line in text.splitlines():
        took = re.match(r"^([0-9]+\.[0-9]+) s: (.*)$", line)
        if took:
            found[took.group(2)] = found.get(took.group(2), 0.0) + float(took.group(1))
    return [(seconds, name) for name, seconds in found.items()]


def merged_costs(paths, at_least_s=1.0):
    """CTest's cost files -> {test: seconds}: the longest run of each test that took at_least_s."""
    costs = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as data:
            for line in data:
                line = line.rstrip("\n")
                if line == "---":  # the failed tests' names follow
                    break
                fields = line.rsplit(" ", 2)  # "NAME RUNS SECONDS"; names may hold spaces
                try:
                    name, runs, seconds = fields[0], int(fields[1]), float(fields[2])
                except (IndexError, ValueError):
                    continue
                if runs > 0 and seconds >= at_least_s:
                    costs[name] = max(seconds, costs.get(name, 0.0))
    return costs


def print_slowest(heading, unit, what, rows, top):
    """rows: (seconds, name), sorted by time; prints their count, total and the `top` slowest."""
    total = sum(seconds for seconds, _ in rows)
    print(f"{heading}: {len(rows)} {unit}, {total:.0f} s {what + ' ' if what else ''}(summed over parallel jobs); "
          f"the {min(top, len(rows))} slowest:")
    for seconds, name in reversed(rows[-top:]):
        print(f"  {seconds:8.1f} s  {name}")


def main():
    parser = argparse.ArgumentParser(description="The slowest compile steps and tests of a CI stage.")
    parser.add_argument("what", choices=["build", "tests", "costs"],
                        help="build: a ninja build folder; tests: a test log; costs: CTest cost files")
    parser.add_argument("path", nargs="+", help="the build folder, the test log, or the cost files")
    parser.add_argument("--top", type=int, default=5, help="how many of the slowest to list (default: 5)")
    args = parser.parse_args()

    if args.what == "costs":
        costs = merged_costs(args.path)
        for name, seconds in sorted(costs.items(), key=lambda item: -item[1]):
            print(f"{name} 1 {seconds:.1f}")
        print("---")
        return 0
    if len(args.path) != 1:
        parser.error(f"{args.what} takes one path, got {len(args.path)}")
    args.path = args.path[0]

    if args.what == "build":
        try:
            steps = ninja_steps(args.path)
        except OSError as error:
            print(f"ci_times: no build log in {args.path} ({error.strerror})")
            return 0
        print_slowest(f"build {args.path}", "steps", "of compile and link time", steps, args.top)
        return 0

    try:
        with open(args.path, encoding="utf-8", errors="replace") as log:
            text = log.read()
    except OSError as error:
        print(f"ci_times: no test log {args.path} ({error.strerror})")
        return 0
    found = tests_from_ctest(text) or tests_from_catch(text)
    print_slowest(f"tests {args.path}", "tests", "", sorted(found), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
