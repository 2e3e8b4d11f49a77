#!/usr/bin/env python3
"""tools/measure_faults.py: how long a 2-rank ring job takes to fail, for each kind of fault.

Measures the rows of docs/distributed.md's "Faults and timeouts, measured" table with the timeouts
a user would set. Each fault is one small job of tests' ringgrad_dist_worker (the program the
[ring] tests start), started here rank by rank -- or under ringrun, for the rows about the whole
job -- and timed by what the surviving rank prints ("error after N ms", counted from its start) or
by the job's wall time. A row with a timeout must end within 1.1x of it.

  measure_faults.py --build build --timeouts 10,60 [--jobs 4] [--json faults.json]

Prints a Markdown table (fault, timeout, time, time / timeout, the survivor's first words) and,
with --json, writes the same rows. Exits 1 when a row that should end within 1.1x of its timeout
did not, or a job did not fail the way it should; 2 on a usage error.
"""
import argparse
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

WITHIN = 1.1  # the promise: a job that fails on a timeout ends within 1.1x of it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenarios(timeouts):
    """(name, timeout in s or None, how to run it) for every row."""
    rows = [
        # die_asleep: rank 1 is killed 300 ms into an all-reduce that rank 0 waits in.
        ("rank 1 killed (SIGKILL) mid all-reduce, shm", None,
         dict(args=["die_asleep", "shm"], env={"VICTIM": "1"}, after_kill=True)),
        ("rank 1 killed (SIGKILL) mid all-reduce, tcp", None,
         dict(args=["die_asleep", "tcp"], env={"VICTIM": "1"}, after_kill=True)),
        ("ranks disagree on a tensor's size", None, dict(args=["mismatch", "auto"], env={"VICTIM": "1"})),
        ("12 silent clients at rank 0's ring listener (setup timeout 60 s)", None,
         dict(args=["intruder", "tcp"], env={"VICTIM": "1", "INTRUDERS": "12", "TIMEOUT_MS": "60000",
                                             "RINGGRAD_JOB_TOKEN": "measure"}, succeeds=True)),
    ]
    for t in timeouts:
        ms = str(int(t * 1000))
        for victim in ("1", "0"):
            for transport in ("shm", "tcp"):
                rows.append((f"rank {victim} stopped (SIGSTOP) mid all-reduce, {transport}", t,
                             dict(args=["stop", transport], env={"VICTIM": victim, "TIMEOUT_MS": ms})))
        for victim in ("1", "0"):
            rows.append((f"rank {victim} stopped, the whole job under ringrun --timeout {t:g}", t,
                         dict(args=["stop", "auto"], env={"VICTIM": victim, "KEEP_VICTIM": "1"}, ringrun=True)))
        rows.append(("rank 1 never started", t, dict(args=["absent", "auto"], env={"VICTIM": "1", "TIMEOUT_MS": ms})))
        rows.append(("rank 0 never started", t, dict(args=["absent", "auto"], env={"VICTIM": "0", "TIMEOUT_MS": ms})))
        rows.append(("rank 1 has another job's token (rank 0 waits)", t,
                     dict(args=["one", "auto"], env={"VICTIM": "1", "TIMEOUT_MS": ms, "RINGGRAD_JOB_TOKEN": "ours",
                                                     "VICTIM_TOKEN": "theirs"})))
    return rows


