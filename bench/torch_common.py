"""Helpers shared by the PyTorch reference scripts of the benchmarks (bench/torch_*.py)."""
import os


def blas_libraries():
    """Names of the BLAS libraries mapped into this process (Linux), e.g. libopenblasp-r0.3.21.so."""
    names = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                base = os.path.basename(path)
                if "blas" in base or "mkl" in base:
                    names.add(os.path.basename(os.path.dirname(path)) + "/" + base)
    except OSError:
        pass
    return ",".join(sorted(names)) or "unknown"
