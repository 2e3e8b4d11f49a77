#!/usr/bin/env python3
"""tools/check_layers.py: the `arch` test -- every #include in the tree goes down a layer, never up,
and never into another layer's private headers.

    python3 tools/check_layers.py [SOURCE_DIR]   check the tree (default: the one this file is in)
    python3 tools/check_layers.py --self-test    plant each kind of violation in a scratch tree and
                                                 check that every one is reported

The layers, bottom up, and what each may include (besides itself) are the table LAYERS below; it is
the picture docs/README.md draws. A header is private to its layer when PRIVATE says so: only that
layer (and the tests) may include it. Exits 1 and names file, line and the rule on any violation.
"""
import os
import re
import sys
import tempfile

# Layer of a file: the first prefix that matches its path (so core/base/ wins over core/).
LAYER_OF_PATH = [
    ("core/base/", "base"),
    ("kernels/", "kernels"),
    ("core/", "core"),
    ("nn/", "nn"),
    ("parallel/", "parallel"),
    ("tools/", "tools"),
    ("bench/", "programs"),
    ("examples/", "programs"),
    ("docs/", "programs"),
    ("tests/", "tests"),
]

# layer -> the layers its files may include. Arrows point down only; a layer above core reaches the
# kernels through core's public API, never directly.
LAYERS = {
    "base": {"base"},
    "kernels": {"base", "kernels"},
    "core": {"base", "kernels", "core"},
    "nn": {"base", "core", "nn"},
    "parallel": {"base", "core", "nn", "parallel"},
    "tools": {"tools"},  # ringrun does not link the library: a launcher must start when it is broken
    # Programs use the public headers: kernels/backend.h is public (a new backend implements it),
    # kernels/cpu/ and kernels/cuda/ are not (PRIVATE).
    "programs": {"base", "kernels", "core", "nn", "parallel", "tools", "programs"},
    "tests": {"base", "kernels", "core", "nn", "parallel", "tools", "programs", "tests"},
}

# Private headers: (path prefix, the layers that may include it besides tests).
PRIVATE = [
    ("kernels/cpu/", {"kernels"}),
    ("kernels/cuda/", {"kernels"}),
    ("core/ops/op_utils.h", {"core"}),
    ("core/base/cuda_check.h", {"base", "kernels", "parallel"}),  # needs CUDA's headers; not installed
    ("parallel/store_protocol.h", {"parallel"}),  # TCPStore's wire format: parallel/store.h is the API
    ("parallel/store_server.h", {"parallel"}),
    ("parallel/socket.h", {"parallel"}),  # TCP with deadlines, for the store, rendezvous and the ring
    ("parallel/collective_args.h", {"parallel"}),  # the backends' shared argument checks
    ("parallel/collective_queue.h", {"parallel"}),  # the backends' shared communication thread
    ("parallel/ring/", {"parallel"}),  # the ring backend: it registers itself; init_process_group is the API
    ("parallel/nccl/", {"parallel"}),  # the NCCL backend, likewise
    ("parallel/gloo/", {"parallel"}),  # the Gloo backend, likewise
]

# Programs that measure one kernel itself and so include its private header, each with the reason.
EXCEPTIONS = {
    "bench/bench_gemm_cuda.cpp": "kernel microbenchmark: races ringgrad's GEMM kernel against cuBLAS",
    "bench/bench_gemm_cpu.cpp": "kernel microbenchmark: times ringgrad's packed GEMM at each vector level",
    "bench/micro_cuda.cpp": "kernel microbenchmark: times single CUDA kernels with Google Benchmark",
}

SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SKIP_DIRS = {".git", "build"}  # plus any build*/ directory


def layer_of(path):
    for prefix, layer in LAYER_OF_PATH:
        if path.startswith(prefix):
            return layer
    return None


