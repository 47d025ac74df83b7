"""Whole-sequence twins of the reference kernels, for evaluation and calibration.

`Executor.step` runs one token at a time: the firmware's order, and the
oracle.  Scoring held-out text needs the logits of every position, and tens
of thousands of tokens through per-op Python dispatch take hours.  Here one
call runs a whole sequence as [T, n] arrays.

Why `SeqQuantKernels` is bit-identical to `QuantKernels` (tests/unit/
test_reference_seq.py checks it on every op, both KV precisions, biases):
* every op except attention is per position: the same float32 element
  operations on row t as the step kernel performs on its vector;
* the linears are the step kernels' own (executor.QuantLinears), given the
  T vectors at once: the block sums are integers below 2^24, exact in a
  float32 BLAS product whatever its summation order (exact.block_sums),
  and each row's float epilogue is its vector's, block by block;
* attention's float reductions across positions (the softmax sum; with
  the int4 cache also the value accumulation) run over key positions in
  ascending order, from 0.0f; a future key contributes an exact +0 (e = 0,
  p = 0, 0 * v = +-0), and x + (+-0) == x for every float32 x reached from
  a +0 start, so summing over all T keys gives the same bits as summing over
  the first t+1.  The int8 cache's value sum is an integer (weight 0 for a
  future key), exact in float64 in any order; its maxima run over the keys
  up to each query.
`SeqFloatKernels` mirrors FloatKernels to float rounding (not bit for bit:
BLAS picks its own order; tolerance 1e-5 in the test).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from . import exact
from .blas import one_blas_thread
from .exact import F32
from ..ir import Graph
from ..quant.formats import dequantize_gguf
from ..quant.kv import kv_layout
from .executor import QuantLinears, head_start_node, rope_tables


def _kv_of(n_heads: int, n_kv: int) -> np.ndarray:
    return np.arange(n_heads) // (n_heads // n_kv)



def rope_seq(x: np.ndarray, nh: int, hd: int, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE on a [T, nh*hd] block, positions 0..T-1 (rotate-half, float32 ops
    as exact.rope, so the quantized path stays bit-identical)."""
    T = x.shape[0]
    h = x.reshape(T, nh, hd)
    a, b = h[:, :, : hd // 2], h[:, :, hd // 2:]
    c, s = cos[:T, None, :], sin[:T, None, :]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=2).reshape(T, -1).astype(F32)


class _SeqRope:
    """RoPE tables and the rope op, shared by both sequence kernel sets."""

    def __init__(self, config, max_seq: int):
        self.cos, self.sin = rope_tables(config.head_dim, config.rope_theta, max_seq)

    def rope(self, node, x):
        return rope_seq(x, node.attrs["n_heads"], node.attrs["head_dim"], self.cos, self.sin)


SEQ_ROW_CHUNK = None  # rows per epilogue pass of a linear (None: exact.row_chunks' cache-sized default)


