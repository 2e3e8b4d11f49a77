"""DDP on slow links: bench/dp_vs_ddp's DDP modes across emulated hosts, at several link speeds.

    /usr/bin/python3 bench/link_sweep.py [--build build] [--links 1,2.5,10,0] [--out DIR] [...]

For each link speed B (Gbit/s; 0 = unshaped) it runs, as root (the hosts are network namespaces,
tools/on_hosts.sh),

    dp_vs_ddp --hosts H --devices N --link-gbit B --modes single,ddp-naive,ddp-flat,ddp-overlap,
              ddp-bucketed,ddp-no_sync --caps CAPS --scaling-model --json DIR/link-B.json --trace DIR/traces-B
    dp_vs_ddp ... --modes single,ddp-bucketed --comm-hook HOOK --json DIR/link-B-HOOK.json

then prints, per link speed, each mode's step time (ms) and the share of its communication left
exposed after backward, its backward time (which grows where communication takes CPU from it) and
the error of dp_vs_ddp's scaling model, judges the goals below, and writes DIR/link_sweep.json and, with
matplotlib, DIR/link_sweep.png (step time against link speed, one line per mode).

Goals (benchmarks, not tests), on 2 hosts x 1 rank: at 10 Gbit/s ddp-bucketed (its best cap) leaves
at most 25 % of its communication exposed and is at least 1.3x faster than ddp-flat; at 1 Gbit/s the
compression hook cuts ddp-bucketed's step at least 1.6x. Each is printed as met or NOT met.
"""
import argparse
import json
import os
import subprocess
import sys

MODES = "single,ddp-naive,ddp-flat,ddp-overlap,ddp-bucketed,ddp-no_sync"


def speed_name(gbit):
    return "unshaped" if gbit == 0 else "%g Gbit/s" % gbit


