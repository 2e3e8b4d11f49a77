"""The ring's alpha-beta model, calibrated on 2 ranks and checked on 4, 6 and 8 over 2-4 emulated hosts.

    /usr/bin/python3 bench/allreduce_model.py [--build build] [--links 1,2.5,10,0] [--out DIR] [...]

Runs bench_allreduce (as root: the hosts are network namespaces, tools/on_hosts.sh) for every
configuration H hosts x P ranks in --configs at every link speed in --links, sizes 4 KB to
--max-bytes, with the flat ring (RINGGRAD_RING_ALGORITHM=flat; shared memory inside a host, TCP
between hosts), and compares each measured time with the model's.

The model. A ring all-reduce of S bytes over N = H*P ranks is 2(N-1) steps; in each step every link
moves one chunk of S/N bytes, and the step ends when the slowest link is done:

    T = 2(N-1) * ( alpha + max( S/N / (eta*B)                 the wire: a cross-host link at B, of which TCP gets eta
                               , S/N * c_tcp                   one TCP flow's own limit (a rank's loop, one socket)
                               , S/N * (H*c_cpu + (N-H)*c_shm) / cores ) )   all links' CPU work, shared by the cores

alpha is the TCP step latency (alpha_shm on one host). The third term is what a plain alpha-beta
model lacks and what this machine needs: with more ranks than cores, the ranks' CPU work (the TCP
stack's copies, the shm copies, the reductions) queues for the cores, so the step grows with N even
though no link is full. Calibration: 2 ranks on one host over shm (alpha_shm, c_shm), 2 hosts x 1
rank (alpha and c_tcp unshaped; eta at each speed B) and 4 hosts x 1 rank unshaped (c_cpu: four TCP
flows on two cores). Every other point is a prediction. The model is for the bandwidth regime, from
1 MB up, where DDP's buckets are; there the goal is within +-15 %. Below, the error is printed too.

Writes DIR/allreduce_model.json (every point, measured and predicted, and the parameters).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SIZES_FROM = 4096
SMALL_LIMIT = 64 << 10   # sizes up to this calibrate the latency
LARGE_FROM = 1 << 20     # sizes from this on are the model's domain: where it is judged


def speed_name(gbit):
    return "unshaped" if gbit == 0 else "%g Gbit/s" % gbit


def measure(exe, hosts, nproc, gbit, max_bytes, transport="auto"):
    """{bytes: seconds} from one bench_allreduce run."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [exe, "--nproc", str(nproc), "--transport", transport, "--min-bytes", str(SIZES_FROM),
           "--max-bytes", str(max_bytes), "--no-references", "--json", out]
    if hosts > 1:
        cmd += ["--hosts", str(hosts)] + (["--link-gbit", "%g" % gbit] if gbit > 0 else [])
    env = dict(os.environ, RINGGRAD_RING_ALGORITHM="flat")
    print("# %s" % " ".join(cmd), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if done.returncode != 0:
        print(done.stdout, file=sys.stderr)
        sys.exit("allreduce_model.py: bench_allreduce exited %d (its output is above)" % done.returncode)
    with open(out) as f:
        rows = json.load(f)["rows"]
    os.remove(out)
    return {int(r["size"]): r["time"] * 1e-6 for r in rows}


class Model:
    def __init__(self, cores):
        self.cores = cores
        self.alpha = self.alpha_shm = self.c_tcp = self.c_shm = self.c_cpu = 0.0
        self.eta = {}  # link Gbit/s -> TCP's share of it

    def seconds(self, hosts, per_host, gbit, size):
        n = hosts * per_host
        if n == 1:
            return 0.0
        chunk = size / n
        cross = hosts > 1
        shared = chunk * ((hosts * self.c_cpu + (n - hosts) * self.c_shm) if cross else n * self.c_shm) / self.cores
        terms = [shared, chunk * (self.c_tcp if cross else self.c_shm)]
        if cross and gbit > 0:
            terms.append(chunk / (self.eta[gbit] * gbit * 1e9 / 8))
        return 2 * (n - 1) * ((self.alpha if cross else self.alpha_shm) + max(terms))

    def params(self):
        return {"alpha_us": self.alpha * 1e6, "alpha_shm_us": self.alpha_shm * 1e6,
                "c_tcp_ns_per_byte": self.c_tcp * 1e9, "c_cpu_ns_per_byte": self.c_cpu * 1e9,
                "c_shm_ns_per_byte": self.c_shm * 1e9, "cores": self.cores,
                "eta": {speed_name(g): e for g, e in self.eta.items()}}


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def slope(t, lo, hi, steps, per_step_bytes):
    """Seconds per byte of one link, from the growth of a run's time between two large sizes."""
    return (t[hi] - t[lo]) / steps / (per_step_bytes(hi) - per_step_bytes(lo))


def calibrate(model, shm2, tcp2_unshaped, tcp2_by_link, tcp4_unshaped):
    large = max(shm2)
    latency_sizes = [b for b in shm2 if b <= SMALL_LIMIT]
    # 2 ranks: 2 steps of S/2 bytes. alpha: the median step time of the small sizes (one size alone
    # is at the mercy of the scheduler); c: the slope between 1 MB and the largest size.
    model.alpha_shm = median([shm2[b] / 2 for b in latency_sizes])
    model.alpha = median([tcp2_unshaped[b] / 2 for b in latency_sizes])
    model.c_shm = slope(shm2, LARGE_FROM, large, 2, lambda b: b / 2)
    model.c_tcp = slope(tcp2_unshaped, LARGE_FROM, large, 2, lambda b: b / 2)
    for gbit, t in tcp2_by_link.items():
        step = t[large] / 2 - model.alpha
        wire = (large / 2) / (gbit * 1e9 / 8)
        model.eta[gbit] = min(1.0, wire / step)  # a link the CPU cannot fill is "all TCP gets"
    # 4 hosts x 1 rank: 4 TCP links on 2 cores. Their CPU work, shared by the cores, per byte.
    step = tcp4_unshaped[large] / 6 - model.alpha
    model.c_cpu = step * model.cores / (4 * large / 4)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default="build", help="the build directory with bench/bench_allreduce and tools/ringrun")
    p.add_argument("--links", default="1,2.5,10,0", help="link speeds in Gbit/s; 0 = unshaped")
    p.add_argument("--configs", default="2x2,4x1,2x3,3x2,2x4,4x2", help="H x P configurations to predict")
    p.add_argument("--max-bytes", type=int, default=16 << 20, help="largest all-reduce (sizes go 4x from 4 KB)")
    p.add_argument("--tolerance", type=float, default=15.0, help="the goal: |error| at most this many percent")
    p.add_argument("--out", default=None, help="output folder (default: BUILD/allreduce_model)")
    a = p.parse_args()
    try:
        links = [float(v) for v in a.links.split(",")]
        configs = [tuple(int(x) for x in c.split("x")) for c in a.configs.split(",")]
    except ValueError:
        sys.exit("allreduce_model.py: --links expects numbers and --configs HxP items, got '%s' and '%s'"
                 % (a.links, a.configs))
    if 0 not in links:
        sys.exit("allreduce_model.py: --links must include 0 (unshaped): it calibrates the CPU cost of TCP")
    exe = os.path.join(a.build, "bench", "bench_allreduce")
    if not os.access(exe, os.X_OK):
        sys.exit("allreduce_model.py: %s is not built (ninja -C %s bench_allreduce ringrun)" % (exe, a.build))
    out = a.out or os.path.join(a.build, "allreduce_model")
    os.makedirs(out, exist_ok=True)

    if a.max_bytes < 4 * LARGE_FROM:
        sys.exit("allreduce_model.py: --max-bytes must be at least 4 MB: the model is fitted from 1 MB up")
    print("# calibration: 2 ranks on one host, 2 x 1 at every link, 4 x 1 unshaped", flush=True)
    shm2 = measure(exe, 1, 2, 0, a.max_bytes, transport="shm")
    tcp2 = {g: measure(exe, 2, 2, g, a.max_bytes) for g in links}
    tcp4 = measure(exe, 4, 4, 0, a.max_bytes)
    model = Model(os.cpu_count() or 1)
    calibrate(model, shm2, tcp2[0], {g: t for g, t in tcp2.items() if g > 0}, tcp4)
    print("# parameters: " + json.dumps(model.params()), flush=True)

    points = []
    for (h, pp) in configs:
        for g in links:
            print("# predicting %dx%d at %s" % (h, pp, speed_name(g)), flush=True)
            calibration = (h, pp, g) == (4, 1, 0)  # measured above, for c_cpu
            measured = tcp4 if calibration else measure(exe, h, h * pp, g, a.max_bytes)
            for size, t in sorted(measured.items()):
                pred = model.seconds(h, pp, g, size)
                points.append({"hosts": h, "per_host": pp, "ranks": h * pp, "link": speed_name(g), "bytes": size,
                               "measured_us": t * 1e6, "predicted_us": pred * 1e6,
                               "error_pct": 100.0 * (pred - t) / t, "calibration": calibration})
    for g, t in tcp2.items():  # the calibration runs' other sizes are checked too
        for size, s in sorted(t.items()):
            pred = model.seconds(2, 1, g, size)
            points.append({"hosts": 2, "per_host": 1, "ranks": 2, "link": speed_name(g), "bytes": size,
                           "measured_us": s * 1e6, "predicted_us": pred * 1e6, "error_pct": 100.0 * (pred - s) / s,
                           "calibration": True})
    judged = [pt for pt in points if pt["bytes"] >= LARGE_FROM]
    predicted = [pt for pt in judged if not pt["calibration"]]
    fitted = [pt for pt in judged if pt["calibration"]]

    sizes = sorted({pt["bytes"] for pt in points})
    print("#\n# ringgrad allreduce_model  flat ring  cores=%d  error = (model - measured) / measured, %%" % model.cores)
    print("#  %-10s %-10s" % ("hosts x P", "link") + "".join("%9s" % fmt_bytes(s) for s in sizes) + "   max|err|")
    order = [(2, 1)] + configs
    for (h, pp) in order:
        for g in links:
            row = {pt["bytes"]: pt for pt in points if (pt["hosts"], pt["per_host"]) == (h, pp)
                   and pt["link"] == speed_name(g)}
            if not row:
                continue
            errs = [row[s]["error_pct"] for s in sizes if s in row]
            cells = "".join("%9s" % ("%+.0f" % row[s]["error_pct"] if s in row else "-") for s in sizes)
            mark = "  (calibration)" if any(pt["calibration"] for pt in row.values()) else ""
            print("   %-10s %-10s%s   %6.0f%%%s" % ("%dx%d" % (h, pp), speed_name(g), cells, max(abs(e) for e in errs),
                                                  mark))

    def count(pts):
        return sum(abs(pt["error_pct"]) <= a.tolerance for pt in pts), len(pts)

    within, total = count(predicted)
    print("# predictions from 1 MB up: %d of %d within +-%g %%; calibration runs' points from 1 MB up: %d of %d "
          "(2x1 at every link: alpha, c_tcp and eta; 4x1 unshaped: c_cpu; 2 ranks over shm: alpha_shm, c_shm)."
          % (within, total, a.tolerance, *count(fitted)))
    print("# Below 1 MB a step's time is the wake-up latency of a rank on this shared 2-core machine, which varies "
          "30-110 us and is sometimes longer for smaller messages: no alpha-beta model fits it, and none is used there "
          "(DDP's buckets are 1-25 MB).")
    doc = {"program": "allreduce_model", "parameters": model.params(), "tolerance_pct": a.tolerance,
           "predictions_within": within, "predictions_judged": total, "points": points}
    path = os.path.join(out, "allreduce_model.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print("# wrote " + path)
    return 0


def fmt_bytes(b):
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if b % scale == 0:
            return "%d%s" % (b // scale, unit)
    return str(b)


if __name__ == "__main__":
    sys.exit(main())