class SeqQuantKernels(_SeqRope):
    """QuantKernels over a whole sequence (group-wise W4A8 only)."""

    def __init__(self, qgraph, max_seq: int):
        if qgraph.method == "per-channel":
            raise ValueError("whole-sequence evaluation covers the group-wise scheme only")
        self.qg = qgraph
        c = qgraph.config
        super().__init__(c, max_seq)
        self.att_scale = exact.attention_scale(c.head_dim)
        self.linears = QuantLinears(qgraph, SEQ_ROW_CHUNK)  # the step kernels' linears, P = T

    def embedding(self, node, tokens):
        gm = getattr(self.qg, "gguf", {}).get(node.inputs[1])
        if gm is not None:  # QuantKernels.embedding per token (ggml's dequantize arithmetic)
            return dequantize_gguf(gm.qtype, gm.data[np.asarray(tokens)], gm.cols)
        t = self.qg.q4[node.inputs[1]]
        s = np.repeat(t.scales[tokens], t.group_size, axis=1)[:, : t.cols]
        return t.q[tokens].astype(F32) * s

    def rmsnorm(self, node, x):
        ss = np.cumsum(x * x, axis=1, dtype=F32)[:, -1]
        ss = ss / F32(x.shape[1])
        ss = ss + F32(node.attrs["eps"])
        r = F32(1.0) / np.sqrt(ss.astype(F32))
        return (x * r[:, None]) * self.qg.vectors[node.inputs[1]].astype(F32)

    def linear(self, node, x):
        return self.linears(node, x)

    def attention(self, node, q, k, v):
        at = node.attrs
        hd, nh, nkv = at["head_dim"], at["n_heads"], at["n_kv_heads"]
        T = q.shape[0]
        kv_of = _kv_of(nh, nkv)
        rotate = self.qg.kv_bits == 4 and self.qg.kv_rotate == "hadamard"  # QuantKernels._attention_kv4
        if rotate:
            q, k = exact.hadamard_heads(q, nh, hd), exact.hadamard_heads(k, nkv, hd)
        scale = exact.rotated_attention_scale(self.att_scale, hd) if rotate else self.att_scale
        centers = self.qg.kv_centers if self.qg.kv_bits == 4 else None  # quant/kv_center.py
        if centers is not None:
            layer = at["layer"]
            k, v = exact.centered(k, centers.k[layer]), exact.centered(v, centers.v[layer])
        q8, qs = exact.quantize_rows_i8(q.reshape(T, nh, hd))  # [T, nh, hd], [T, nh]
        future = np.triu(np.ones((T, T), bool), 1)[:, None, :]  # [Tq, 1, Tk]
        g = kv_layout(self.qg.config, 4).group
        # the keys give the scores (exact.attention_i8 / attention_kv4), the values the weighted sum;
        # --kv-bits 8:4 takes int8's keys and int4's values (exact.attention_k8v4)
        if self.qg.kv_bits.k == 4:
            quantize_keys = exact.quantize_rows_i4_clip if rotate else exact.quantize_rows_i4  # as _attention_kv4
            k_q, k_s = quantize_keys(k.reshape(T, nkv, hd), g)  # [T, nkv, hd], [T, nkv, ng]
            ng = hd // g
            qg8 = q8.reshape(T, nh, ng, g).transpose(1, 2, 0, 3)  # [nh, ng, Tq, g]
            kg = k_q[:, kv_of].reshape(T, nh, ng, g).transpose(1, 2, 3, 0)  # [nh, ng, g, Tk]
            dots = _integer_matmul(qg8, kg).transpose(2, 0, 3, 1).astype(np.int32).astype(F32)  # [Tq, nh, Tk, ng]
            terms = dots * k_s[:, kv_of].transpose(1, 0, 2)[None]  # [Tq, nh, Tk, ng]
            r = terms[..., 0]
            for gi in range(1, ng):
                r = r + terms[..., gi]
        else:
            k_q, k_s = exact.quantize_rows_i8(k.reshape(T, nkv, hd))
            kf = k_q[:, kv_of].transpose(1, 2, 0)  # [nh, hd, Tk]
            dots = _integer_matmul(q8.transpose(1, 0, 2), kf).transpose(1, 0, 2)  # [Tq, nh, Tk]
            r = dots.astype(np.int32).astype(F32) * k_s[:, kv_of].T[None]
        if self.qg.kv_bits.v == 4:
            quantize_values = exact.quantize_rows_i4_clip if centers is not None else exact.quantize_rows_i4
            v_q, v_s = quantize_values(v.reshape(T, nkv, hd), g)
            ng = hd // g
            vs = v_s[:, kv_of].transpose(1, 2, 0).astype(F32)  # [nh, ng, Tk]
            vq = v_q[:, kv_of].reshape(T, nh, ng, g)
        else:
            v_q, v_s = exact.quantize_rows_i8(v.reshape(T, nkv, hd))
            vs = v_s[:, kv_of].T.astype(F32)[:, None, :]  # [nh, 1, Tk]: one value group
            vq = v_q[:, kv_of].reshape(T, nh, 1, hd)
        vsmax = np.maximum.accumulate(vs, axis=2).transpose(2, 0, 1)  # [Tq, nh, ng]: keys 0..t
        out = self._integer_weighted_values(r, qs * scale, future, vs[None], vsmax, vq)
        return out if centers is None else exact.uncentered_output(out, centers.v[at["layer"]], nh, nkv, hd)

    def _integer_weighted_values(self, r, qs_scale, future, vs, vsmax, vq):
        """exact.attention_i8 / attention_kv4 from the raw scores r [Tq, nh, Tk]:
        the softmax as integer weights per value group, an exact integer value
        sum; maxima run over the keys up to each query, future keys weigh 0.
        vq: the integer values [Tk, nh, ng, group]; qs_scale: each query's
        scale times the attention scale, rounded to float32 as the C does."""
        T, nh, _ = r.shape
        vt = vq.transpose(1, 2, 0, 3)  # [nh, ng, Tk, group]
        m = np.max(np.where(future, -np.inf, r), axis=-1, keepdims=True).astype(F32)
        cl = (qs_scale * exact.EXP_LOG2E).astype(F32)  # [Tq, nh]: (q scale * attention scale) * log2(e)
        e = np.where(future, F32(0.0), exact.exp2_nonpos(np.where(future, F32(0.0), (r - m) * cl[:, :, None])))
        total = np.cumsum(e, axis=-1, dtype=F32)[..., -1]  # + exact zeros after the last real key
        out = np.zeros((T, nh, vq.shape[2], vq.shape[3]), F32)
        limits = np.array([exact.attention_weight_limit(t + 1) for t in range(T)])
        for limit in np.unique(limits):
            rows = np.flatnonzero(limits == limit)
            w, out_k = exact.attention_weights(e[rows][:, :, None, :], vs, vsmax[rows], total[rows][:, :, None],
                                               int(rows[0]) + 1)  # [R, nh, ng, Tk], [R, nh, ng]
            acc = _integer_matmul(w.transpose(1, 2, 0, 3), vt).transpose(2, 0, 1, 3)  # [R, nh, ng, group]
            out[rows] = acc.astype(np.int64).astype(np.int32).astype(F32) * out_k[..., None]
        return out.reshape(T, -1)

    def add(self, node, a, b):
        return (a + b).astype(F32)

    def silu_mul(self, node, gate, up):
        return exact.silu_mul(gate, up)


