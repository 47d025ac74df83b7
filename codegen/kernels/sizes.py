"""Bytes of a weight reference in the blob, per layout (the layouts are
stated in quant/formats.py): what one token reads of a matrix, or of one
embedding row."""
from __future__ import annotations

from ..abi import Q4X4_TILE
from ..quant.formats import gguf_row_bytes, n_groups, q4_row_bytes, q4x4_bytes_of
from .refs import GGUFRef, Q4Ref


def matrix_bytes(m: Q4Ref | GGUFRef, rows: int | None = None) -> int:
    """The matrix's bytes (or its first `rows` rows' bytes, for a q4 or GGUF layout)."""
    rows = m.rows if rows is None else rows
    if isinstance(m, GGUFRef):
        return rows * gguf_row_bytes(m.qtype, m.cols)
    if m.layout == "q4x4":
        return q4x4_bytes_of(rows, m.cols, m.group)
    return rows * (q4_row_bytes(m.cols) + 4 * n_groups(m.cols, m.group))


def lookup_bytes(m: Q4Ref | GGUFRef) -> int:
    """What one embedding lookup reads: the token's row (its 4-row tile in q4x4)."""
    return matrix_bytes(m, Q4X4_TILE if isinstance(m, Q4Ref) and m.layout == "q4x4" else 1)


def layout_of(m: Q4Ref | GGUFRef) -> str:
    return m.qtype if isinstance(m, GGUFRef) else m.layout
