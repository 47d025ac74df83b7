"""Cutting a tiled matrix into the weight stream's chunks (DWUP).

A row range of 4-row tiles is one contiguous byte range of the blob
(quant/formats.py), so a chunk is whole tiles; the H750 invalidates whole
32-byte D-cache lines of a cacheable destination, so every copy is a
multiple of a line (the few bytes past a chunk are never read)."""
from __future__ import annotations

from ..abi import Q4X4_TILE
from .base import Chunk
from .c_text import fixed
from .refs import MatrixRef, Q4Ref
from .sizes import matrix_bytes, tile_bytes

LINE = 32


def line_up(n: int) -> int:
    return -(-n // LINE) * LINE


def chunks_of(m: MatrixRef, chunk_bytes: int) -> tuple[int, tuple[Chunk, ...]]:
    """(rows per chunk, the chunks): whole tiles of at most chunk_bytes (one tile at least)."""
    tb = tile_bytes(m)
    tiles = -(-m.rows // Q4X4_TILE)
    per = max(1, min(tiles, chunk_bytes // tb))
    out = []
    for t0 in range(0, tiles, per):
        n = min(per, tiles - t0)
        rows = min(m.rows, (t0 + n) * Q4X4_TILE) - t0 * Q4X4_TILE
        out.append(Chunk(t0 * Q4X4_TILE, rows, t0 * tb, n * tb, line_up(n * tb)))
    return per * Q4X4_TILE, tuple(out)


def whole_matrix_bytes(m: MatrixRef) -> int:
    return matrix_bytes(m)


def stream_kernel(m: MatrixRef, op: str) -> tuple[str, tuple]:
    """The tllm_stream.h function streaming a tiled matrix for `op` (matvec,
    matmat, argmax, topk, embed; argmax_batch and topk_batch: speculative
    decoding's verification pass), and the layout's kernels it takes: q4x4
    has its own loops; the tiled GGUF layouts share one loop per op, given
    the layout's kernel (tllm_stream_matvec_ggufx4(s, tllm_matvec_q41x4, ...))."""
    if isinstance(m, Q4Ref):
        return f"tllm_stream_{op}_q4x4", ()
    s = m.suffix
    kernels = {"matvec": (f"tllm_matvec_{s}",), "matmat": (f"tllm_matmat_{s}",), "argmax": (f"tllm_argmax_{s}_from",),
               "topk": (f"tllm_matvec_{s}", f"tllm_{s}_tile_bytes"),
               "embed": (f"tllm_embed_{s}", f"tllm_{s}_tile_bytes"),
               "argmax_batch": (f"tllm_matmat_{s}", f"tllm_{s}_tile_bytes"),
               "topk_batch": (f"tllm_matmat_{s}", f"tllm_{s}_tile_bytes")}[op]
    return f"tllm_stream_{op}_ggufx4", tuple(fixed(k) for k in kernels)
