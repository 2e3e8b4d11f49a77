"""Draws the figures of bench/dp_vs_ddp's results: where a step's time goes, how DP and DDP scale,
how the bucket size matters, and what a step's timeline looks like.

    /usr/bin/python3 bench/plot.py RESULT.json [--trace TRACE.json ...] [--out DIR] [--check]

RESULT.json is what `dp_vs_ddp --json` writes; each TRACE.json is a Chrome trace (the files whose
names it lists under "traces"; chrome://tracing and ui.perfetto.dev open them too). Into DIR (default:
RESULT.json's folder) it writes, and prints the path of,

    breakdown.png  one stacked bar per mode: forward, backward, communication, optimizer ...
    scaling.png    the alpha-beta model's step time for 2..1024 devices, DP dashed and DDP solid,
                   one colour per link, with the measured points as black markers
    buckets.png    DDP's step time and exposed communication against the bucket size
    <trace>.png    one timeline (Gantt chart) per --trace: a lane per thread, a box per event

A figure whose data are missing (no "model" section, no bucket sweep ...) is skipped with a note.
--check then verifies that every figure it says it wrote exists and is not empty (CTest runs it so).

Needs matplotlib (Debian: apt-get install python3-matplotlib); it draws off-screen (Agg backend).
Exit status: 0 done; 1 --check failed; 2 an input file cannot be read; 77 no matplotlib (CTest's
SKIP_RETURN_CODE, so the test is skipped rather than failed where matplotlib is not installed).
"""
import argparse
import json
import math
import os
import sys

SKIP = 77              # "skipped" for CTest (SKIP_RETURN_CODE), as for automake
DEFAULT_CAP_MB = 25    # DDP's default bucket size: the measured DDP point in scaling.png

# One colour per kind of work, shared by the bar chart and the timelines, so "backward" is the same
# orange everywhere. The names are breakdown_ms keys and trace event families.
COLOURS = {
    "forward": "#1f77b4",
    "apply": "#6baed6",         # DP's parallel_apply: the replicas' forward passes
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "scatter": "#9467bd",
    "replicate": "#8c564b",
    "gather": "#e377c2",
    "reduce": "#b22222",        # DP: the replicas' gradients summed onto one device
    "exposed_comm": "#d62728",  # DDP: all-reduce time the step waits for
    "hidden_comm": "#f4a6a6",   # DDP: all-reduce time hidden behind backward
    "all-reduce": "#d62728",
    "wait": "#7f7f7f",
    "copy": "#bcbd22",
    "step": "#eeeeee",
    "other": "#c7c7c7",         # breakdown: the part of the median step no segment accounts for
    "total": "#8c8c8c",         # breakdown: a row without segments (PyTorch), the whole step
}


# ---------------------------------------------------------------------------------------------
# Reading the inputs
# ---------------------------------------------------------------------------------------------

def import_pyplot():
    """matplotlib.pyplot on the Agg backend (draws into files, needs no display); exits 77 without it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken install raising something else
        print("plot.py: skipped, cannot import matplotlib with %s (%s); install python3-matplotlib"
              % (sys.executable, str(e).splitlines()[0] if str(e) else type(e).__name__))
        sys.exit(SKIP)
    return plt


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print("plot.py: cannot read %s: %s" % (path, e), file=sys.stderr)
        sys.exit(2)


def number(value):
    """value as a float, or None for JSON null, a missing key or anything else that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def median_ms(row):
    return number((row.get("step_ms") or {}).get("median"))


def is_torch(row):
    return row.get("source") == "pytorch" or str(row.get("mode", "")).startswith("torch-")


def row_label(row):
    """'ddp-bucketed 25 MB x2': the mode, its bucket cap if any, its number of devices."""
    label = str(row.get("mode", "?"))
    cap = number(row.get("bucket_cap_mb"))
    if cap is not None:
        label += " %g MB" % cap
    devices = row.get("devices")
    if devices not in (None, 1):
        label += " x%s" % devices
    return label


def note(text):
    print("note: " + text)


