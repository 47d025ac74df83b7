"""One BLAS thread while the reference runs.

The reference's matrix products are matrix-vector products (a decode step)
or products with 32 or 64 inner terms (a block's integer sums over a
sequence): memory-bound, so a second BLAS thread gains little even on an
idle machine.  On a shared one it costs a lot: OpenBLAS's threads spin
while they wait for each other, and with other work on the cores a 1536x576
matrix-vector product measured 20x slower with two threads than with one.
`one_blas_thread()` sets OpenBLAS (numpy's bundled scipy-openblas, or a
system OpenBLAS) to one thread for a block and restores the count after; it
does nothing when no OpenBLAS is loaded.

Results do not depend on the thread count: the quantized path's products
are exact integers (exact.block_sums), and the float paths' (the step's
float32 matrix-vector products, the sequence's float64 matrix products)
came out bit-identical with one and two threads: OpenBLAS divides their
outputs between threads, not one output's sum."""
from __future__ import annotations

import contextlib
import ctypes
import functools
from pathlib import Path
from typing import Iterator

import numpy  # noqa: F401  (its BLAS must be loaded before /proc/self/maps is read)

_NAMES = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
          ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
          ("openblas_get_num_threads", "openblas_set_num_threads"))


@functools.lru_cache(maxsize=1)
def _openblas() -> tuple | None:
    """(get, set) of the OpenBLAS this process has loaded (numpy's), or None."""
    maps = Path("/proc/self/maps")
    try:
        libs = sorted({line.split()[-1] for line in maps.read_text().splitlines()
                       if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    except OSError:
        return None
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in _NAMES:
            if hasattr(lib, get) and hasattr(lib, set_):
                g, s = getattr(lib, get), getattr(lib, set_)
                g.restype, g.argtypes = ctypes.c_int, []
                s.restype, s.argtypes = None, [ctypes.c_int]
                return g, s
    return None


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    blas = _openblas()
    if blas is None:
        yield
        return
    get, set_ = blas
    before = get()
    if before == 1:
        yield
        return
    set_(1)
    try:
        yield
    finally:
        set_(before)
