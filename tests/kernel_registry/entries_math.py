"""Registry entries of firmware/tllm_math.h: the static inline helpers every
kernel file shares (internal to the runtime, so not tllm_-prefixed)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact

from . import inputs as I
from .spec import Case, In, InOut, Kernel, Scalar

F32 = np.float32
H = "tllm_math.h"


def _halves(r):
    """Exact halves (the ties), their neighbours one ulp away, and the int32-safe extremes."""
    h = np.arange(-2000, 2000, dtype=F32) + F32(0.5)
    near = np.concatenate([np.nextafter(h, F32(np.inf)), np.nextafter(h, F32(-np.inf))]).astype(F32)
    return dict(v=np.concatenate([h, near, I.normal(r, 20000, 300.0), F32([0.0, -0.0, 2.0 ** 30, -2.0 ** 31,
                                                                           8388607.5, -8388607.5])]).astype(F32))


ROUND_HALF_AWAY = Kernel("round_half_away", H, (Scalar("v", "float"),), ("v",),
                         lambda v: {"return": exact.round_half_away(v["v"]).astype(np.int32)},
                         (Case("ties-and-normal", _halves, seed=1),), returns="int32_t", elementwise=True)

MLA = Kernel("mla", H, (Scalar("acc", "float"), Scalar("a", "float"), Scalar("b", "float")), ("acc", "a", "b"),
             # two roundings (the multiply, then the add): VMLA.F32 on the M7, never a fused FMA
             lambda v: {"return": (np.asarray(v["acc"], F32) + np.asarray(v["a"], F32) * np.asarray(v["b"], F32))
                        .astype(F32)},
             (Case("normal", lambda r: dict(acc=I.normal(r, 20000, 10.0), a=I.normal(r, 20000, 3.0),
                                            b=I.normal(r, 20000, 3.0)), seed=2),
              # a*b - acc cancels almost exactly: where a fused multiply-add would differ
              Case("cancellation", lambda r: (lambda a, b: dict(acc=-(a * b).astype(F32), a=a, b=b))(
                  (F32(1.0) + I.normal(r, 20000, 1e-3)).astype(F32), (F32(1.0) + I.normal(r, 20000, 1e-3)).astype(F32)),
                   seed=3)),
             returns="float", elementwise=True)

EXP_POLY = Kernel("exp_poly", H, (Scalar("x", "float"),), ("x",), lambda v: {"return": exact.expf(v["x"])},
                  (Case("linspace-100..100", lambda r: dict(x=np.linspace(-100, 100, 20001, dtype=F32))),
                   Case("edges", lambda r: dict(x=I.exp_edges()))),
                  returns="float", elementwise=True)


def _exp2_inputs(r):
    return dict(y=np.concatenate([
        -np.linspace(0, 70, 200_001, dtype=F32),  # the whole range and past the floor
        -r.exponential(1.0, 50_000).astype(F32),  # where softmax weights live
        F32([-0.0, 0.0, -0.5, -1.5, -2.5, -63.5, -64.0, -64.5, -1e-30, -1e30]),
    ]).astype(F32))


EXP2_NONPOS = Kernel("exp2_nonpos", H, (Scalar("y", "float"),), ("y",), lambda v: {"return": exact.exp2_nonpos(v["y"])},
                     (Case("range-and-edges", _exp2_inputs, seed=7),), returns="float", elementwise=True)


def _argmax_chunk_twin(v):
    best, best_v = int(v["best"][0]), F32(v["best_v"][0])
    for i, xi in enumerate(np.asarray(v["x"], F32)):
        if v["r0"] + i == 0 or xi > best_v:  # row 0 starts the race; later rows win only when strictly greater
            best, best_v = v["r0"] + i, xi
    return {"best": np.int32([best]), "best_v": np.array([best_v], F32)}


def _chunk_case(n, r0, best, best_v, seed, tie=False):
    def make(r):
        x = I.normal(r, n, 3.0)
        if tie:
            x[1] = x[n - 1] = F32(best_v)  # equal to the running best: it stays
        return dict(x=x, n=n, r0=r0, best=np.int32([best]), best_v=F32([best_v]))
    return Case(f"n{n}-r0_{r0}-best{best_v}{'-tie' if tie else ''}", make, seed)


ARGMAX_CHUNK = Kernel(
    "argmax_chunk", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("r0", "int32_t"),
                        InOut("best", "int32_t", "1"), InOut("best_v", "float", "1")),
    ("x", "n", "r0", "best", "best_v"), _argmax_chunk_twin,
    (_chunk_case(7, 0, 99, 1e30, 1), _chunk_case(7, 14, 3, 1.0, 2), _chunk_case(9, 8, 3, 100.0, 3, tie=True),
     _chunk_case(1, 0, 5, -1e30, 4), _chunk_case(16, 32, 0, -1e30, 5)))


def _rms_inverse_twin(v):
    x = np.asarray(v["x"], F32)
    ss = (exact.seq_sum(x * x) / F32(len(x))).astype(F32) + F32(v["eps"])  # as exact.rmsnorm
    return {"return": (F32(1.0) / np.sqrt(F32(ss))).astype(F32)}


RMS_INVERSE = Kernel(
    "rms_inverse", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("eps", "float")), ("x", "n", "eps"),
    _rms_inverse_twin,
    tuple(Case(label, (lambda n, sc: lambda r: dict(x=np.zeros(n, F32) if sc == 0 else I.normal(r, n, sc), n=n,
                                                    eps=F32(1e-5)))(n, sc), seed=n)
          for label, n, sc in [("n1", 1, 3.0), ("n64", 64, 1.0), ("n576", 576, 8.0), ("all-zero", 32, 0)]),
    returns="float")

ENTRIES = (ROUND_HALF_AWAY, MLA, EXP_POLY, EXP2_NONPOS, ARGMAX_CHUNK, RMS_INVERSE)
