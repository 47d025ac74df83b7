"""Registry entries of firmware/tllm_kernels_gguf_m7.h: llama.cpp's Q4_0 /
Q4_1 / Q8_0 blocks in the 4-row tile layouts q40x4 / q41x4 / q80x4
(quant/formats.py pack_gguf_tiled), against the x16 / x16b activation
streams of group 32.  The twins decode the tiles back into the file's fields
(unpack_gguf_tiled) and run the kept build's arithmetic (exact.matvec_gguf,
matmat_gguf, dequant_row_gguf), so a pass proves both the layout and that
the tiled kernels compute the kept build's floats.  On the host these run
the portable C; on the Cortex-M7 (tests/emu/test_kernel_twins_m7.py) the
SMLAD/SXTB16 assembly, and the *_c entries its portable twin there."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import (GGUF_BLOCK_BYTES, GGUF_TILE_BLOCK_BYTES, GGUF_TILED, GGUFMatrix,
                                       gguf_tile_bytes, pack_gguf_tiled, unpack_gguf_tiled)

from . import inputs as I
from .entries_gguf import gguf_blocks
from .layouts import parse_x16, x16_of, x16b_of
from .spec import Case, In, InOut, Kernel, Out, Scalar, Scratch, struct_of

F32 = np.float32
H = "tllm_kernels_gguf_m7.h"
GROUP = 32  # llama.cpp's blocks pair with group-32 activations

TILED_ARGS = (In("tiles", "uint8_t", "cdiv(rows, 4) * (cols // 32) * tile_block"), Scalar("rows", "uint16_t"),
              Scalar("cols", "uint16_t"), Scalar("tile_block", "int32_t"),
              struct_of("m", "tllm_ggufx4_matrix", tiles="tiles", rows="rows", cols="cols"))


def tiled_values(r: np.random.Generator, qtype: str, rows: int, cols: int, tie: bool = False) -> dict:
    """A random matrix (every nibble / int8, fp16 d and m from subnormal to 65504, signed zeros) in tiles."""
    data = gguf_blocks(r, qtype, rows, cols)
    if tie:  # rows 1 and rows-1 equal: equal logits in different chunks
        data[rows - 1] = data[1]
    t = GGUFMatrix("w", qtype, data, cols)
    return dict(tiles=np.frombuffer(pack_gguf_tiled(t), np.uint8), rows=rows, cols=cols,
                tile_block=GGUF_TILE_BLOCK_BYTES[qtype])


def fields_of(qtype: str, v):
    """The file's (d, m, q) back from the tiles the kernel was given."""
    return unpack_gguf_tiled("w", qtype, np.asarray(v["tiles"]).tobytes(), v["rows"], v["cols"]).fields()


def x16_quantized(stream, n):
    """(q, scales) of an x16 stream of group 32 (the twin computes on the values)."""
    groups = parse_x16(np.asarray(stream).tobytes(), n, GROUP)
    return np.concatenate([g.q[:GROUP] for g in groups]).astype(np.int8), np.array([g.scale for g in groups], F32)


def _bias(v):
    b = np.asarray(v["bias"], F32)
    return b if b.size else None


def activation(r: np.random.Generator, cols: int, zero: bool = False) -> np.ndarray:
    """A partly zero first block and an all-zero second one (scale 0); `zero`: the whole vector."""
    return np.zeros(cols, F32) if zero else I.with_zero_groups(I.normal(r, cols, 3.0), GROUP)


def _mv_case(qtype, rows, cols, bias, seed, tie=False, extra=None):
    def make(r):
        v = tiled_values(r, qtype, rows, cols, tie)
        v.update(x16=np.frombuffer(x16_of(activation(r, cols), GROUP), np.uint8),
                 bias=I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows) if bias else np.zeros(0, F32))
        return dict(v, **(extra(r, v) if extra else {}))
    return Case(f"{rows}x{cols}{'-bias' if bias else ''}{'-tie' if tie else ''}", make, seed)


