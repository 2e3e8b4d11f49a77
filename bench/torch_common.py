"""Helpers shared by the PyTorch reference scripts of the benchmarks (bench/torch_*.py).

A comparison is only as honest as its peer. PyTorch's products run on whatever BLAS the system gives
it; on Debian that is OpenBLAS, built with DYNAMIC_ARCH: at load time it picks one of its kernel sets
("cores") for the CPU it finds. OpenBLAS 0.3.21 does not know every newer CPU, and on some it falls
back to its generic `Prescott` (SSE3) kernels -- a 1024^3 SGEMM then runs at about a quarter of the
speed the same machine reaches with `OPENBLAS_CORETYPE=SkylakeX`. A ratio measured against that
peer says nothing about ringgrad.

So every reference script calls use_best_blas_core() before it imports torch. It probes, each in a
fresh interpreter, OpenBLAS's own choice and every core the CPU's flags allow; times a single-thread
SGEMM with each (OpenBLAS's choice and the fastest twice, each keeping its faster round); checks each
result against float64; and, when OpenBLAS's choice is beaten by more
than kBetterBy, sets OPENBLAS_CORETYPE to the fastest correct core for this process (and its
children). blas_report() then says which core ran and why, in "key value" lines the C++ benchmarks
copy into their table headers. A core the user forced with OPENBLAS_CORETYPE is kept, but when it is
a slower or wrong one the report carries a loud warning.

Run as a script, this file is the probe: `torch_common.py --probe [CORE]` prints one JSON line.
"""
import json
import os
import subprocess
import sys

# OpenBLAS cores for x86-64, fastest first, with the /proc/cpuinfo flags each one's kernels need.
# OpenBLAS maps a core it was built without to an older one; the probe reads back which one loaded.
CANDIDATE_CORES = [
    ("SapphireRapids", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_bf16"}),
    ("Cooperlake", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}),
    ("SkylakeX", {"avx512f", "avx512cd", "avx512bw", "avx512vl", "avx512dq"}),
    ("Haswell", {"avx2", "fma"}),
    ("Zen", {"avx2", "fma", "AuthenticAMD"}),
    ("Sandybridge", {"avx"}),
    ("Nehalem", {"sse4_2"}),
    ("Prescott", {"pni"}),
]
GENERIC_CORES = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai", "Coppermine", "Northwood"}
kBetterBy = 1.15  # a core must be this much faster than OpenBLAS's own choice to replace it
kProbeSize = 768  # the timed SGEMM is kProbeSize^3: about 10 ms on one core at 100 GFLOP/s
kMaxError = 1e-4  # max |C32 - C64| / max |C64| a float32 product may show on these sizes

_choice = {}  # what use_best_blas_core() found, for blas_report()


def import_torch(threads):
    """Imports torch for a reference script the C++ side reads: sets `threads` threads and prints the
    "torch_version", "threads" and "python" lines. When torch cannot be imported, prints an
    "error ..." line (the benchmark shows it as the reason) and returns None."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        print("error cannot import torch with %s: %s" % (sys.executable, str(e).splitlines()[0]))
        return None
    torch.set_num_threads(threads)
    print("torch_version", torch.__version__)
    print("threads", torch.get_num_threads())
    print("python", sys.executable)
    sys.stdout.flush()
    return torch


def time_per_call(loop, reps, min_time):
    """loop(n) runs n calls; returns ns per call of each of `reps` timed loops.

    Measured as bench/bench_util.h measures ringgrad: an untimed warm-up grows the iteration count
    until one loop takes at least `min_time` seconds, then `reps` loops are timed, with the garbage
    collector off (as timeit does)."""
    import gc
    import time

    n = 1
    while True:  # warm-up and calibration, not timed
        start = time.perf_counter()
        loop(n)
        s = time.perf_counter() - start
        if s >= min_time:
            break
        want = int(n * 1.2 * min_time / s) if s > 0 else n * 100
        n = max(n * 2, min(n * 100, want))
    result = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            start = time.perf_counter_ns()
            loop(n)
            result.append((time.perf_counter_ns() - start) / n)
    finally:
        if gc_was_enabled:
            gc.enable()
    return result


def blas_libraries():
    """Names of the BLAS libraries mapped into this process (Linux), e.g. libopenblasp-r0.3.21.so."""
    names = set()
    for path in _mapped_blas_paths():
        names.add(os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path))
    return ",".join(sorted(names)) or "unknown"


def _mapped_blas_paths():
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                base = os.path.basename(path)
                if "blas" in base or "mkl" in base:
                    paths.add(path)
    except OSError:
        pass
    return paths


def openblas_core():
    """The core OpenBLAS loaded in this process (openblas_get_corename), or None if it is not OpenBLAS."""
    import ctypes

    for path in sorted(_mapped_blas_paths()):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return None


def cpu_flags():
    """The first CPU's flags in /proc/cpuinfo, plus its vendor id (GenuineIntel, AuthenticAMD)."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    flags.add(line.split(":", 1)[1].strip())
                if line.startswith("flags"):
                    return flags | set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return flags


