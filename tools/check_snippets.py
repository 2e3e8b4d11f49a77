#!/usr/bin/env python3
"""tools/check_snippets.py: keep the code in the docs equal to code the build compiles.

A snippet in markdown is a fenced code block directly preceded by a marker line:

    <!-- snippet: docs/snippets/one_step.cpp#step -->
    ```cpp
    ...
    ```

The source file holds the region between two comment lines:

    // [step]
    ...
    // [/step]

and the fenced block must equal those lines with their common indentation removed. The path is
relative to the repository root; "#REGION" may be left out to mean the whole file.

A table may be tied to snippet files as well, one file per column:

    <!-- snippet-table: docs/snippets/a.cpp docs/snippets/b.cpp -->
    | A | B |
    |---|---|
    | `x = 1;` | `y = 2;` |

Every `code span` in column i must then appear in file i (spaces collapsed), so a renamed function
cannot survive in a table either.

A C++ block (```cpp, ```c++ or ```cxx) without a marker is an error too: every piece of C++ in the
docs must be a copy of compiled code. Shell, CMake, text and unlabelled blocks need no marker.

Usage:
    python3 tools/check_snippets.py          check docs/*.md and README.md; exit 1 on any difference
                                             or unmarked C++ block
    python3 tools/check_snippets.py --fix    rewrite the markdown copies from their sources
    python3 tools/check_snippets.py --root DIR [FILE.md ...]

Standard library only, so it runs with any python3.
"""

import argparse
import difflib
import glob
import os
import re
import sys

MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(\S+?)\s*-->\s*$")
TABLE_MARKER = re.compile(r"^\s*<!--\s*snippet-table:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
REGION_OPEN = re.compile(r"^\s*//\s*\[([A-Za-z0-9_.-]+)\]\s*$")
REGION_CLOSE = re.compile(r"^\s*//\s*\[/([A-Za-z0-9_.-]+)\]\s*$")
CODE_SPAN = re.compile(r"`([^`]+)`")
CPP_LANGUAGES = {"cpp", "c++", "cxx"}  # a fenced block's info string, first word, any case


class Problem(Exception):
    pass


def dedent(lines):
    """Removes the indentation common to all non-blank lines; blank lines become empty."""
    widths = [len(l) - len(l.lstrip(" \t")) for l in lines if l.strip()]
    cut = min(widths) if widths else 0
    return [l[cut:] if l.strip() else "" for l in lines]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def region_of(root, ref):
    """The dedented lines of `file#region` (the whole file without a region), or raises Problem."""
    path, _, region = ref.partition("#")
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        raise Problem("source file %s does not exist" % path)
    lines = read_lines(full)
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if not region:
        return dedent(lines)
    start = end = None
    for i, line in enumerate(lines):
        m = REGION_OPEN.match(line)
        if m and m.group(1) == region:
            if start is not None:
                raise Problem("region [%s] opens twice in %s (lines %d and %d)" % (region, path, start, i + 1))
            start = i + 1
        m = REGION_CLOSE.match(line)
        if m and m.group(1) == region and start is not None and end is None:
            end = i
    if start is None:
        raise Problem("region [%s] not found in %s (expected a line '// [%s]')" % (region, path, region))
    if end is None:
        raise Problem("region [%s] in %s is never closed (expected a line '// [/%s]')" % (region, path, region))
    # Nested markers of other regions are not part of the copy.
    body = [l for l in lines[start:end] if not (REGION_OPEN.match(l) or REGION_CLOSE.match(l))]
    return dedent(body)


def find_fence(lines, i):
    """For a marker at line i: (open, close) indices of the fenced block that follows, or raises."""
    j = i + 1
    if j >= len(lines) or not FENCE.match(lines[j]):
        raise Problem("the marker is not followed by a fenced code block on the next line")
    m = FENCE.match(lines[j])
    fence = m.group(2)
    for k in range(j + 1, len(lines)):
        if lines[k].strip().startswith(fence[0] * len(fence)) and lines[k].strip().strip(fence[0]) == "":
            return j, k
    raise Problem("the fenced code block after the marker is never closed")


def unmarked_cpp_blocks(lines):
    """Line indices of the opening fences of C++ blocks that no snippet marker precedes."""
    found = []
    fence = None  # the opening fence of the block we are in, or None outside blocks
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(2)
                words = m.group(3).split()
                if words and words[0].lower() in CPP_LANGUAGES and not (i > 0 and MARKER.match(lines[i - 1])):
                    found.append(i)
        elif m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3).strip():
            fence = None
    return found


