"""Registry entries of firmware/tllm_kernels_gguf.h: llama.cpp's Q4_0 / Q4_1 /
Q8_0 blocks kept byte for byte (twins: exact.matvec_gguf, dequant_row_gguf;
layouts: quant/formats.py)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import GGUF_BLOCK_BYTES, gguf_fields

from . import inputs as I
from .spec import Case, In, Kernel, Out, Scalar, Scratch, struct_of

F32 = np.float32
H = "tllm_kernels_gguf.h"
SUFFIX = {"Q4_0": "q40", "Q4_1": "q41", "Q8_0": "q80"}

def _fp16_patterns(kind: str) -> np.ndarray:
    """All 65536 fp16 bit patterns, split: NaNs with the quiet bit (0x0200) set, without it, and the rest."""
    h = np.arange(65536, dtype=np.uint16)
    nan = ((h & 0x7C00) == 0x7C00) & ((h & 0x03FF) != 0)
    quiet = (h & 0x0200) != 0
    return h[{"quiet": nan & quiet, "signalling": nan & ~quiet, "other": ~nan}[kind]]


FP16_TO_F32 = Kernel(
    "tllm_fp16_to_f32", H, (Scalar("h", "uint16_t"),), ("h",),
    # numpy's half -> single conversion keeps NaN payloads, as the portable C does
    lambda v: {"return": np.asarray(v["h"], np.uint16).view(np.float16).astype(F32)},
    (Case("every-non-nan", lambda r: dict(h=_fp16_patterns("other"))),
     Case("quiet-nans", lambda r: dict(h=_fp16_patterns("quiet"))),
     Case("signalling-nans", lambda r: dict(h=_fp16_patterns("signalling")),
          m7_difference="VCVTB.F32.F16 quiets a signalling NaN (0x7C01 -> 0x7FC02000, FPSCR.DN = 0) where the "
                        "portable C and numpy keep it signalling (0x7F802000); only NaN scales, which no GGUF "
                        "has, see it")),
    returns="float", elementwise=True)


def gguf_blocks(r: np.random.Generator, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Random blocks: every nibble / int8 value, fp16 d (and m) from subnormal to 65504, signed zeros."""
    nb, bb = cols // 32, GGUF_BLOCK_BYTES[qtype]
    data = r.integers(0, 256, (rows, nb, bb), dtype=np.uint8)
    scales = 2 if qtype == "Q4_1" else 1
    h = I.fp16_bits(r, rows * nb * scales)
    r.shuffle(h)
    data[:, :, : 2 * scales] = h.view(np.uint8).reshape(rows, nb, 2 * scales)
    return data.reshape(rows, nb * bb)


GGUF_ARGS = (In("blocks", "uint8_t", "rows * (cols // 32) * block_bytes"), Scalar("rows", "uint16_t"),
             Scalar("cols", "uint16_t"), Scalar("block_bytes", "int32_t"),
             struct_of("m", "tllm_gguf_matrix", blocks="blocks", rows="rows", cols="cols"))


def _fields(qtype, v):
    return gguf_fields(qtype, np.asarray(v["blocks"], np.uint8).reshape(v["rows"], -1), v["cols"])


def _matrix_case(qtype, rows, cols, bias, seed, tie=False, chunk=None):
    def make(r):
        data = gguf_blocks(r, qtype, rows, cols)
        if tie:
            data[rows - 1] = data[1]
        x = I.with_zero_groups(I.normal(r, cols, 3.0), 32)
        xq, xs = exact.quantize_groups_i8(x, 32)
        v = dict(blocks=data.reshape(-1), rows=rows, cols=cols, block_bytes=GGUF_BLOCK_BYTES[qtype], xq=xq, xs=xs,
                 bias=I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows) if bias else np.zeros(0, F32),
                 token=rows // 2)
        if chunk:
            v["chunk_rows"] = chunk
        return v
    tag = f"{rows}x{cols}{'-bias' if bias else ''}{'-tie' if tie else ''}{f'-chunk{chunk}' if chunk else ''}"
    return Case(tag, make, seed)