def _probe_here():
    """In this process: the loaded core, its float32 error against float64, and its SGEMM speed."""
    import time

    import torch

    torch.set_num_threads(1)  # the core's own speed, not the machine's load
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for m, k, n, transpose in [(257, 263, 129, False), (129, 301, 257, True), (kProbeSize, kProbeSize, kProbeSize, False)]:
        a = torch.randn(m, k, generator=gen)
        b = torch.randn(n, k, generator=gen) if transpose else torch.randn(k, n, generator=gen)
        got = torch.mm(a, b.t()) if transpose else torch.mm(a, b)
        a64, b64 = a.double(), b.double()
        want = torch.mm(a64, b64.t()) if transpose else torch.mm(a64, b64)
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        worst = max(worst, err if err == err else float("inf"))  # NaN counts as wrong
    a = torch.randn(kProbeSize, kProbeSize, generator=gen)
    b = torch.randn(kProbeSize, kProbeSize, generator=gen)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    best = sorted(times)[1]  # the second fastest: robust to one lucky and to many unlucky runs
    return {"core": openblas_core(), "error": worst, "gflops": 2.0 * kProbeSize ** 3 / best / 1e9}


def _probe(core):
    """Runs the probe in a fresh interpreter with OPENBLAS_CORETYPE=core (None: OpenBLAS's own choice)."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    cmd = [sys.executable, os.path.abspath(__file__), "--probe"]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return None


def use_best_blas_core():
    """Makes this process's OpenBLAS run its fastest correct core. Call before `import torch`."""
    if _choice or any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        return
    inherited = os.environ.get("RINGGRAD_BLAS_CHOICE")  # a parent script probed already (a spawned rank)
    if inherited:
        try:
            _choice.update(json.loads(inherited))
            return
        except ValueError:
            pass
    _choose()
    os.environ["RINGGRAD_BLAS_CHOICE"] = json.dumps(_choice)


def _choose():
    forced = os.environ.get("OPENBLAS_CORETYPE")
    default = _probe(forced)
    if default is None or default.get("core") is None:  # no torch, or a BLAS other than OpenBLAS: nothing to pick
        _choice["note"] = "not probed (torch did not load, or its BLAS is not OpenBLAS)"
        return
    flags = cpu_flags()
    requests = [forced] + [name for name, needs in CANDIDATE_CORES if needs <= flags and name != forced]
    tried = {}  # loaded core -> its best probe: fastest round, worst error

    def record(result):
        if not result or not result.get("core"):
            return None
        known = tried.get(result["core"])  # a core OpenBLAS lacks comes back as an older one
        if known is None:
            tried[result["core"]] = dict(result)
        else:
            known["error"] = max(known["error"], result["error"])
            known["gflops"] = max(known["gflops"], result["gflops"])
        return result["core"]

    own = record(default)  # the core OpenBLAS (or the user) chose
    loaded = {forced: own}
    for request in requests[1:]:
        loaded[request] = record(_probe(request))
    # A second round for the two cores the decision is between, keeping each one's faster round: on a
    # shared machine one probe can land in a busy second, and a single round then chose by a
    # neighbour's load (Haswell 65 against Zen 74 GFLOP/s, then 81 against 62, on one machine).
    correct = [c for c in tried.values() if c["error"] <= kMaxError]
    if correct:
        fastest = max(correct, key=lambda c: c["gflops"])["core"]
        for request in {r for r, core in loaded.items() if core in (own, fastest)}:
            record(_probe(request))
    _choice.update(decide(tried[own], list(tried.values()), forced))
    if _choice.get("use"):
        os.environ["OPENBLAS_CORETYPE"] = _choice["use"]  # read by OpenBLAS when torch loads it