def run(cmd):
    print("# " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        print(done.stdout, file=sys.stderr)
        sys.exit("link_sweep.py: dp_vs_ddp exited %d (its output is above)" % done.returncode)


def rows_of(path, suffix=""):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for m in doc["modes"]:
        if m.get("source") != "ringgrad":
            continue
        b = m.get("breakdown_ms") or {}
        comm = b.get("comm") or 0.0
        out[m["id"] + suffix] = {
            "mode": m["mode"] + suffix,
            "cap_mb": m.get("bucket_cap_mb"),
            "step_ms": m["step_ms"]["median"],
            "p10_ms": m["step_ms"]["p10"],
            "p90_ms": m["step_ms"]["p90"],
            "comm_ms": comm,
            "exposed_ms": b.get("exposed_comm") or 0.0,
            "backward_ms": b.get("backward"),
            "exposed_pct": 100.0 * (b.get("exposed_comm") or 0.0) / comm if comm > 0 else None,
            "correct": m.get("correct"),
        }
    return doc["run"], out


def best(rows, prefix):
    """The fastest row whose id starts with prefix (the best bucket cap), or None."""
    found = [(r["step_ms"], k) for k, r in rows.items() if k.startswith(prefix)]
    return min(found)[1] if found else None


def goals(results, hook):
    lines = []

    def say(text, value, ok):
        lines.append("#   goal: %-70s measured %8s  %s" % (text, value, "met" if ok else "NOT met"))

    if 10.0 in results:
        rows = results[10.0]
        b = best({k: v for k, v in rows.items() if "+" not in k}, "ddp-bucketed-")  # without the hook
        f = rows.get("ddp-flat")
        if b and f and rows[b]["exposed_pct"] is not None:
            e = rows[b]["exposed_pct"]
            say("10 Gbit/s: %s exposes at most 25%% of its communication" % b, "%.1f%%" % e, e <= 25)
            r = f["step_ms"] / rows[b]["step_ms"]
            say("10 Gbit/s: %s at least 1.3x faster than ddp-flat" % b, "%.2fx" % r, r >= 1.3)
    if 1.0 in results:
        rows = results[1.0]
        plain = best({k: v for k, v in rows.items() if "+" not in k}, "ddp-bucketed-")
        hooked = best({k: v for k, v in rows.items() if k.endswith("+" + hook)}, "ddp-bucketed-")
        if plain and hooked:
            r = rows[plain]["step_ms"] / rows[hooked]["step_ms"]
            say("1 Gbit/s: the %s hook cuts ddp-bucketed's step at least 1.6x (%s vs %s)" % (hook, hooked, plain),
                "%.2fx" % r, r >= 1.6)
    return lines


def plot(results, path, hosts=2):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print("# link_sweep.png: not drawn (needs python3-matplotlib)")
        return
    speeds = sorted(results, key=lambda g: (g == 0, g))  # unshaped last
    x = list(range(len(speeds)))
    ids = []
    for g in speeds:
        ids += [k for k in results[g] if k not in ids]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more modes than the default ten colours
    for k in ids:
        ys = [results[g][k]["step_ms"] if k in results[g] else float("nan") for g in speeds]
        ax.plot(x, ys, marker="o", label=k, linestyle="--" if k == "single" else "-")
    ax.set_xticks(x)
    ax.set_xticklabels([speed_name(g) for g in speeds])
    ax.set_yscale("log")
    ax.set_xlabel("each host's link")
    ax.set_ylabel("step time (ms, median; log scale)")
    ax.set_title("DDP step time against link speed (%d emulated hosts)" % hosts)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("# wrote " + path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default="build", help="the build directory with bench/dp_vs_ddp and tools/ringrun")
    p.add_argument("--hosts", type=int, default=2, help="emulated hosts")
    p.add_argument("--devices", type=int, default=2, help="DDP ranks over all hosts")
    p.add_argument("--links", default="1,2.5,10,0", help="link speeds in Gbit/s; 0 = unshaped")
    p.add_argument("--caps", default="1,5,25", help="ddp-bucketed's bucket caps (MB)")
    p.add_argument("--hook", default="fp16", choices=["fp16", "bf16"], help="the compression hook's run")
    p.add_argument("--steps", type=int, default=20, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--out", default=None, help="output folder (default: BUILD/link_sweep)")
    a = p.parse_args()
    try:
        links = [float(v) for v in a.links.split(",")]
    except ValueError:
        sys.exit("link_sweep.py: --links expects comma-separated Gbit/s numbers, got '%s'" % a.links)
    if any(g < 0 for g in links):
        sys.exit("link_sweep.py: --links expects speeds >= 0 (0 = unshaped), got '%s'" % a.links)
    exe = os.path.join(a.build, "bench", "dp_vs_ddp")
    if not os.access(exe, os.X_OK):
        sys.exit("link_sweep.py: %s is not built (ninja -C %s dp_vs_ddp ringrun)" % (exe, a.build))
    out = a.out or os.path.join(a.build, "link_sweep")
    os.makedirs(out, exist_ok=True)
    common = [exe, "--hosts", str(a.hosts), "--devices", str(a.devices), "--no-torch", "--steps", str(a.steps),
              "--warmup", str(a.warmup), "--caps", a.caps]
    results, run_info = {}, None
    for i, g in enumerate(links):
        print("# link %d/%d: %s" % (i + 1, len(links), speed_name(g)), flush=True)
        shaped = ["--link-gbit", "%g" % g] if g > 0 else []
        tag = "%g" % g
        plain_json = os.path.join(out, "link-%s.json" % tag)
        hook_json = os.path.join(out, "link-%s-%s.json" % (tag, a.hook))
        run(common + shaped + ["--modes", MODES, "--scaling-model", "--json", plain_json,
                               "--trace", os.path.join(out, "traces-" + tag)])
        run(common + shaped + ["--modes", "single,ddp-bucketed", "--comm-hook", a.hook, "--json", hook_json])
        run_info, rows = rows_of(plain_json)
        with open(plain_json) as f:
            model = json.load(f).get("model") or {}
        for v in model.get("validation", []):
            if v["mode"] in rows:
                rows[v["mode"]]["model_ms"] = v["predicted_ms"]
                rows[v["mode"]]["model_error_pct"] = v["error_pct"]
        hooked = rows_of(hook_json, "+" + a.hook)[1]
        rows.update({k: v for k, v in hooked.items() if k.startswith("ddp-")})
        results[g] = rows

    speeds = sorted(results, key=lambda g: (g == 0, g))
    ids = []
    for g in speeds:
        ids += [k for k in results[g] if k not in ids]
    print("#\n# ringgrad link_sweep  %d hosts x %d rank(s)  model=%s  global_batch=%s  steps=%d  commit=%s"
          % (a.hosts, a.devices // a.hosts, run_info["model"], run_info["global_batch"], a.steps, run_info["commit"]))
    print("# step time, ms (median; the slowest rank's), and in brackets the share of communication exposed after "
          "backward")
    head = "%-26s" % "mode" + "".join("%22s" % speed_name(g) for g in speeds)
    print("#  " + head)
    for k in ids:
        cells = ""
        for g in speeds:
            r = results[g].get(k)
            if r is None:
                cells += "%22s" % "-"
            elif r["exposed_pct"] is None:
                cells += "%22s" % ("%.2f" % r["step_ms"])
            else:
                cells += "%22s" % ("%.2f (%3.0f%%)" % (r["step_ms"], r["exposed_pct"]))
        print("   %-26s%s" % (k, cells))
    print("# backward alone, ms (compute only): where it grows beyond ddp-no_sync's, communication took CPU from it")
    for k in ids:
        if not k.startswith("ddp-"):
            continue
        cells = "".join("%22s" % ("%.2f" % results[g][k]["backward_ms"] if k in results[g] and
                                  results[g][k]["backward_ms"] is not None else "-") for g in speeds)
        print("   %-26s%s" % (k, cells))
    print("# dp_vs_ddp's scaling model (calibrated in each run on its own all-reduce times), error against the "
          "measured step, %")
    for k in ids:
        if not any("model_error_pct" in results[g].get(k, {}) for g in speeds):
            continue
        cells = "".join("%22s" % ("%+.0f" % results[g][k]["model_error_pct"] if "model_error_pct" in
                                  results[g].get(k, {}) else "-") for g in speeds)
        print("   %-26s%s" % (k, cells))
    wrong = [(speed_name(g), k) for g in speeds for k, r in results[g].items() if r["correct"] is False]
    print("# every synchronised mode reproduced single's parameters" if not wrong
          else "# NOT correct: " + ", ".join("%s at %s" % (k, s) for s, k in wrong))
    print("#\n# goals (measured here, not asserted):")
    for line in goals(results, a.hook):
        print(line)
    summary = {"program": "link_sweep", "run": run_info, "hosts": a.hosts, "devices": a.devices, "hook": a.hook,
               "links": [{"gbit": g, "name": speed_name(g), "modes": results[g]} for g in speeds]}
    with open(os.path.join(out, "link_sweep.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("# wrote " + os.path.join(out, "link_sweep.json"))
    plot(results, os.path.join(out, "link_sweep.png"), a.hosts)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
