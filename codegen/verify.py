"""Invariants of a Graph, checked at every stage boundary.

A failed check here is a bug in a frontend or a pass, not a user error, so it
raises AssertionError-like `GraphError` with the offending node."""
from __future__ import annotations

from .ir import STEP_INPUTS, Graph, expected_weight_shapes

# op -> (number of activation inputs, required attrs)
OP_SIGNATURES: dict[str, tuple[int, tuple[str, ...]]] = {
    "embedding": (1, ()),
    "rmsnorm": (1, ("eps",)),
    "linear": (1, ()),
    "rope": (2, ("n_heads", "head_dim", "theta")),
    "attention": (4, ("n_heads", "n_kv_heads", "head_dim", "layer")),
    "add": (2, ()),
    "silu_mul": (2, ()),
}


class GraphError(Exception):
    pass


def verify_graph(graph: Graph) -> Graph:
    """Check op signatures, def-before-use, weight presence and shapes."""
    defined = set(STEP_INPUTS)
    shapes = expected_weight_shapes(graph.config)
    for name, shape in shapes.items():
        if name not in graph.weights:
            raise GraphError(f"weight {name} missing")
        if tuple(graph.weights[name].shape) != shape:
            raise GraphError(f"weight {name} has shape {graph.weights[name].shape}, expected {shape}")
    for node in graph.nodes:
        if node.op not in OP_SIGNATURES:
            raise GraphError(f"unknown op {node.op!r} producing {node.output}")
        n_act, attrs = OP_SIGNATURES[node.op]
        for a in attrs:
            if a not in node.attrs:
                raise GraphError(f"{node.op} -> {node.output}: missing attr {a}")
        for v in node.attrs.values():
            if not isinstance(v, (int, float, str)):
                raise GraphError(f"{node.op} -> {node.output}: attr value {v!r} is not a scalar")
        acts, params = node.inputs[:n_act], node.inputs[n_act:]
        if node.op in ("embedding", "rmsnorm", "linear"):
            acts, params = node.inputs[:1], node.inputs[1:]
        for a in acts:
            if a not in defined:
                raise GraphError(f"{node.op} -> {node.output}: input {a} used before it is defined")
        for p in params:
            if p not in graph.weights:
                raise GraphError(f"{node.op} -> {node.output}: weight {p} missing")
        if node.output in defined:
            raise GraphError(f"value {node.output} defined twice")
        if node.output not in graph.values:
            raise GraphError(f"value {node.output} has no shape")
        defined.add(node.output)
    if graph.output not in defined:
        raise GraphError(f"graph output {graph.output} never produced")
    return graph


def verify_quantized(qg) -> "object":
    """A QuantizedGraph's invariants: every matrix a linear or the embedding
    reads is a Q4 tensor of the graph's shape with in-range values, finite
    scales and one scale per group (or kept GGUF blocks of that shape with
    finite d and m); every other weight a float vector."""
    import numpy as np

    from .quant.formats import Q4_MAX, Q4_MIN, n_groups

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


def verify_program(program) -> "object":
    """A Program's invariants, after binding: every buffer a call names is a
    planned buffer of that type and size inside its region's arena, and every
    constant lies inside the weights blob."""
    import dataclasses

    from .lower import BufferRef, GGUFRef, Q4Ref, VectorRef, buffers_of
    from .prefill import planned_count

    planned = {p.name: p for p in program.plan.buffers}
    arena = {r.name: r.arena_bytes for r in program.plan.regions}
    blob_bytes = len(program.blob.data)

    def weights_of(obj):
        if isinstance(obj, (Q4Ref, VectorRef, GGUFRef)):
            yield obj
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, BufferRef):
            for f in dataclasses.fields(obj):
                yield from weights_of(getattr(obj, f.name))

    for i, call in enumerate(program.calls):
        for ref in buffers_of(call):
            p = planned.get(ref.name)
            if p is None or (p.offset, p.region, p.request.ctype, p.request.count) != \
                    (ref.offset, ref.region, ref.ctype, planned_count(program.prefill, ref.name, ref.count)):
                raise GraphError(f"call {i} ({call.label}): buffer {ref.name} is not the planned one")
            if p.offset + p.size > arena.get(p.region, 0):
                raise GraphError(f"call {i} ({call.label}): buffer {ref.name} ends past its arena")
        for w in weights_of(call.args):
            start = w.packed_offset if isinstance(w, Q4Ref) else w.offset
            if not 0 < start < blob_bytes:
                raise GraphError(f"call {i} ({call.label}): {w.name} at {start} is outside the weights blob")
    return program
