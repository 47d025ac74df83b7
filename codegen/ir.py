"""The graph IR shared by every pipeline stage.

A `Graph` describes ONE decode step of a decoder-only transformer: given the
current token id and its position it produces the next-token logits and
appends this position's K/V to the cache.  Prefill is the same step repeated,
which is how a microcontroller runs it anyway (no batched GEMM, one token at
a time, KV cache in SRAM).

All frontends normalise their checkpoints to the canonical tensor names below
and to the Hugging Face ("rotate-half") RoPE layout, so everything after the
frontends sees one model family:

    tok_embeddings                 [vocab, dim]
    layers.{i}.attention_norm      [dim]
    layers.{i}.wq / wk / wv        [heads*hd, dim] / [kv_heads*hd, dim] (x2)
    layers.{i}.bq / bk / bv        optional biases (Qwen2)
    layers.{i}.wo                  [dim, heads*hd]
    layers.{i}.ffn_norm            [dim]
    layers.{i}.w_gate / w_up       [hidden, dim]
    layers.{i}.w_down              [dim, hidden]
    norm                           [dim]
    output                         [vocab, dim]   (absent when tied)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

# Activations a Graph may consume without producing them.
STEP_INPUTS = ("token", "pos")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture hyper-parameters, independent of the source format."""

    arch: str  # "llama" | "phi3" | "qwen2" (source family; the math is shared)
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    max_seq: int  # the model's trained context (max_position_embeddings)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tied_embeddings: bool = False
    qkv_bias: bool = False
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def kv_group(self) -> int:
        """Query heads sharing one K/V head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    def n_params(self) -> int:
        per_layer = (
            2 * self.dim
            + self.q_dim * self.dim * 2
            + self.kv_dim * self.dim * 2
            + 3 * self.hidden_dim * self.dim
            + (self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0)
        )
        emb = self.vocab_size * self.dim
        return emb * (1 if self.tied_embeddings else 2) + self.n_layers * per_layer + self.dim


@dataclass(frozen=True, eq=False)
class Node:
    """One operation. `attrs` holds plain scalars only (checked by verify)."""

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: Mapping[str, int | float | str] = field(default_factory=dict)
    layer: int | None = None  # for comments in generated code and reports
    label: str = ""  # e.g. "attn.wq": the human name of this call


@dataclass(frozen=True, eq=False)
class Graph:
    """One decode step: nodes in execution order over named values.

    `weights` maps canonical tensor names to float32 arrays; `values` maps
    activation names to their shapes (1-D: one token at a time)."""

    config: ModelConfig
    nodes: tuple[Node, ...]
    weights: Mapping[str, np.ndarray]
    values: Mapping[str, tuple[int, ...]]
    output: str = "logits"

    def weight_names(self) -> list[str]:
        return sorted(self.weights)


def output_weight_name(config: ModelConfig) -> str:
    return "tok_embeddings" if config.tied_embeddings else "output"


def build_decoder_graph(config: ModelConfig, weights: Mapping[str, np.ndarray]) -> Graph:
    """The decode-step graph of a Llama-family model (Llama, Phi-3, Qwen2).

    Frontends call this after mapping their tensors to canonical names, so
    the op sequence is written down exactly once."""
    c = config
    nodes: list[Node] = []
    values: dict[str, tuple[int, ...]] = {"token": (1,), "pos": (1,)}

    def add(op, inputs, output, shape, layer_index=None, label="", **attrs):
        nodes.append(Node(op, tuple(inputs), output, dict(attrs), layer_index, label))
        values[output] = shape

    add("embedding", ["token", "tok_embeddings"], "x0", (c.dim,), label="tok_embeddings")
    x = "x0"
    for i in range(c.n_layers):
        p = f"layers.{i}."
        add("rmsnorm", [x, p + "attention_norm"], f"l{i}.xn", (c.dim,), i, "attention_norm", eps=c.norm_eps)
        for proj, width in (("q", c.q_dim), ("k", c.kv_dim), ("v", c.kv_dim)):
            ins = [f"l{i}.xn", p + "w" + proj] + ([p + "b" + proj] if c.qkv_bias else [])
            add("linear", ins, f"l{i}.{proj}", (width,), i, "attn.w" + proj)
        add("rope", [f"l{i}.q", "pos"], f"l{i}.qr", (c.q_dim,), i, "rope.q",
            n_heads=c.n_heads, head_dim=c.head_dim, theta=c.rope_theta)
        add("rope", [f"l{i}.k", "pos"], f"l{i}.kr", (c.kv_dim,), i, "rope.k",
            n_heads=c.n_kv_heads, head_dim=c.head_dim, theta=c.rope_theta)
        add("attention", [f"l{i}.qr", f"l{i}.kr", f"l{i}.v", "pos"], f"l{i}.att", (c.q_dim,), i, "attention",
            n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim, layer=i)
        add("linear", [f"l{i}.att", p + "wo"], f"l{i}.o", (c.dim,), i, "attn.wo")
        add("add", [x, f"l{i}.o"], f"l{i}.h", (c.dim,), i, "residual.attn")
        add("rmsnorm", [f"l{i}.h", p + "ffn_norm"], f"l{i}.hn", (c.dim,), i, "ffn_norm", eps=c.norm_eps)
        add("linear", [f"l{i}.hn", p + "w_gate"], f"l{i}.gate", (c.hidden_dim,), i, "ffn.w_gate")
        add("linear", [f"l{i}.hn", p + "w_up"], f"l{i}.up", (c.hidden_dim,), i, "ffn.w_up")
        add("silu_mul", [f"l{i}.gate", f"l{i}.up"], f"l{i}.act", (c.hidden_dim,), i, "ffn.silu_mul")
        add("linear", [f"l{i}.act", p + "w_down"], f"l{i}.down", (c.dim,), i, "ffn.w_down")
        add("add", [f"l{i}.h", f"l{i}.down"], f"l{i}.out", (c.dim,), i, "residual.ffn")
        x = f"l{i}.out"
    add("rmsnorm", [x, "norm"], "xf", (c.dim,), label="norm", eps=c.norm_eps)
    add("linear", ["xf", output_weight_name(c)], "logits", (c.vocab_size,), label="output")
    return Graph(config=c, nodes=tuple(nodes), weights=dict(weights), values=values)


def expected_weight_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape, for frontends to validate checkpoints against."""
    shapes: dict[str, tuple[int, ...]] = {"tok_embeddings": (c.vocab_size, c.dim), "norm": (c.dim,)}
    if not c.tied_embeddings:
        shapes["output"] = (c.vocab_size, c.dim)
    for i in range(c.n_layers):
        p = f"layers.{i}."
        shapes[p + "attention_norm"] = (c.dim,)
        shapes[p + "ffn_norm"] = (c.dim,)
        shapes[p + "wq"] = (c.q_dim, c.dim)
        shapes[p + "wk"] = (c.kv_dim, c.dim)
        shapes[p + "wv"] = (c.kv_dim, c.dim)
        shapes[p + "wo"] = (c.dim, c.q_dim)
        shapes[p + "w_gate"] = (c.hidden_dim, c.dim)
        shapes[p + "w_up"] = (c.hidden_dim, c.dim)
        shapes[p + "w_down"] = (c.dim, c.hidden_dim)
        if c.qkv_bias:
            shapes[p + "bq"] = (c.q_dim,)
            shapes[p + "bk"] = (c.kv_dim,)
            shapes[p + "bv"] = (c.kv_dim,)
    return shapes
