#!/usr/bin/env python3
"""tools/split_tests.py: deal Catch2 test cases out to N processes with about equal time each.

    PROGRAM SPEC --list-test-names-only | python3 tools/split_tests.py N COSTS OUT_PREFIX

reads test case names (one a line), and writes OUT_PREFIX0.txt .. OUT_PREFIX{N-1}.txt, each a list for
Catch2's --input-file (the names escaped, so each selects exactly its test case). COSTS is CTest's cost file format (tests/ctest_costs.txt: "NAME RUNS SECONDS");
a name it does not list counts as 0.1 s. The longest go first, each to the list with the least time
so far, so a few slow multi-process tests do not all land in one process while the others idle.
Every name lands in exactly one list. tools/tsan.sh uses it.
"""
import sys


def catch_spec(name):
    """A test name as a Catch2 test spec that selects it alone: a comma would end the spec, and
    brackets, '*', '~' and quotes mean tags, wildcards, negation and quoting; '\\' makes each literal."""
    return "".join("\\" + c if c in '\\,[]*~"' else c for c in name)


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    count, costs_path, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    costs = {}
    with open(costs_path, encoding="utf-8") as data:
        for line in data:
            fields = line.rstrip("\n").rsplit(" ", 2)
            if len(fields) == 3:
                try:
                    costs[fields[0]] = float(fields[2])
                except ValueError:
                    pass
    names = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    lists = [[] for _ in range(count)]
    totals = [0.0] * count
    for name in sorted(names, key=lambda n: -costs.get(n, 0.1)):
        emptiest = totals.index(min(totals))
        lists[emptiest].append(name)
        totals[emptiest] += costs.get(name, 0.1)
    for i, names_here in enumerate(lists):
        with open(f"{prefix}{i}.txt", "w", encoding="utf-8") as out:
            out.write("".join(catch_spec(n) + "\n" for n in names_here))
    print(f"split_tests: {len(names)} test cases in {count} lists of about "
          + ", ".join(f"{t:.0f}" for t in totals) + " s (from earlier runs' costs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