def private_rule(target):
    for prefix, allowed in PRIVATE:
        if target == prefix or (prefix.endswith("/") and target.startswith(prefix)):
            return prefix, allowed
    return None


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def project_header(root, spelled):
    """The tree path an include names, or None for a system or third-party header."""
    name = spelled[len("ringgrad/"):] if spelled.startswith("ringgrad/") else spelled
    if layer_of(name) is not None and os.path.isfile(os.path.join(root, name)):
        return name
    return None


def violations(root):
    found = []
    for path in source_files(root):
        layer = layer_of(path)
        if layer is None or path in EXCEPTIONS:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = project_header(root, m.group(1))
                if target is None:
                    continue
                to = layer_of(target)
                where = f"{path}:{number}: includes {target}"
                if to not in LAYERS[layer]:
                    found.append(f"{where}: {layer} may include only {', '.join(sorted(LAYERS[layer]))}, "
                                 f"not {to}")
                    continue
                rule = private_rule(target)
                if rule and layer != "tests" and layer not in rule[1]:
                    found.append(f"{where}: {rule[0]} is private to {', '.join(sorted(rule[1]))}")
    return found


def check(root):
    found = violations(root)
    for v in found:
        print(f"check_layers: {v}")
    files = sum(1 for _ in source_files(root))
    if found:
        print(f"check_layers: {len(found)} include(s) break the layering (the table is tools/check_layers.py)")
        return 1
    print(f"check_layers: {files} files, every include goes down a layer or stays in its own")
    return 0


def self_test():
    """Plants one violation of each kind (and one allowed include of each kind) and checks the report."""
    planted = {
        "core/base/dtype.h": '#include "core/tensor.h"\n',                # base -> core: up
        "kernels/cpu/unary.cpp": '#include "core/tensor.h"\n',            # kernels -> core: up
        "core/tensor.h": '#include "nn/module.h"\n#include "core/base/dtype.h"\n',  # core -> nn: up
        "nn/module.h": '#include "kernels/backend.h"\n',                  # nn -> kernels: skips core
        "nn/optim/sgd.cpp": '#include "core/ops/op_utils.h"\n',           # private to core
        "parallel/ddp.cpp": '#include <ringgrad/kernels/cuda/runtime.h>\n#include "nn/module.h"\n',
        "tools/launch/ringrun.cpp": '#include "core/tensor.h"\n',                 # the launcher links nothing
        "bench/bench_x.cpp": '#include "kernels/cpu/gemm.h"\n#include "kernels/backend.h"\n',
        "tests/test_x.cpp": '#include "kernels/cpu/gemm.h"\n',            # tests may include anything
        "kernels/backend.h": "", "kernels/cuda/runtime.h": "", "kernels/cpu/gemm.h": "",
        "core/ops/op_utils.h": "",
    }
    expected = [
        "core/base/dtype.h:1: includes core/tensor.h: base may",
        "kernels/cpu/unary.cpp:1: includes core/tensor.h: kernels may",
        "core/tensor.h:1: includes nn/module.h: core may",
        "nn/module.h:1: includes kernels/backend.h: nn may",
        "nn/optim/sgd.cpp:1: includes core/ops/op_utils.h: core/ops/op_utils.h is private",
        "parallel/ddp.cpp:1: includes kernels/cuda/runtime.h: parallel may",
        "tools/launch/ringrun.cpp:1: includes core/tensor.h: tools may",
        "bench/bench_x.cpp:1: includes kernels/cpu/gemm.h: kernels/cpu/ is private",
    ]
    with tempfile.TemporaryDirectory() as root:
        for path, text in planted.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found = violations(root)
    missing = [e for e in expected if not any(v.startswith(e) for v in found)]
    extra = [v for v in found if not any(v.startswith(e) for e in expected)]
    for m in missing:
        print(f"check_layers --self-test: not reported: {m}")
    for x in extra:
        print(f"check_layers --self-test: reported but allowed: {x}")
    if missing or extra:
        return 1
    print(f"check_layers --self-test: all {len(expected)} planted violations reported, no allowed include flagged")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--self-test"]:
        sys.exit(self_test())
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(check(args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