# ---------------------------------------------------------------------------------------------
# breakdown.png: where each mode's step time goes
# ---------------------------------------------------------------------------------------------

# Not every breakdown_ms entry adds to the step time, so only some are stacked:
#   single  forward + backward + optimizer.
#   dp      scatter + replicate + apply + gather + backward + optimizer. `reduce` (summing the
#           replicas' gradients) happens *inside* backward, so it is drawn hatched over the end of
#           the backward segment, not after it.
#   ddp-*   forward + backward + exposed_comm + optimizer. `comm` is the whole all-reduce time, but
#           most of it runs while backward is still computing; only `exposed_comm` (the wait after
#           backward) lengthens the step. The hidden part, comm - exposed_comm, is drawn as a thin
#           bar under the backward segment, where it happened.
# Each segment is a median of its own, so the stack need not add up to the median step exactly;
# what the segments leave out of the median is drawn as a grey "unattributed" segment.
ADDITIVE = ["scatter", "replicate", "forward", "apply", "gather", "backward", "exposed_comm", "optimizer"]
OVERLAID = ["reduce", "comm"]


def stack_segments(breakdown, median):
    """[(key, start, width)]: the additive segments of one row, then 'other' for the unattributed rest."""
    segments, x = [], 0.0
    for key in ADDITIVE:
        width = number(breakdown.get(key))
        if width is not None and width > 0:
            segments.append((key, x, width))
            x += width
    if not segments:
        # No breakdown (PyTorch rows): one plain bar for the whole step, if its time is known.
        return [("total", 0.0, median)] if median is not None else []
    if median is not None and median - x > 0.02 * median:
        segments.append(("other", x, median - x))
    return segments


def draw_overlays(ax, y, breakdown, segments):
    """DP's reduce (hatched, inside backward) and DDP's hidden communication (thin bar under backward)."""
    drawn = set()
    backward = [(start, width) for key, start, width in segments if key == "backward"]
    if not backward:
        return drawn
    b_start, b_width = backward[0]
    b_end = b_start + b_width
    reduce_ms = number(breakdown.get("reduce"))
    if reduce_ms:
        width = min(reduce_ms, b_width)
        ax.barh(y, width, left=b_end - width, height=0.6, color="none", edgecolor=COLOURS["reduce"],
                hatch="xxx", linewidth=0)
        drawn.add("reduce")
    comm = number(breakdown.get("comm"))
    if comm:
        hidden = min(max(comm - (number(breakdown.get("exposed_comm")) or 0.0), 0.0), b_width)
        if hidden > 0:
            ax.barh(y - 0.38, hidden, left=b_end - hidden, height=0.12, color=COLOURS["hidden_comm"])
            drawn.add("hidden_comm")
    return drawn