def matvec_twin(qtype):
    def twin(v):
        d, m, q = _fields(qtype, v)
        b = np.asarray(v["bias"], F32)
        return {"out": exact.matvec_gguf(qtype, d, m, q, v["xq"], v["xs"], b if b.size else None)}
    return twin


def matmat_twin(qtype):
    """P matvecs: token p's output at out[p * rows:]."""
    def twin(v):
        d, m, q = _fields(qtype, v)
        b = np.asarray(v["bias"], F32)
        P, cols = v["P"], v["cols"]
        xq, xs = np.asarray(v["xq"]).reshape(P, cols), np.asarray(v["xs"], F32).reshape(P, -1)
        return {"out": np.concatenate([exact.matvec_gguf(qtype, d, m, q, xq[p], xs[p], b if b.size else None)
                                       for p in range(P)])}
    return twin


def _batch_case(qtype, rows, cols, bias, P, seed):
    def make(r):
        v = _matrix_case(qtype, rows, cols, bias, seed).make(r)
        x = np.stack([I.with_zero_groups(I.normal(r, cols, 3.0), 32) for _ in range(P)])
        qs = [exact.quantize_groups_i8(x[p], 32) for p in range(P)]
        v.update(xq=np.concatenate([a for a, _ in qs]), xs=np.concatenate([s for _, s in qs]), P=P)
        return v
    return Case(f"{rows}x{cols}{'-bias' if bias else ''}-P{P}", make, seed)


def _embed_twin(qtype):
    def twin(v):
        d, m, q = _fields(qtype, v)
        t = v["token"]
        return {"out": exact.dequant_row_gguf(qtype, d[t], None if m is None else m[t], q[t])}
    return twin


# 2112 columns: past the 64 activation sums the kernel keeps on its stack
SHAPES = [(10, 64, False), (10, 96, True), (3, 2112, False), (7, 32, True), (1, 160, False)]
ACT = (In("xq", "int8_t", "cols"), In("xs", "float", "cols // 32"), In("bias", "float", "rows", nullable=True))


def _entries(qtype):
    s = SUFFIX[qtype]
    cases = tuple(_matrix_case(qtype, r, c, b, seed=r * c) for r, c, b in SHAPES)
    return (
        Kernel(f"tllm_embed_{s}", H, GGUF_ARGS + (Scalar("token", "int32_t"), Out("out", "float", "cols")),
               ("m", "token", "out"), _embed_twin(qtype), cases),
        Kernel(f"tllm_matvec_{s}", H, GGUF_ARGS + ACT + (Out("out", "float", "rows"),),
               ("m", "xq", "xs", "bias", "out"), matvec_twin(qtype), cases),
        Kernel(f"tllm_matmat_{s}", H,
               GGUF_ARGS + (In("xq", "int8_t", "P * cols"), In("xs", "float", "P * (cols // 32)"),
                            Scalar("P", "int32_t"), In("bias", "float", "rows", nullable=True),
                            Out("out", "float", "P * rows")),
               ("m", "xq", "xs", "P", "bias", "out"), matmat_twin(qtype),
               # P = 6: two calls' worth of tokens; 2112 columns: past the kept activation sums
               tuple(_batch_case(qtype, r, c, b, P, seed=r * c + P) for P in (1, 2, 3, 4, 6)
                     for r, c, b in [(10, 96, True), (3, 2112, False), (5, 64, False)])),
        Kernel(f"tllm_argmax_{s}", H,
               GGUF_ARGS + ACT + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t")),
               ("m", "xq", "xs", "bias", "chunk", "chunk_rows"),
               lambda v, t=matvec_twin(qtype): {"return": int(np.argmax(t(v)["out"]))},
               (_matrix_case(qtype, 10, 64, True, 1, tie=True, chunk=3), _matrix_case(qtype, 10, 96, False, 2, chunk=4),
                _matrix_case(qtype, 9, 64, True, 3, tie=True, chunk=16)),
               returns="int32_t"),
    )


ENTRIES = (FP16_TO_F32,) + tuple(k for q in ("Q4_0", "Q4_1", "Q8_0") for k in _entries(q))
