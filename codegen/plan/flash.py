"""Weights-blob size from shapes alone (no quantization): what `plan` reports
as flash/QSPI use.  Mirrors blob.build_blob's portable layout (packed nibbles
+ float32 scales per Q4 tensor, float32 vectors, RoPE tables, 16-byte
alignment); compile checks the real blob, whose kernel-specific tiling may
differ by padding."""
from __future__ import annotations

from ..ir import Graph
from ..quant.formats import n_groups, q4_row_bytes

HEADER_BYTES = 64
ALIGN = 16


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def weights_blob_bytes(graph: Graph, group_size: int, max_seq: int) -> int:
    c = graph.config
    from ..ir import expected_weight_shapes

    total = HEADER_BYTES
    for name, shape in sorted(expected_weight_shapes(c).items()):
        if len(shape) == 2:
            rows, cols = shape
            total = _up(total) + rows * q4_row_bytes(cols)
            total = _up(total) + rows * n_groups(cols, group_size or cols) * 4  # 0: per-channel, one scale per row
        else:
            total = _up(total) + 4 * shape[0]
    for _ in ("rope.cos", "rope.sin"):
        total = _up(total) + 4 * max_seq * (c.head_dim // 2)
    return _up(total)
