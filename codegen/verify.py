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
