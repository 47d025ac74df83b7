"""A QuantizedGraph's invariants, checked at the quantizers' boundary
(compile.py, before anything is lowered)."""
from __future__ import annotations

import numpy as np

from ..ir import expected_weight_shapes
from ..verify import GraphError
from .formats import Q4_MAX, Q4_MIN, QuantizedGraph, n_groups


def verify_quantized(qg: QuantizedGraph) -> QuantizedGraph:
    """A QuantizedGraph's invariants: every matrix a linear or the embedding
    reads is a Q4 tensor of the graph's shape with in-range values, finite
    scales and one scale per group (or kept GGUF blocks of that shape with
    finite d and m); every other weight a float vector."""
    g = qg.graph
    for name, shape in expected_weight_shapes(g.config).items():
        if len(shape) == 2 and name in qg.gguf:  # kept llama.cpp blocks (GGUFMatrix checks its own layout)
            kept = qg.gguf[name]
            if (kept.rows, kept.cols) != shape:
                raise GraphError(f"GGUF {name} is {kept.rows}x{kept.cols}, the graph says {shape}")
            d, m, _ = kept.fields()
            if not np.isfinite(d).all() or (m is not None and not np.isfinite(m).all()):
                raise GraphError(f"GGUF {name} has non-finite d or m")
        elif len(shape) == 2:
            t = qg.q4.get(name)
            if t is None:
                raise GraphError(f"matrix {name} has neither a Q4 tensor nor kept GGUF blocks")
            if t.q.shape != shape:
                raise GraphError(f"Q4 {name} is {t.q.shape}, the graph says {shape}")
            if t.q.size and (t.q.min() < Q4_MIN or t.q.max() > Q4_MAX):
                raise GraphError(f"Q4 {name} holds values outside [{Q4_MIN}, {Q4_MAX}]")
            if t.scales.shape != (shape[0], n_groups(shape[1], t.group_size)):
                raise GraphError(f"Q4 {name} has scales {t.scales.shape} for group size {t.group_size}")
            if not np.isfinite(t.scales).all():
                raise GraphError(f"Q4 {name} has non-finite scales")
        elif name not in qg.vectors:
            raise GraphError(f"vector {name} missing from the quantized graph")
    return qg
