#!/usr/bin/env python3
"""tools/tidy_cache.py: which sources clang-tidy has already passed, exactly as they are now.

    python3 tools/tidy_cache.py unchecked BUILD_DIR FILE...   prints the files with no clean result
                                                              on record (one a line)
    python3 tools/tidy_cache.py passed BUILD_DIR FILE...      records that these files passed (after
                                                              `unchecked` in the same build folder)

A result is keyed by everything that decides it: clang-tidy's version, .clang-tidy, the file's compile
command (less its output paths) and the file as the compiler sees it, every header expanded
(`clang++ -E`), so an edited header, macro or flag is a different key. Only clean results are kept;
a finding is never cached, so a source with one is checked, and fails, every time. tools/tidy.sh
uses it; the records live in ${XDG_CACHE_HOME:-~/.cache}/ringgrad-tidy (RINGGRAD_TIDY_CACHE moves it;
an empty RINGGRAD_TIDY_CACHE turns the cache off and ignores the checked-in record too).

tools/tidy_passed.txt is the checked-in copy of the same knowledge for the sources as they are in the
tree: a line `KEY PATH` for each library source whose current text passed. Every run brings it up to
date (commit it with your change), and a clean clone, such as CI's, reads it: a source unchanged since
its last clean check is not checked again, on any machine with the same clang-tidy and system headers
(the keys hold both). A changed source, header or flag has a new key, which no line matches. Like
.clang-tidy itself, the file is trusted as part of the tree: a line forged for a key it never passed
would skip that check.
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def cache_dir():
    if "RINGGRAD_TIDY_CACHE" in os.environ:
        return os.environ["RINGGRAD_TIDY_CACHE"] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ringgrad-tidy")


RECORD = os.path.join("tools", "tidy_passed.txt")
RECORD_HEADER = (
    "# Sources clang-tidy 14 passed, by the key of everything that decided it (tools/tidy_cache.py).\n"
    "# Brought up to date by every tools/tidy.sh run: commit it with your change.\n")


def read_record():
    """{path: key} from the checked-in record; a missing or unreadable file is an empty record."""
    found = {}
    try:
        with open(RECORD, encoding="utf-8") as data:
            for line in data:
                parts = line.split()
                if len(parts) == 2 and not line.startswith("#") and len(parts[0]) == 64:
                    found[parts[1]] = parts[0]
    except OSError:
        pass
    return found


def tree_path(path):
    """A source's path as the record names it: relative to the checkout (tools/tidy.sh runs there)."""
    return os.path.relpath(os.path.realpath(path))


def write_record(found):
    """Replaces the record (a temporary file renamed over it, so a killed run leaves the old one)."""
    lines = [f"{key} {path}\n" for path, key in sorted(found.items())
             if os.path.isfile(path) and not path.startswith("..")]
    text = RECORD_HEADER + "".join(lines)
    try:
        with open(RECORD, encoding="utf-8") as old:
            if old.read() == text:
                return
    except OSError:
        pass
    temporary = RECORD + ".tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, RECORD)


def preprocess_command(entry):
    """The file's compile command with -E instead of an object file, run from its directory."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD"):
            continue
        out.append(arg)
    return out + ["-E"]


def key_of(entry, common, build_dir):
    command = preprocess_command(entry)
    run = subprocess.run(command, cwd=entry["directory"], capture_output=True)
    if run.returncode != 0:
        return None  # let clang-tidy say what is wrong
    # The checkout's and the build's folders (in -I flags, and in __FILE__'s strings) stand as names,
    # so that the same sources checked out elsewhere, as every CI clone is, have the same key.
    places = [(os.path.realpath(build_dir), "@BUILD@"), (os.path.realpath(os.getcwd()), "@SOURCE@")]
    text = " ".join(command)
    output = run.stdout
    for place, name in places:
        text = text.replace(place, name)
        output = output.replace(place.encode(), name.encode())
    digest = hashlib.sha256(common)
    digest.update(text.encode())
    digest.update(output)
    return digest.hexdigest()


def keys(build_dir, files):
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as data:
        entries = {os.path.realpath(e["file"]): e for e in json.load(data)}
    version = subprocess.run(["clang-tidy-14", "--version"], capture_output=True).stdout
    with open(".clang-tidy", "rb") as config:
        common = version + config.read()
    found = {}
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        futures = {}
        for path in files:
            entry = entries.get(os.path.realpath(path))
            if entry is not None:
                futures[path] = pool.submit(key_of, entry, common, build_dir)
        for path in files:
            found[path] = futures[path].result() if path in futures else None
    return found


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("unchecked", "passed"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    what, build_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    where = cache_dir()
    if where is None:
        if what == "unchecked":
            print("\n".join(files))
        return 0
    os.makedirs(where, exist_ok=True)
    # `unchecked` leaves the keys it computed for `passed`, which follows it in the same run: the
    # files are not preprocessed twice.
    keys_file = os.path.join(build_dir, "tidy-keys.json")
    record = read_record()
    recorded_keys = set(record.values())
    if what == "unchecked":
        found = keys(build_dir, files)
        with open(keys_file, "w", encoding="utf-8") as out:
            json.dump(found, out)
        for path, key in found.items():
            if key and (key in recorded_keys or os.path.exists(os.path.join(where, key))):
                record[tree_path(path)] = key  # passed before, here or in the tree's record
            else:
                record.pop(tree_path(path), None)  # until it passes as it is now
                print(path)
        write_record(record)
        return 0
    with open(keys_file, encoding="utf-8") as data:
        found = json.load(data)
    for path in files:
        key = found.get(path)
        if key:
            with open(os.path.join(where, key), "w", encoding="utf-8") as mark:
                mark.write(path + "\n")
            record[tree_path(path)] = key
    write_record(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