def matvec_twin(qtype):
    def twin(v):
        d, m, q = fields_of(qtype, v)
        xq, xs = x16_quantized(v["x16"], v["cols"])
        return {"out": exact.matvec_gguf(qtype, d, m, q, xq, xs, _bias(v))}
    return twin


def _mm_case(qtype, rows, cols, bias, P, seed, zero_token=None):
    def make(r):
        v = tiled_values(r, qtype, rows, cols)
        xs = [activation(r, cols, zero=p == zero_token) for p in range(P)]
        streams = [x16_of(x, GROUP) for x in xs]
        xb = streams[0] if P == 1 else x16b_of([parse_x16(s, cols, GROUP) for s in streams])[0]
        return dict(v, xb=np.frombuffer(xb, np.uint8), P=P, streams=streams,
                    bias=I.normal(r, rows) if bias else np.zeros(0, F32))
    tag = f"-zero{zero_token}" if zero_token is not None else ""
    return Case(f"{rows}x{cols}{'-bias' if bias else ''}-P{P}{tag}", make, seed)


def matmat_twin(qtype):
    def twin(v):
        d, m, q = fields_of(qtype, v)
        toks = [x16_quantized(np.frombuffer(s, np.uint8), v["cols"]) for s in v["streams"]]
        out = exact.matmat_gguf(exact.GGUFOperand.of(qtype, d, m, q), np.stack([a for a, _ in toks]),
                                np.stack([b for _, b in toks]), _bias(v))
        return {"out": out.reshape(-1), "xb": np.asarray(v["xb"], np.uint8)}
    return twin


def _argmax_from_twin(qtype):
    def twin(v):
        y = matvec_twin(qtype)(v)["out"]
        best, best_v = int(v["best"][0]), F32(v["best_v"][0])
        for i, yi in enumerate(y):
            if v["row0"] + i == 0 or yi > best_v:
                best, best_v = v["row0"] + i, yi
        return {"best": np.int32([best]), "best_v": np.array([best_v], F32)}
    return twin


