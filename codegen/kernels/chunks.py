"""Cutting a tiled matrix into the weight stream's chunks (DWUP).

A row range of 4-row tiles is one contiguous byte range of the blob
(quant/formats.py), so a chunk is whole tiles; the H750 invalidates whole
32-byte D-cache lines of a cacheable destination, so every copy is a
multiple of a line (the few bytes past a chunk are never read)."""
from __future__ import annotations

from ..abi import Q4X4_TILE
from ..quant.formats import q4x4_bytes_of
from .base import Chunk
from .refs import Q4Ref

LINE = 32


def line_up(n: int) -> int:
    return -(-n // LINE) * LINE


def tile_bytes(m: Q4Ref) -> int:
    return q4x4_bytes_of(Q4X4_TILE, m.cols, m.group)


def chunks_of(m: Q4Ref, chunk_bytes: int) -> tuple[int, tuple[Chunk, ...]]:
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


def whole_matrix_bytes(m: Q4Ref) -> int:
    return q4x4_bytes_of(m.rows, m.cols, m.group)