def run_row(build, name, timeout, how):
    worker = os.path.join(build, "tests", "ringgrad_dist_worker")
    limit = (timeout or 60) * 2 + 30
    with tempfile.TemporaryDirectory() as pid_dir:
        env = dict(os.environ, PID_DIR=pid_dir, **how["env"])
        start = time.monotonic()
        if how.get("ringrun"):
            cmd = [os.path.join(build, "tools", "ringrun"), "--nproc-per-node", "2", "--master-port", "0",
                   "--timeout", f"{timeout:g}", worker] + how["args"]
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=limit)
            wall = time.monotonic() - start
            outputs = {"job": done.stdout}
            codes = [done.returncode]
        else:
            env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
            # Each rank writes to a file of its own, so neither waits on a pipe that is not read yet.
            logs = [open(os.path.join(pid_dir, f"rank{r}.log"), "w+") for r in range(2)]
            procs = [subprocess.Popen([worker] + how["args"], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                      stdout=logs[r], stderr=subprocess.STDOUT, text=True)
                     for r in range(2)]
            outputs, codes, late = {}, [], False
            for p in procs:
                try:
                    p.wait(timeout=max(1, limit - (time.monotonic() - start)))
                except subprocess.TimeoutExpired:
                    late = True
                    for q in procs:
                        q.kill()
                    p.wait()
                codes.append(p.returncode)
            wall = time.monotonic() - start
            for r, log in enumerate(logs):
                log.seek(0)
                outputs[f"rank {r}"] = log.read() + ("\n(killed: ran past the limit)" if late else "")
                log.close()
    text = "\n".join(outputs.values())
    if how.get("succeeds"):
        seconds, ok = wall, all(c == 0 for c in codes)
        said = "the job succeeds"
    elif how.get("ringrun"):
        seconds, ok = wall, codes[0] != 0
        said = next((line for line in text.splitlines() if "ringrun:" in line), "")
    else:
        found = [(float(m.group(1)), m.group(2)) for m in re.finditer(r"error after (\d+) ms: (.*)", text)]
        if how.get("after_kill"):  # from the kill, 300 ms into the all-reduce, instead of from the start
            into = [float(m.group(1)) - 300 for m in re.finditer(r"failed (\d+) ms into the all-reduce", text)]
            found = [(into[0], found[0][1])] if into and found else []
        ok = bool(found)
        seconds, said = (max(found)[0] / 1000, max(found)[1]) if found else (wall, "(no error printed)")
    ratio = seconds / timeout if timeout else None
    if ratio is not None and ratio > WITHIN:
        ok = False
    return {"fault": name, "timeout_s": timeout, "seconds": round(seconds, 2),
            "ratio": round(ratio, 3) if ratio is not None else None, "ok": ok, "said": said[:160],
            "output": text if not ok else ""}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="the build folder (default: build)")
    parser.add_argument("--timeouts", default="10,60", help="timeouts to measure, seconds (default: 10,60)")
    parser.add_argument("--jobs", type=int, default=4, help="jobs run at once; most of them wait (default: 4)")
    parser.add_argument("--json", help="also write the rows here")
    a = parser.parse_args()
    try:
        timeouts = [float(t) for t in a.timeouts.split(",") if t]
    except ValueError:
        parser.error(f"--timeouts: expected seconds separated by commas, got '{a.timeouts}'")
    if not timeouts or any(t <= 0 for t in timeouts) or a.jobs < 1:
        parser.error("--timeouts: expected positive seconds; --jobs: at least 1")
    worker = os.path.join(a.build, "tests", "ringgrad_dist_worker")
    if not os.access(worker, os.X_OK):
        parser.error(f"--build: no {worker} (build the tests first)")

    rows = scenarios(timeouts)
    print(f"# {len(rows)} faults, {a.jobs} at a time; the longest take 1.1x their timeout", file=sys.stderr)
    results = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(run_row, a.build, *row) for row in rows]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            r = future.result()
            print(f"# {done}/{len(rows)}: {r['fault']} ({r['seconds']} s)", file=sys.stderr)
            results.append(r)
    order = {row[0] + str(row[1]): i for i, row in enumerate(rows)}
    results.sort(key=lambda r: order[r["fault"] + str(r["timeout_s"])])

    print("| fault | timeout | ended after | / timeout | the survivor says |")
    print("|---|---|---|---|---|")
    for r in results:
        timeout = f"{r['timeout_s']:g} s" if r["timeout_s"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        mark = "" if r["ok"] else " **(failed)**"
        said = r["said"].replace("|", "\\|")
        print(f"| {r['fault']} | {timeout} | {r['seconds']:.2f} s{mark} | {ratio} | `{said}` |")
    if a.json:
        if os.path.lexists(a.json) and not os.path.isfile(a.json) or os.path.islink(a.json):
            print(f"measure_faults.py: --json: {a.json} exists and is not a regular file; not replacing it",
                  file=sys.stderr)
            return 2
        with open(a.json + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    bad = [r for r in results if not r["ok"]]
    for r in bad:
        print(f"\n--- {r['fault']} (timeout {r['timeout_s']}):\n{r['output']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
