"""Activation-aware scaling (AWQ-style): a float Graph -> an equivalent float Graph
whose matrices quantize better.

For a linear y = W x, any positive per-input-channel s gives the same y from
W' = W diag(s) and x' = x / s.  Channels that carry large activations matter
most to y, so growing their weights (s > 1) gives them more of the int4 grid
and shrinks the activations that the W4A8 kernels quantize to int8.  The
division by s must be absorbed upstream, where it costs nothing at run time:

* q/k/v (input: attention_norm(x)) and gate/up (input: ffn_norm(h)): divide
  the RMSNorm weight by s;
* wo (input: attention output, a mix of V rows): divide wv's rows (and bv)
  by s; with grouped-query attention one V channel feeds every query head of
  its group, so s is shared across the group;
* w_down (input: silu(gate) * up): divide w_up's rows by s;
* the classifier: divide the final norm weight, unless the classifier is
  the tied embedding (its columns are also looked up as embeddings, so it
  keeps s = 1 and only gets clipping, quant/clip.py).

s = a^alpha (a = mean |x_j| on calibration text, normalised so that
sqrt(max s * min s) = 1); alpha is searched on a grid per group of linears
sharing an input, minimising their relative output error with the weights
round-to-nearest quantized and the activations int8 group-quantized, as the
firmware will.  In float the scaled graph computes the same function.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from ..ir import Graph
from .rtn import quantize_q4_rtn

ALPHAS = np.linspace(0.0, 1.0, 21)


@dataclass(frozen=True)
class ScaleGroup:
    """Linears sharing one input value, and where 1/s is folded."""

    value: str  # the linear input (an activation name in the Graph)
    consumers: tuple[str, ...]  # weight names whose columns are multiplied by s
    producer_vector: str | None  # a norm weight divided by s ...
    producer_rows: tuple[str, ...] = ()  # ... or matrix rows / biases divided by s
    kv_shared: bool = False  # s is per KV channel, repeated over the query heads of a group


def scale_groups(graph: Graph) -> list[ScaleGroup]:
    c = graph.config
    out = []
    for i in range(c.n_layers):
        p = f"layers.{i}."
        out.append(ScaleGroup(f"l{i}.xn", (p + "wq", p + "wk", p + "wv"), p + "attention_norm"))
        v_rows = (p + "wv",) + ((p + "bv",) if c.qkv_bias else ())
        out.append(ScaleGroup(f"l{i}.att", (p + "wo",), None, v_rows, kv_shared=True))
        out.append(ScaleGroup(f"l{i}.hn", (p + "w_gate", p + "w_up"), p + "ffn_norm"))
        out.append(ScaleGroup(f"l{i}.act", (p + "w_down",), None, (p + "w_up",)))
    if not c.tied_embeddings:
        out.append(ScaleGroup("xf", ("output",), "norm"))
    return out


def fake_quant_act(x: np.ndarray, group: int) -> np.ndarray:
    """The int8 per-group activation rounding of exact.quantize_groups_i8, in float64."""
    n = x.shape[1]
    out = np.empty_like(x)
    for a in range(0, n, group):
        xs = x[:, a:a + group]
        amax = np.abs(xs).max(axis=1, keepdims=True)
        sc = np.where(amax > 0, amax / 127.0, 1.0)
        out[:, a:a + group] = np.clip(np.sign(xs) * np.floor(np.abs(xs) / sc + 0.5), -127, 127) * sc
    return out


def _expand_kv(s_kv: np.ndarray, c) -> np.ndarray:
    """[kv_heads*hd] -> [heads*hd]: query head h uses KV head h // kv_group."""
    kv_of = np.arange(c.n_heads) // c.kv_group
    return s_kv.reshape(c.n_kv_heads, c.head_dim)[kv_of].reshape(-1)


def search_scales(x: np.ndarray, weights: list[np.ndarray], group_size: int, c=None,
                  kv_shared: bool = False) -> tuple[np.ndarray, float, float]:
    """(s, alpha, relative error) for one ScaleGroup; alpha = 0 is the identity."""
    a = np.abs(x).mean(axis=0) + 1e-8
    if kv_shared:  # average the query heads of each group, per channel
        kv_of = np.arange(c.n_heads) // c.kv_group
        ah = a.reshape(c.n_heads, c.head_dim)
        a = np.stack([ah[kv_of == k].mean(axis=0) for k in range(c.n_kv_heads)]).reshape(-1)
    refs = [x @ w.T for w in weights]
    norms = [max(float((r * r).sum()), 1e-30) for r in refs]
    best = (None, 0.0, np.inf)
    for alpha in ALPHAS:
        s = a ** alpha
        s = s / np.sqrt(s.max() * s.min())
        sf = _expand_kv(s, c) if kv_shared else s
        xq = fake_quant_act(x / sf, group_size)
        err = 0.0
        for w, ref, nrm in zip(weights, refs, norms):
            wq = quantize_q4_rtn("search", (w * sf).astype(np.float32), group_size).dequantized().astype(np.float64)
            d = ref - xq @ wq.T
            err += float((d * d).sum()) / nrm
        if err < best[2]:
            best = (s, float(alpha), err)
    return best


def apply_awq(graph: Graph, acts: Mapping[str, np.ndarray], group_size: int) -> tuple[Graph, dict[str, np.ndarray],
                                                                                         dict[str, float]]:
    """The scaled Graph, the per-consumer input scale s (for clip weighting),
    and the alpha chosen per ScaleGroup value."""
    c = graph.config
    w = {k: np.asarray(v, np.float64) for k, v in graph.weights.items()}
    col_scale: dict[str, np.ndarray] = {}
    alphas: dict[str, float] = {}
    for g in scale_groups(graph):
        x = acts[g.value].astype(np.float64)
        s, alpha, _ = search_scales(x, [w[n] for n in g.consumers], group_size, c, g.kv_shared)
        alphas[g.value] = alpha
        sf = _expand_kv(s, c) if g.kv_shared else s
        for n in g.consumers:
            w[n] = w[n] * sf[None, :]
            col_scale[n] = sf
        if g.producer_vector:
            w[g.producer_vector] = w[g.producer_vector] / s
        for n in g.producer_rows:
            w[n] = w[n] / (s[:, None] if w[n].ndim == 2 else s)
    weights = {k: v.astype(np.float32) for k, v in w.items()}
    return replace(graph, weights=weights), col_scale, alphas
