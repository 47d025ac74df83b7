"""Registry entries of firmware/tllm_cmsis.h (the per-channel scheme's
CMSIS-NN arithmetic, our C twin of it; exact.cmsis_fc_s4) and
firmware/tllm_sampler.h (codegen/sampler.py)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.per_channel import quantize_multiplier
from tinyllm_gen.reference.sampler import DEFAULT_SEED_STATE, MASK64, Rng, Sampler, SamplingOptions

from . import inputs as I
from .layouts import pack_nibbles, unpack_nibbles
from .spec import Case, In, InOut, Kernel, Out, Scalar, Scratch, struct_of

F32 = np.float32


def _static_case(n, inv, seed, kind="normal", known_difference=""):
    def make(r):
        x = I.normal(r, n, 3.0)
        if kind == "extreme":  # far past the clamp, |x * inv_scale| < 2^31
            x = I.extreme_vector(r, n, decades=8)
        if kind == "beyond-int32":  # |x * inv_scale| >= 2^31 (an activation ~10^7 times its calibrated peak)
            x = F32([2.0 ** 31, -(2.0 ** 31), 2.0409191e14, 1e20, -1e20, 3.0])
        if kind == "ties":  # exact halves: round half away from zero
            x = (np.arange(n, dtype=F32) - F32(n // 2)) + F32(0.5)
        return dict(x=x[:n], n=n, inv_scale=F32(inv))
    return Case(f"n{n}-inv{inv}-{kind}", make, seed, known_difference)


QUANTIZE_STATIC_S8 = Kernel(
    "tllm_quantize_static_s8", "tllm_cmsis.h", (In("x", "float", "n"), Scalar("n", "int32_t"),
                                                Scalar("inv_scale", "float"), Out("q", "int8_t", "n")),
    ("x", "n", "inv_scale", "q"), lambda v: {"q": exact.quantize_static_s8(v["x"], v["inv_scale"])},
    (_static_case(64, 42.3, 1), _static_case(7, 1.0, 2, "ties"), _static_case(300, 1.0, 3, "extreme"),
     _static_case(200, 1.0, 4, "ties"), _static_case(6, 1.0, 5, "beyond-int32")))


def _fc_case(rows, cols, seed, kind="normal"):
    def make(r):
        q = r.integers(-7, 8, (rows, cols)).astype(np.int8)
        xq = r.integers(-127, 128, cols).astype(np.int8)
        if kind == "extreme":  # the largest accumulators: every product +-7*127
            q[:] = 7
            xq[:] = 127
            q[0] = -7
        # requantization by multipliers spanning right and left shifts, as quantize_multiplier makes them
        reals = np.exp2(r.uniform(-20, 1.5, rows)) if kind != "extreme" else np.full(rows, 2.0 ** -12)
        mult, shift = zip(*(quantize_multiplier(float(x)) for x in reals))
        bias = r.integers(-5000, 5000, rows).astype(np.int32)
        return dict(filter=pack_nibbles(q), bias=bias, multipliers=np.int32(mult), shifts=np.int32(shift), rows=rows,
                    cols=cols, out_scale=F32(r.uniform(0.001, 0.1)), xq=xq)
    return Case(f"{rows}x{cols}-{kind}", make, seed)


def _fc_twin(v):
    rows, cols = v["rows"], v["cols"]
    q = unpack_nibbles(v["filter"], rows * cols).reshape(rows, cols)  # continuous across rows (s4 packing)
    q_out = exact.cmsis_fc_s4(v["xq"], q, v["bias"], v["multipliers"], v["shifts"])
    return {"q_out": q_out, "out": exact.dequantize_s8(q_out, v["out_scale"])}


FC_S4PC = Kernel(
    "tllm_fc_s4pc", "tllm_cmsis.h",
    (In("filter", "uint8_t", "cdiv(rows * cols, 2)"), In("bias", "int32_t", "rows"), In("multipliers", "int32_t", "rows"),
     In("shifts", "int32_t", "rows"), Scalar("rows", "uint16_t"), Scalar("cols", "uint16_t"),
     Scalar("out_scale", "float"),
     struct_of("fc", "tllm_fc_s4pc_layer", filter="filter", bias="bias", multipliers="multipliers", shifts="shifts",
               rows="rows", cols="cols", out_scale="out_scale"),
     In("xq", "int8_t", "cols"), Out("q_out", "int8_t", "rows"), Out("out", "float", "rows")),
    ("fc", "xq", "q_out", "out"), _fc_twin,
    (_fc_case(16, 64, 1), _fc_case(9, 33, 2), _fc_case(3, 7, 3), _fc_case(40, 172, 4), _fc_case(4, 256, 5, "extreme")))

# --- sampler ----------------------------------------------------------------------
SAMPLER = struct_of("s", "tllm_sampler", write_back=True, rng_state="rng_state", temperature="temperature",
                    top_p="top_p")


SAMPLER_INIT = Kernel(
    "tllm_sampler_init", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER,
     Scalar("t", "float"), Scalar("p", "float"), Scalar("seed", "uint64_t")),
    ("s", "t", "p", "seed"),
    lambda v: {"s.rng_state": np.uint64([Rng(int(v["seed"])).state]), "s.temperature": F32([v["t"]]),
               "s.top_p": F32([v["p"]])},
    tuple(Case(f"seed{seed:x}", (lambda seed: lambda r: dict(rng_state=0, temperature=F32(0), top_p=F32(0),
                                                              t=F32(0.8), p=F32(0.9), seed=seed))(seed))
          for seed in (0, 1, 42, DEFAULT_SEED_STATE, MASK64)))


def _sample_twin(v):
    s = Sampler(SamplingOptions(float(v["temperature"]), float(v["top_p"])))
    s.rng.state = int(v["rng_state"])
    logits = np.asarray(v["logits"], F32)
    token = s.sample(logits)
    after = logits if v["temperature"] == 0 else exact.softmax(logits / F32(v["temperature"]))
    return {"logits": after, "return": token, "s.rng_state": np.uint64([s.rng.state]),
            "s.temperature": F32([v["temperature"]]), "s.top_p": F32([v["top_p"]])}


def _sample_case(n, temperature, top_p, state, seed, kind="normal"):
    def make(r):
        logits = I.normal(r, n, 4.0)
        if kind == "tie":  # equal probabilities: ties broken by index
            logits[:] = F32(1.5)
        if kind == "peaked":  # one token holds nearly all the mass: top-p keeps it alone
            logits[n // 3] = F32(60.0)
        return dict(rng_state=np.uint64(state), temperature=F32(temperature), top_p=F32(top_p), logits=logits, n=n)
    return Case(f"n{n}-T{temperature}-p{top_p}-{kind}-state{state:x}", make, seed)


SAMPLE = Kernel(
    "tllm_sample", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER,
     InOut("logits", "float", "n"), Scalar("n", "int32_t"), Scratch("idx", "uint16_t", "n")),
    ("s", "logits", "n", "idx"), _sample_twin, returns="int32_t", cases=
    tuple(_sample_case(n, t, p, state, seed=i, kind=kind) for i, (n, t, p, state, kind) in enumerate([
        (512, 0.0, 1.0, 1, "normal"), (512, 0.8, 0.9, 0x1234, "normal"), (512, 1.0, 1.0, 0x9E3779B97F4A7C15, "normal"),
        (300, 0.9, 0.85, DEFAULT_SEED_STATE, "normal"), (64, 1.0, 0.5, 7, "tie"), (64, 1.0, 1.0, 7, "tie"),
        (2, 0.5, 0.9, 99, "normal"), (100, 1.0, 0.9, 5, "peaked"), (100, 100.0, 0.99, 11, "normal"),
        (100, 0.001, 0.9, 13, "normal"), (64, 0.0, 1.0, 3, "tie")])))


def _argmax_case(n, kind, seed):
    def make(r):
        x = I.normal(r, n, 5.0)
        if kind == "tie":
            x[[n // 4, n // 2]] = F32(100.0)
        if kind == "equal":
            x[:] = F32(-2.0)
        if kind == "extreme":
            x = I.extreme_vector(r, n)
            x[0] = -np.inf
        return dict(x=x, n=n)
    return Case(f"n{n}-{kind}", make, seed)


ARGMAX = Kernel("tllm_argmax", "tllm_sampler.h", (In("x", "float", "n"), Scalar("n", "int32_t")), ("x", "n"),
                lambda v: {"return": int(np.argmax(v["x"]))},  # the first maximum, as the C loop
                tuple(_argmax_case(n, k, seed=n) for n, k in [(1, "normal"), (512, "normal"), (100, "tie"),
                                                               (33, "equal"), (64, "extreme")]),
                returns="int32_t")

ENTRIES = (QUANTIZE_STATIC_S8, FC_S4PC, SAMPLER_INIT, SAMPLE, ARGMAX)