def _integer_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of integer arrays as float64 BLAS products: exact while every
    partial sum stays below 2^53 (attention's are below 2^45: 32767 * 127 per
    term, fewer than 2^23 keys)."""
    return np.matmul(np.ascontiguousarray(a, np.float64), np.ascontiguousarray(b, np.float64))


def float64_weights(graph: Graph, name: str, cache: dict) -> np.ndarray:
    """graph.weights[name] as float64, once per cache (tied matrices share one copy)."""
    w = graph.weights[name]
    key = id(w)
    hit = cache.get(key)
    if hit is None or hit[0] is not w:
        hit = cache[key] = (w, np.ascontiguousarray(w, dtype=np.float64))
    return hit[1]


class SeqFloatKernels(_SeqRope):
    """FloatKernels over a whole sequence (float64 inside, float32 between ops)."""

    def __init__(self, graph: Graph, max_seq: int):
        self.g = graph
        super().__init__(graph.config, max_seq)
        self._w64: dict = {}  # matrices in float64, converted once

    def embedding(self, node, tokens):
        return self.g.weights[node.inputs[1]][tokens].astype(F32)

    def rmsnorm(self, node, x):
        ms = np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True)
        return (x / np.sqrt(ms + node.attrs["eps"]) * self.g.weights[node.inputs[1]]).astype(F32)

    def linear(self, node, x):
        y = x.astype(np.float64) @ float64_weights(self.g, node.inputs[1], self._w64).T
        if len(node.inputs) > 2:
            y = y + self.g.weights[node.inputs[2]]
        return y.astype(F32)

    def attention(self, node, q, k, v):
        at = node.attrs
        hd, nh, nkv = at["head_dim"], at["n_heads"], at["n_kv_heads"]
        T = q.shape[0]
        kv_of = _kv_of(nh, nkv)
        qh = q.reshape(T, nh, hd).astype(np.float64).transpose(1, 0, 2)  # [nh, Tq, hd]
        kh = k.reshape(T, nkv, hd).astype(np.float64)[:, kv_of].transpose(1, 2, 0)  # [nh, hd, Tk]
        vh = v.reshape(T, nkv, hd).astype(np.float64)[:, kv_of].transpose(1, 0, 2)  # [nh, Tk, hd]
        s = np.matmul(qh, kh) / np.sqrt(hd)
        s = np.where(np.triu(np.ones((T, T), bool), 1)[None], -np.inf, s)
        e = np.exp(s - s.max(axis=2, keepdims=True))
        p = e / e.sum(axis=2, keepdims=True)
        return np.matmul(p, vh).transpose(1, 0, 2).reshape(T, -1).astype(F32)

    def add(self, node, a, b):
        return (a + b).astype(F32)

    def silu_mul(self, node, gate, up):
        g = gate.astype(np.float64)
        return (g / (1.0 + np.exp(-g)) * up).astype(F32)


def run_sequence(graph: Graph, kernels, tokens: Iterable[int], keep: Iterable[str] = (),
                 need_logits: bool = True) -> tuple[np.ndarray | None, dict]:
    """Logits [T, vocab] of every position of `tokens` (position 0 first), and
    the values named in `keep` ([T, n] each: calibration reads linear inputs).
    need_logits False: the head's nodes (reference.head_start_node) run only
    as far as a kept value needs them, as the firmware's prompt steps skip
    the classifier; the logits are then None.  BLAS runs on one thread
    meanwhile (blas.py)."""
    with one_blas_thread():
        return _run_sequence(graph, kernels, tokens, keep, need_logits)


def _run_sequence(graph, kernels, tokens, keep, need_logits):
    toks = np.asarray(list(tokens), np.int64)
    keep = set(keep)
    env: dict[str, np.ndarray] = {}
    kept: dict[str, np.ndarray] = {}
    nodes = graph.nodes if need_logits else _without_unkept_head(graph, keep)
    for node in nodes:
        a = [env.get(n) for n in node.inputs]
        op = node.op
        if op == "embedding":
            out = kernels.embedding(node, toks)
        elif op in ("rmsnorm", "linear", "rope"):
            out = getattr(kernels, op)(node, a[0])
        elif op == "attention":
            out = kernels.attention(node, a[0], a[1], a[2])
        elif op in ("add", "silu_mul"):
            out = getattr(kernels, op)(node, a[0], a[1])
        else:
            raise AssertionError(op)
        env[node.output] = out
        if node.output in keep:
            kept[node.output] = out
    return env.get(graph.output) if need_logits else None, kept


def _without_unkept_head(graph: Graph, keep: set) -> tuple:
    """The graph's nodes up to its last layer, then the head's nodes a kept
    value depends on (the classifier's input, for calibration)."""
    start = head_start_node(graph)
    head = graph.nodes[start:]
    needed = set(keep)
    for node in reversed(head):
        if node.output in needed:
            needed.update(node.inputs)
    return graph.nodes[:start] + tuple(n for n in head if n.output in needed)