def plot_breakdown(plt, result, path):
    rows = [r for r in (result.get("modes") or []) if isinstance(r, dict)]
    if not rows:
        note("no modes in the result: breakdown.png not drawn")
        return None
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.55 * len(rows)))
    used = []  # keys in first-drawn order, for the legend
    right = 0.0
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i  # first row at the top
        median = median_ms(row)
        breakdown = row.get("breakdown_ms") or {}
        segments = stack_segments(breakdown, median)
        torch_row = is_torch(row)
        for key, start, width in segments:
            ax.barh(y, width, left=start, height=0.6, color=COLOURS.get(key, "#dddddd"),
                    edgecolor="white", linewidth=0.5,
                    hatch="//" if torch_row else None, alpha=0.5 if torch_row else 1.0)
            used.append(key)
        used.extend(sorted(draw_overlays(ax, y, breakdown, segments)))
        end = max([s + w for _, s, w in segments] + [median or 0.0])
        spread = row.get("step_ms") or {}
        p10, p90 = number(spread.get("p10")), number(spread.get("p90"))
        if median is not None and p10 is not None and p90 is not None:
            ax.errorbar(median, y, xerr=[[median - p10], [p90 - median]], fmt="|", color="black",
                        markersize=10, capsize=2, linewidth=0.8)
            end = max(end, p90)
        text = "%.1f ms" % median if median is not None else "no time"
        ax.text(end, y, "  " + text, va="center", fontsize=8)
        right = max(right, end)

    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([row_label(r) + (" (PyTorch)" if is_torch(r) else "") for r in reversed(rows)])
    ax.set_xlim(0, right * 1.15 if right > 0 else 1)
    ax.set_xlabel("time per training step (ms); bar labels and | marks: median step, whiskers p10-p90")
    run = result.get("run") or {}
    ax.set_title("Where a step's time goes: %s, global batch %s, %s device(s) on %s"
                 % (run.get("model", "?"), run.get("global_batch", "?"), run.get("devices", "?"), run.get("device", "?")))
    names = {"exposed_comm": "exposed comm (after backward)", "hidden_comm": "comm hidden behind backward (thin)",
             "reduce": "reduce, inside backward (hatched)", "other": "unattributed", "total": "total (no breakdown)"}
    handles = []
    for key in dict.fromkeys(used):  # unique, in order
        if key == "reduce":
            handles.append(Patch(facecolor="none", edgecolor=COLOURS["reduce"], hatch="xxx", label=names[key]))
        else:
            handles.append(Patch(color=COLOURS.get(key, "#dddddd"), label=names.get(key, key)))
    if any(is_torch(r) for r in rows):
        handles.append(Patch(facecolor="#dddddd", hatch="//", alpha=0.5, label="PyTorch rows"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.text(0.01, 0.01, "Only segments that add up to the step are stacked: DDP's comm overlaps backward, "
             "so only its exposed part is a segment; DP's reduce runs inside backward.", fontsize=7, color="#555555")
    return save(plt, fig, path)


# ---------------------------------------------------------------------------------------------
# scaling.png: the alpha-beta model's prediction, with the measured points
# ---------------------------------------------------------------------------------------------

def measured_points(result):
    """[(mode, devices, median ms)] of the rows that the model's curves describe."""
    points = []
    for row in result.get("modes") or []:
        mode, devices, median = row.get("mode"), number(row.get("devices")), median_ms(row)
        if devices is None or median is None:
            continue
        if mode == "dp" or (mode == "ddp-bucketed" and number(row.get("bucket_cap_mb")) == DEFAULT_CAP_MB):
            points.append((mode, devices, median))
    return points


def plot_scaling(plt, result, path):
    model = result.get("model") or {}
    curves = [c for c in (model.get("curves") or []) if isinstance(c, dict) and c.get("devices")]
    if not curves:
        note("no model curves in the result: scaling.png not drawn")
        return None
    fig, ax = plt.subplots(figsize=(10, 6))
    colours = plt.get_cmap("tab10").colors
    for i, curve in enumerate(curves):
        colour = colours[i % len(colours)]
        devices = [number(d) for d in curve["devices"]]
        for key, style, kind in (("dp_ms", "--", "DP"), ("ddp_ms", "-", "DDP")):
            # A null (a device count the model does not cover) becomes NaN: a gap in the line.
            values = [number(v) for v in (curve.get(key) or [])]
            xs = [d for d, v in zip(devices, values) if d is not None]
            ys = [v if v is not None else float("nan") for d, v in zip(devices, values) if d is not None]
            if any(not math.isnan(v) for v in ys):
                ax.plot(xs, ys, style, color=colour, label="%s %s" % (curve.get("link", "?"), kind))
    markers = {"dp": ("s", "measured DP"), "ddp-bucketed": ("o", "measured DDP (%d MB buckets)" % DEFAULT_CAP_MB)}
    for mode, (marker, label) in markers.items():
        points = [(d, ms) for m, d, ms in measured_points(result) if m == mode]
        if points:
            ax.plot([d for d, _ in points], [ms for _, ms in points], marker, color="black",
                    markerfacecolor="none" if mode == "dp" else "black", markersize=8, linestyle="none",
                    label=label + " (this machine)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # the curves span orders of magnitude between 2 and 1024 devices
    from matplotlib.ticker import FuncFormatter  # plain numbers ("20"), not "2 x 10^1"
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ticks = [2 ** k for k in range(1, 11)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])  # "64", not "2^6"
    ax.set_xlim(1.8, 1150)  # a little room, so the measured markers at 2 devices are not cut in half
    ax.set_xlabel("devices")
    ax.set_ylabel("predicted time per training step (ms)")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title("DP (dashed) vs DDP (solid) step time: alpha-beta MODEL, not measurements\n"
                 "(only the black markers are measured)", fontsize=11)
    cal = model.get("calibration") or {}
    if cal:
        def g(key):  # 3 significant digits, or "?" when the key is missing
            v = number(cal.get(key))
            return "?" if v is None else "%.3g" % v
        fig.text(0.01, 0.01, "calibrated (%s): compute %s ms, optimizer %s ms per device at batch %s, %.2f MB of "
                 "gradients; all-reduce alpha %s us, beta %s GB/s. Extrapolation: weak scaling, the per-device "
                 "batch held fixed." % (cal.get("compute_from", "single"), g("compute_ms"), g("optimizer_ms"),
                                        cal.get("measured_batch", "?"), (number(cal.get("param_bytes")) or 0) / 1e6,
                                        g("alpha_us"), g("beta_GBps")),
                 fontsize=7, color="#555555")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return save(plt, fig, path)


# ---------------------------------------------------------------------------------------------
# buckets.png: the bucket-size sweep
# ---------------------------------------------------------------------------------------------

def plot_buckets(plt, result, path):
    rows = [r for r in (result.get("modes") or []) if r.get("mode") == "ddp-bucketed"
            and number(r.get("bucket_cap_mb")) and median_ms(r) is not None]
    if not rows:
        note("no ddp-bucketed rows in the result: buckets.png not drawn")
        return None
    from matplotlib.ticker import NullFormatter

    rows.sort(key=lambda r: number(r["bucket_cap_mb"]))
    caps = [number(r["bucket_cap_mb"]) for r in rows]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    medians = [median_ms(r) for r in rows]
    low = [m - (number((r["step_ms"]).get("p10")) or m) for r, m in zip(rows, medians)]
    high = [(number((r["step_ms"]).get("p90")) or m) - m for r, m in zip(rows, medians)]
    ax.errorbar(caps, medians, yerr=[low, high], fmt="o-", color="black", capsize=3,
                label="ddp-bucketed step (median, p10-p90)")
    exposed = [(c, number((r.get("breakdown_ms") or {}).get("exposed_comm"))) for c, r in zip(caps, rows)]
    exposed = [(c, e) for c, e in exposed if e is not None]
    if exposed:
        ax.plot([c for c, _ in exposed], [e for _, e in exposed], "s--", color=COLOURS["exposed_comm"],
                label="exposed communication")
    # The modes without buckets, as horizontal references; PyTorch's DDP at its own caps as crosses.
    styles = {"ddp-naive": ":", "ddp-flat": "-.", "ddp-overlap": "--"}
    colours = {"ddp-naive": "#9467bd", "ddp-flat": "#8c564b", "ddp-overlap": "#1f77b4"}
    for row in result.get("modes") or []:
        mode, median = row.get("mode"), median_ms(row)
        if mode in styles and median is not None:
            ax.axhline(median, linestyle=styles[mode], color=colours[mode], linewidth=1,
                       label="%s (%.1f ms)" % (mode, median))
        elif mode == "torch-ddp" and median is not None and number(row.get("bucket_cap_mb")):
            ax.plot(number(row["bucket_cap_mb"]), median, "x", color="#7f7f7f", markersize=9,
                    label="torch-ddp %g MB (%.1f ms)" % (number(row["bucket_cap_mb"]), median))
    ax.set_xscale("log")
    ax.set_xticks(caps)
    ax.set_xticklabels(["%g" % c for c in caps])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(bottom=0)
    ax.set_xlabel("bucket_cap_mb (MB per all-reduce bucket)")
    ax.set_ylabel("ms per training step")
    ax.grid(True, alpha=0.25)
    run = result.get("run") or {}
    ax.set_title("DDP bucket size: small buckets start communicating early, big ones pay less latency\n"
                 "%s, %s device(s), backend %s" % (run.get("model", "?"), run.get("devices", "?"), run.get("backend", "?")),
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return save(plt, fig, path)


# ---------------------------------------------------------------------------------------------
# <trace>.png: a Chrome trace as a timeline
# ---------------------------------------------------------------------------------------------

# An event's family is the first entry whose words occur in its lower-cased name, so the longer,
# more specific names ("all-reduce", "reduce-scatter") come before the words they contain.
FAMILIES = [
    ("wait", ("wait", "barrier")),  # first: "wait for all-reduce" is waiting, not communicating
    ("all-reduce", ("all-reduce", "allreduce", "all_reduce", "reduce-scatter", "reduce_scatter",
                    "all-gather", "all_gather", "allgather", "comm")),
    ("forward", ("forward", "apply", "loss")),  # parallel_apply runs the replicas' forward passes
    ("backward", ("backward",)),
    ("optimizer", ("optim", "sgd", "adam", "update")),
    ("scatter", ("scatter",)),
    ("replicate", ("replicate", "broadcast")),
    ("gather", ("gather",)),
    ("reduce", ("reduce",)),
    ("copy", ("copy", "memcpy", "h2d", "d2h")),
    ("step", ("step",)),  # an event around a whole step: drawn pale, behind its parts
]


def family_of(name):
    lowered = str(name).lower()
    for family, words in FAMILIES:
        if any(w in lowered for w in words):
            return family
    return "other"


def sort_key(value):
    """pids and tids are usually numbers but may be strings; numbers first, in numeric order."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def read_trace(data):
    """(lane names by (pid, tid), complete events, instant events) of a Chrome trace."""
    events = data.get("traceEvents", []) if isinstance(data, dict) else data  # both forms are allowed
    processes, threads, complete, instants = {}, {}, [], []
    for e in events or []:
        if not isinstance(e, dict):
            continue
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        name = (e.get("args") or {}).get("name")
        if ph == "M" and e.get("name") == "process_name" and name is not None:
            processes[pid] = str(name)
        elif ph == "M" and e.get("name") == "thread_name" and name is not None:
            threads[(pid, tid)] = str(name)
        elif ph == "X" and number(e.get("ts")) is not None and number(e.get("dur")) is not None:
            complete.append(e)
        elif ph in ("i", "I") and number(e.get("ts")) is not None:
            instants.append(e)
    lanes = sorted({(e.get("pid", 0), e.get("tid", 0)) for e in complete + instants},
                   key=lambda lane: (sort_key(lane[0]), sort_key(lane[1])))
    names = {lane: "%s / %s" % (processes.get(lane[0], "pid %s" % lane[0]), threads.get(lane, "tid %s" % lane[1]))
             for lane in lanes}
    return lanes, names, complete, instants


def nest_depths(events):
    """Depth of each event in its lane: 0 for outermost, 1 for an event inside another, ...

    Chrome traces nest complete events (a "step" around its "forward" and "backward"); stacking the
    nested ones in sub-rows keeps the outer box from hiding the inner ones, as Perfetto does.
    """
    depths, open_ends = {}, []
    for e in sorted(events, key=lambda e: (number(e["ts"]), -number(e["dur"]))):
        start = number(e["ts"])
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        depths[id(e)] = len(open_ends)
        open_ends.append(start + number(e["dur"]))
    return depths


def plot_trace(plt, trace_path, path):
    lanes, names, complete, instants = read_trace(load_json(trace_path))
    if not complete:
        note("%s has no complete (\"ph\": \"X\") events: %s not drawn" % (trace_path, os.path.basename(path)))
        return None
    from matplotlib.patches import Patch

    t0 = min(number(e["ts"]) for e in complete + instants)  # the time axis starts at the first event
    span_ms = max(number(e["ts"]) + number(e["dur"]) for e in complete) / 1e3 - t0 / 1e3
    fig, ax = plt.subplots(figsize=(12, 1.4 + 0.7 * len(lanes)))
    families = []
    for row, lane in enumerate(lanes):  # lane `row` occupies y in [row, row + 0.8]; row 0 at the top
        events = [e for e in complete if (e.get("pid", 0), e.get("tid", 0)) == lane]
        depths = nest_depths(events)
        levels = max(depths.values(), default=0) + 1
        height = 0.8 / levels
        boxes = {}  # (depth, family) -> [(start, width)]: one broken_barh call each, not one per event
        for e in events:
            family = family_of(e.get("name", ""))
            boxes.setdefault((depths[id(e)], family), []).append(
                ((number(e["ts"]) - t0) / 1e3, number(e["dur"]) / 1e3))
            families.append(family)
            # Name the boxes wide enough to hold a label: the picture should read without a legend.
            if number(e["dur"]) / 1e3 > 0.06 * span_ms:
                ax.text((number(e["ts"]) - t0) / 1e3 + number(e["dur"]) / 2e3, row + (depths[id(e)] + 0.5) * height,
                        str(e.get("name", "")), ha="center", va="center", fontsize=6, clip_on=True)
        for (depth, family), spans in boxes.items():
            ax.broken_barh(spans, (row + depth * height, height * 0.92), facecolors=COLOURS.get(family, COLOURS["other"]),
                           edgecolor="white", linewidth=0.3)
        ticks = [(number(e["ts"]) - t0) / 1e3 for e in instants if (e.get("pid", 0), e.get("tid", 0)) == lane]
        if ticks:
            ax.vlines(ticks, row - 0.12, row, color="black", linewidth=0.8)
    ax.set_ylim(len(lanes), -0.3)  # inverted: the first lane on top, as in Perfetto
    ax.set_yticks([row + 0.4 for row in range(len(lanes))])
    ax.set_yticklabels([names[lane] for lane in lanes], fontsize=8)
    ax.set_xlim(0, span_ms * 1.01 if span_ms > 0 else 1)
    ax.set_xlabel("time since the first event (ms)")
    ax.grid(True, axis="x", alpha=0.25)
    ax.set_title("Timeline of %s (a Chrome trace: open it in ui.perfetto.dev to explore)"
                 % os.path.basename(trace_path), fontsize=10)
    handles = [Patch(color=COLOURS.get(f, COLOURS["other"]), label=f) for f in dict.fromkeys(families)]
    if instants:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color="black", linewidth=0.8, label="instant event (tick)"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return save(plt, fig, path)


# ---------------------------------------------------------------------------------------------

def save(plt, fig, path):
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(path)
    return path


def check(written):
    """--check: every figure reported as written must exist and hold something."""
    bad = [p for p in written if not os.path.isfile(p) or os.path.getsize(p) == 0]
    if bad or not written:
        print("plot.py --check: FAILED, %s" % ("missing or empty: " + ", ".join(bad) if bad else "no figure written"))
        return 1
    print("plot.py --check: %d figure(s) written, none empty" % len(written))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="RESULT.json written by dp_vs_ddp --json")
    parser.add_argument("--trace", action="append", default=[], help="a Chrome trace to draw (repeatable)")
    parser.add_argument("--out", help="folder for the PNG files (default: the folder of RESULT.json)")
    parser.add_argument("--check", action="store_true", help="verify that every figure written exists and is not empty")
    args = parser.parse_args()

    plt = import_pyplot()  # before reading anything: without matplotlib there is nothing to do
    result = load_json(args.result)
    if not isinstance(result, dict):
        print("plot.py: %s is not a dp_vs_ddp result (no JSON object)" % args.result, file=sys.stderr)
        return 2
    out = args.out or os.path.dirname(os.path.abspath(args.result))
    os.makedirs(out, exist_ok=True)

    written = [plot_breakdown(plt, result, os.path.join(out, "breakdown.png")),
               plot_scaling(plt, result, os.path.join(out, "scaling.png")),
               plot_buckets(plt, result, os.path.join(out, "buckets.png"))]
    for trace in args.trace:
        base = os.path.basename(trace)
        stem = base[:-len(".json")] if base.endswith(".json") else base
        written.append(plot_trace(plt, trace, os.path.join(out, stem + ".png")))
    written = [p for p in written if p]
    return check(written) if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