def collapse(s):
    return " ".join(s.split())


def check_table(root, lines, i, refs):
    """Checks the table after a snippet-table marker at line i; returns a list of messages."""
    sources = []
    for ref in refs:
        full = os.path.join(root, ref)
        if not os.path.isfile(full):
            raise Problem("source file %s does not exist" % ref)
        sources.append(collapse("\n".join(read_lines(full))))
    problems = []
    j = i + 1
    while j < len(lines) and lines[j].lstrip().startswith("|"):
        cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
        if not all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            for col, cell in enumerate(cells[: len(sources)]):
                for span in CODE_SPAN.findall(cell):
                    if collapse(span) not in sources[col]:
                        problems.append((j + 1, "`%s` (column %d) does not appear in %s" % (span, col + 1, refs[col])))
        j += 1
    if j == i + 1:
        raise Problem("the snippet-table marker is not followed by a table")
    return problems


def process(root, md_path, fix):
    """Checks (or fixes) one markdown file; returns (problems, snippets_seen, new_text or None)."""
    rel = os.path.relpath(md_path, root)
    lines = read_lines(md_path)
    problems = []
    seen = 0
    out = list(lines)
    offset = 0  # lines added (or removed) in `out` by fixes so far
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        t = TABLE_MARKER.match(line)
        if not m and not t:
            continue
        seen += 1
        ref = (m or t).group(1)
        try:
            if t:
                for lineno, msg in check_table(root, lines, i, ref.split()):
                    problems.append("%s:%d: table %s: %s" % (rel, lineno, ref, msg))
                continue
            want = region_of(root, ref)
            open_i, close_i = find_fence(lines, i)
        except Problem as e:
            problems.append("%s:%d: snippet %s: %s" % (rel, i + 1, ref, e))
            continue
        indent = FENCE.match(lines[open_i]).group(1)
        have = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[open_i + 1 : close_i]]
        if have == want:
            continue
        if fix:
            new = [indent + l if l else "" for l in want]
            out[open_i + 1 + offset : close_i + offset] = new
            offset += len(new) - (close_i - open_i - 1)
            continue
        diff = difflib.unified_diff(want, have, "source: " + ref, "copy: %s:%d" % (rel, open_i + 2), lineterm="", n=1)
        first = next((k for k, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
        problems.append("%s:%d: snippet %s: the copy differs from its source (first at line %d of the block)\n%s"
                        % (rel, open_i + 2 + first, ref, first + 1, "\n".join("    " + d for d in diff)))
    for i in unmarked_cpp_blocks(lines):
        problems.append("%s:%d: a C++ block without a snippet marker: put the code in a compiled file (a "
                        "region '// [NAME]' ... '// [/NAME]' of docs/snippets/FILE.cpp, built and run by "
                        "docs/CMakeLists.txt) and add '<!-- snippet: docs/snippets/FILE.cpp#NAME -->' on the "
                        "line above the block" % (rel, i + 1))
    new_text = "\n".join(out) if fix and out != lines else None
    return problems, seen, new_text


def main(argv):
    parser = argparse.ArgumentParser(description="Check that code blocks in the docs equal their sources.")
    parser.add_argument("--fix", action="store_true", help="rewrite the markdown copies from their sources")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="repository root (default: this script's parent's parent)")
    parser.add_argument("files", nargs="*", help="markdown files (default: docs/*.md and README.md)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    files = args.files or sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + [os.path.join(root, "README.md")]
    problems, seen, fixed = [], 0, []
    for path in files:
        if not os.path.isfile(path):
            problems.append("%s: no such file" % path)
            continue
        p, n, new_text = process(root, path, args.fix)
        problems += p
        seen += n
        if new_text is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new_text)
            fixed.append(os.path.relpath(path, root))
    for p in problems:
        print(p, file=sys.stderr)
    if fixed:
        print("check_snippets: rewrote %s" % ", ".join(fixed))
    if problems:
        differ = any("the copy differs from its source" in p for p in problems)
        print("check_snippets: %d problem(s) in %d marked snippet(s) of %d file(s)%s"
              % (len(problems), seen, len(files), "; run tools/check_snippets.py --fix to copy the sources into "
                 "the markdown" if differ and not args.fix else ""), file=sys.stderr)
        return 1
    print("check_snippets: %d marked snippet(s) in %d file(s) match their sources" % (seen, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
