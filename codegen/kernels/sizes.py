"""Bytes of a weight reference in the blob, per layout (the layouts are
stated in quant/formats.py): what one token reads of a matrix, or of one
embedding row."""
from __future__ import annotations

from ..abi import Q4X4_TILE
from ..quant.formats import GGUF_TILED, gguf_row_bytes, gguf_tile_bytes, gguf_tiled_bytes_of, n_groups, q4_row_bytes, \
    q4x4_bytes_of
from .refs import GGUFRef, Q4Ref


def matrix_bytes(m: Q4Ref | GGUFRef, rows: int | None = None) -> int:
    """The matrix's bytes (or its first `rows` rows' bytes, for a q4 or GGUF layout)."""
    rows = m.rows if rows is None else rows
    if isinstance(m, GGUFRef) and m.tiled:
        return gguf_tiled_bytes_of(m.qtype, rows, m.cols)
    if isinstance(m, GGUFRef):
        return rows * gguf_row_bytes(m.qtype, m.cols)
    if m.layout == "q4x4":
        return q4x4_bytes_of(rows, m.cols, m.group)
    return rows * (q4_row_bytes(m.cols) + 4 * n_groups(m.cols, m.group))


def is_tiled(m: Q4Ref | GGUFRef) -> bool:
    """A 4-row tile layout (q4x4, or GGUF blocks tiled): what the weight stream cuts into chunks."""
    return m.tiled if isinstance(m, GGUFRef) else m.layout == "q4x4"


def tile_bytes(m: Q4Ref | GGUFRef) -> int:
    """Bytes of one 4-row tile of a tiled matrix."""
    assert is_tiled(m), m.name
    return gguf_tile_bytes(m.qtype, m.cols) if isinstance(m, GGUFRef) else q4x4_bytes_of(Q4X4_TILE, m.cols, m.group)


def lookup_bytes(m: Q4Ref | GGUFRef) -> int:
    """What one embedding lookup reads: the token's row (its 4-row tile in a tiled layout)."""
    return tile_bytes(m) if is_tiled(m) else matrix_bytes(m, 1)


def layout_of(m: Q4Ref | GGUFRef) -> str:
    """The layout's name, as timing.KERNEL_RATES prices it."""
    if isinstance(m, GGUFRef):
        return GGUF_TILED[m.qtype] if m.tiled else m.qtype
    return m.layout