def decide(default, tried, forced):
    """The choice, from probe results ({"core", "error", "gflops"}): OpenBLAS's own pick (or the forced
    one) and every core tried. Returns {"use": core to set or None, "note", "probed", "warning"}."""
    correct = [r for r in tried if r["error"] <= kMaxError]
    best = max(correct, key=lambda r: r["gflops"]) if correct else None
    listed = ", ".join("%s %.0f%s" % (r["core"], r["gflops"], "" if r["error"] <= kMaxError else " (wrong)")
                       for r in sorted(tried, key=lambda r: -r["gflops"]))
    out = {"use": None, "probed": "1-thread %d^3 SGEMM GFLOP/s, checked against float64: %s" % (kProbeSize, listed)}
    default_ok = default["error"] <= kMaxError
    if best is None:
        out["warning"] = "no OpenBLAS core computed correct results; PyTorch's GEMM numbers are not trustworthy"
    elif forced:
        if not default_ok or best["gflops"] > kBetterBy * default["gflops"]:
            out["warning"] = ("OPENBLAS_CORETYPE=%s was set by you and kept, but %s is %.1fx faster%s: "
                              "ratios against PyTorch here compare against a handicapped peer"
                              % (forced, best["core"], best["gflops"] / default["gflops"],
                                 "" if default_ok else " and it is wrong"))
        else:
            out["note"] = "OPENBLAS_CORETYPE=%s was set by you; it is within %.2fx of the fastest correct core" % (
                forced, kBetterBy)
    elif default_ok and best["gflops"] <= kBetterBy * default["gflops"]:
        out["note"] = "OpenBLAS's own choice, %s, is within %.2fx of the fastest correct core" % (
            default["core"], kBetterBy)
    else:
        out["use"] = best["core"]
        why = "a generic fallback core" if default["core"] in GENERIC_CORES else "a slower core"
        out["note"] = ("OpenBLAS picked %s on its own (%s%s on this CPU); running with OPENBLAS_CORETYPE=%s, "
                       "the fastest core with correct results (%.1fx faster)"
                       % (default["core"], why, "" if default_ok else ", with wrong results", best["core"],
                          best["gflops"] / default["gflops"]))
    return out


def blas_report():
    """'key value' lines on the BLAS of this process, for the C++ benchmarks' table headers. Call after
    importing torch."""
    lines = ["blas " + blas_libraries()]
    core = openblas_core()
    if core:
        lines.append("blas_core %s%s" % (core, " (OPENBLAS_CORETYPE=%s)" % os.environ["OPENBLAS_CORETYPE"]
                                          if os.environ.get("OPENBLAS_CORETYPE") else " (OpenBLAS's own choice)"))
    if _choice.get("note"):
        lines.append("blas_core_choice " + _choice["note"])
    if _choice.get("probed"):
        lines.append("blas_core_probe " + _choice["probed"])
    if _choice.get("warning"):
        lines.append("blas_warning " + _choice["warning"])
    if core and core in GENERIC_CORES and not _choice.get("warning") and not _choice.get("probed"):
        lines.append("blas_warning running OpenBLAS's generic %s core, not probed for a better one" % core)
    return lines


if __name__ == "__main__" and sys.argv[1:2] == ["--probe"]:
    print(json.dumps(_probe_here()))