def _from_case(qtype, rows, row0, chunk, best, best_v, seed, tie=False):
    c = _mv_case(qtype, rows, 64, True, seed, tie=tie)

    def make(r):
        v = c.make(r)
        bv = best_v if best_v is not None else F32(np.sort(matvec_twin(qtype)(v)["out"])[rows // 2])
        return dict(v, chunk_rows=chunk, row0=row0, best=np.int32([best]), best_v=np.array([bv], F32))
    return Case(f"{c.label}-row0_{row0}-chunk{chunk}-best{'mid' if best_v is None else best_v}", make, seed)


def _embed_twin(qtype):
    def twin(v):
        d, m, q = fields_of(qtype, v)
        t = v["token"]
        return {"out": exact.dequant_row_gguf(qtype, d[t], None if m is None else m[t], q[t])}
    return twin


def _embed_case(qtype, rows, cols, token, seed):
    return Case(f"{rows}x{cols}-token{token}", lambda r: dict(tiled_values(r, qtype, rows, cols), token=token), seed)


def _tile_bytes_case(qtype, cols):
    return Case(f"cols{cols}", lambda r: dict(tiles=np.zeros(0, np.uint8), rows=4, cols=cols, tile_block=0))


# Partial last tiles (rows % 4 = 1, 2, 3), one tile, one row, SmolLM2's 576 columns, 2112 columns (66 blocks)
MV_SHAPES = [(8, 64, False), (10, 96, True), (3, 2112, False), (7, 32, True), (1, 160, False), (13, 576, True),
             (4, 32, False), (5, 64, True), (6, 128, False), (33, 96, True)]
MM_SHAPES = [(10, 96, True), (3, 2112, False), (5, 64, False), (13, 160, True), (8, 32, False), (1, 64, True)]
X16 = In("x16", "uint8_t", "x16_bytes(cols, 32)")
MV_ARGS = TILED_ARGS + (X16, In("bias", "float", "rows", nullable=True))
# xb comes back as it went in: Q4_1's assembly rewrites the block heads during the call (q41_heads)
MM_ARGS = TILED_ARGS + (InOut("xb", "uint8_t", "P * x16_bytes(cols, 32)"), Scalar("P", "int32_t"),
                        In("bias", "float", "rows", nullable=True), Out("out", "float", "P * rows"))


def _entries(qtype: str) -> tuple[Kernel, ...]:
    s = GGUF_TILED[qtype]
    mv_cases = tuple(_mv_case(qtype, r, c, b, seed=r * c + len(s)) for r, c, b in MV_SHAPES)
    mm_cases = (tuple(_mm_case(qtype, r, c, b, P, seed=r * c + P) for P in (1, 2, 3, 4) for r, c, b in MM_SHAPES)
                + tuple(_mm_case(qtype, 9, 96, True, P, seed=P) for P in (5, 6))  # past the assembly's 4
                + tuple(_mm_case(qtype, 11, 64, False, P, seed=6, zero_token=1) for P in (2, 3, 4)))
    mv = matvec_twin(qtype)
    return (
        Kernel(f"tllm_{s}_tile_bytes", H, TILED_ARGS, ("m",),
               lambda v, q=qtype: {"return": gguf_tile_bytes(q, v["cols"])},
               tuple(_tile_bytes_case(qtype, c) for c in (32, 64, 576, 1536, 2112)), returns="int32_t"),
        Kernel(f"tllm_matvec_{s}", H, MV_ARGS + (Out("out", "float", "rows"),), ("m", "x16", "bias", "out"), mv,
               mv_cases),
        Kernel(f"tllm_matvec_{s}_c", H, MV_ARGS + (Out("out", "float", "rows"),), ("m", "x16", "bias", "out"), mv,
               mv_cases),
        Kernel(f"tllm_matmat_{s}", H, MM_ARGS, ("m", "xb", "P", "bias", "out"), matmat_twin(qtype), mm_cases),
        Kernel(f"tllm_matmat_{s}_c", H, MM_ARGS, ("m", "xb", "P", "bias", "out"), matmat_twin(qtype), mm_cases),
        Kernel(f"tllm_argmax_{s}", H,
               MV_ARGS + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t")),
               ("m", "x16", "bias", "chunk", "chunk_rows"), lambda v: {"return": int(np.argmax(mv(v)["out"]))},
               (_mv_case(qtype, 10, 64, True, 1, tie=True, extra=lambda r, v: dict(chunk_rows=4)),
                _mv_case(qtype, 13, 96, False, 2, tie=True, extra=lambda r, v: dict(chunk_rows=8)),
                _mv_case(qtype, 9, 64, True, 3, extra=lambda r, v: dict(chunk_rows=12)),
                _mv_case(qtype, 3, 32, False, 4, extra=lambda r, v: dict(chunk_rows=4))),
               returns="int32_t"),
        Kernel(f"tllm_argmax_{s}_from", H,
               MV_ARGS + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t"),
                          Scalar("row0", "int32_t"), InOut("best", "int32_t", "1"), InOut("best_v", "float", "1")),
               ("m", "x16", "bias", "chunk", "chunk_rows", "row0", "best", "best_v"), _argmax_from_twin(qtype),
               (_from_case(qtype, 12, 0, 4, 77, F32(1e30), 1), _from_case(qtype, 12, 16, 4, 3, None, 2),
                _from_case(qtype, 8, 8, 8, 5, F32(1e30), 3), _from_case(qtype, 9, 4, 4, 2, F32(-1e30), 4, tie=True),
                _from_case(qtype, 5, 40, 8, 1, None, 5))),
        Kernel(f"tllm_embed_{s}", H, TILED_ARGS + (Scalar("token", "int32_t"), Out("out", "float", "cols")),
               ("m", "token", "out"), _embed_twin(qtype),
               tuple(_embed_case(qtype, r, c, t, seed=i) for i, (r, c, t) in enumerate(
                   [(13, 96, 0), (13, 96, 5), (13, 96, 12), (7, 64, 6), (2, 32, 1), (4, 576, 3)]))),
    )


ENTRIES = tuple(k for q in GGUF_TILED for k in _entries(q))
assert all(GGUF_TILE_BLOCK_BYTES[q] == 4 * GGUF_BLOCK_BYTES[q] for q in GGUF_TILED)
