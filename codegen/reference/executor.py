"""The numpy reference executor: the oracle for everything we emit.

One `Executor` walks a Graph's nodes in order and dispatches each op to a
kernel set:

* `FloatKernels`: the float model in float32, as transformers runs it,
  vectorised numpy.  Checked against Hugging Face transformers (tolerance
  1e-4 on logits).
* `QuantKernels`: the quantized model, operation for operation what the
  firmware's C computes (same rounding, same summation order), so its tokens
  are the firmware's tokens bit for bit.

Both share the KV-cache bookkeeping and the generation loop (`generate`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from . import exact
from .blas import one_blas_thread
from ..ir import Graph, Node
from ..quant.formats import gguf_fields
from ..quant.kv import KV8V4, kv_layout
from .sampler import Sampler, SamplingOptions


def rope_tables(head_dim: int, theta: float, max_seq: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [max_seq, head_dim/2] in float32, computed once in float64.

    The firmware reads the same tables from flash, so it never calls
    sinf/cosf/powf and host/target libm differences cannot leak in."""
    half = head_dim // 2
    inv_freq = 1.0 / (float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.arange(max_seq, dtype=np.float64)[:, None] * inv_freq[None, :half]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def head_start_node(graph: Graph) -> int:
    """Index of the graph's first head node: the nodes after the last layer
    (the final norm and the classifier), which only produce the logits.  A
    prompt token before the last needs none of them (its logits are never
    read), so the firmware and `generate` skip them there."""
    layered = [i for i, n in enumerate(graph.nodes) if n.layer is not None]
    start = layered[-1] + 1 if layered else 1  # no layers: everything after the embedding
    if not 0 < start < len(graph.nodes) or graph.nodes[-1].output != graph.output:
        raise AssertionError("a decode graph ends in its head: the final norm and the classifier")
    return start


class Kernels(Protocol):
    def embedding(self, node: Node, token: int) -> np.ndarray: ...
    def rmsnorm(self, node: Node, x: np.ndarray) -> np.ndarray: ...
    def linear(self, node: Node, x: np.ndarray) -> np.ndarray: ...
    def rope(self, node: Node, x: np.ndarray, pos: int) -> np.ndarray: ...
    def attention(self, node: Node, q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int) -> np.ndarray: ...
    def add(self, node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray: ...
    def silu_mul(self, node: Node, gate: np.ndarray, up: np.ndarray) -> np.ndarray: ...
    def reset(self) -> None: ...


class FloatKernels:
    """The float32 model as transformers computes it in float32: the graph's
    float32 weights (a GGUF's blocks were dequantized once, at import),
    float32 activations and caches, one BLAS float32 matrix-vector product
    per linear, the embedding read as one row, attention over the KV cache."""

    def __init__(self, graph: Graph, max_seq: int):
        self.g = graph
        c = graph.config
        self.max_seq = max_seq
        self.cos, self.sin = rope_tables(c.head_dim, c.rope_theta, max_seq)
        self._mats: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        c = self.g.config
        self.k_cache = np.zeros((c.n_layers, self.max_seq, c.kv_dim), np.float32)
        self.v_cache = np.zeros((c.n_layers, self.max_seq, c.kv_dim), np.float32)

    def weight(self, name: str) -> np.ndarray:
        """A weight as a C-contiguous float32 array, checked once: a matrix-vector
        product on it is then one sgemv with no conversion (a frontend's float32
        arrays are returned as they are, not copied)."""
        m = self._mats.get(name)
        if m is None:
            m = self._mats[name] = np.ascontiguousarray(self.g.weights[name], dtype=np.float32)
        return m

    def embedding(self, node, token):
        return self.weight(node.inputs[1])[token].copy()

    def rmsnorm(self, node, x):
        # transformers' LlamaRMSNorm in float32: x * rsqrt(mean(x^2) + eps), then times the weight
        ms = np.dot(x, x) / np.float32(x.shape[0])
        r = np.float32(1.0) / np.sqrt(ms + np.float32(node.attrs["eps"]))
        return (x * r) * self.weight(node.inputs[1])

    def linear(self, node, x):
        y = self.weight(node.inputs[1]) @ x
        if len(node.inputs) > 2:
            y += self.weight(node.inputs[2])
        return y

    def rope(self, node, x, pos):
        hd = node.attrs["head_dim"]
        h = x.reshape(node.attrs["n_heads"], hd)
        a, b = h[:, : hd // 2], h[:, hd // 2:]
        c, s = self.cos[pos], self.sin[pos]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=1).reshape(-1)

    def attention(self, node, q, k, v, pos):
        at = node.attrs
        layer, hd, nh, nkv = at["layer"], at["head_dim"], at["n_heads"], at["n_kv_heads"]
        self.k_cache[layer, pos] = k
        self.v_cache[layer, pos] = v
        # Grouped-query attention as one batched product per KV head: the nh / nkv
        # query heads that share a KV head are the rows of one [group, hd] block.
        keys = self.k_cache[layer, : pos + 1].reshape(pos + 1, nkv, hd).transpose(1, 2, 0)  # [nkv, hd, T]
        vals = self.v_cache[layer, : pos + 1].reshape(pos + 1, nkv, hd).transpose(1, 0, 2)  # [nkv, T, hd]
        scores = np.matmul(q.reshape(nkv, nh // nkv, hd), keys) * np.float32(hd ** -0.5)  # [nkv, group, T]
        e = np.exp(scores - scores.max(axis=2, keepdims=True))
        probs = e / e.sum(axis=2, keepdims=True)
        return np.matmul(probs, vals).reshape(-1)

    def add(self, node, a, b):
        return a + b

    def silu_mul(self, node, gate, up):
        with np.errstate(over="ignore"):  # exp(-gate) = inf for gate < -88: gate / inf = -0, silu's limit
            return gate / (np.float32(1.0) + np.exp(-gate)) * up

    def shift(self, sinks: int, discard: int, n_rows: int) -> None:
        """The context shift (context.py) on the float cache: rows sinks + discard .. move to sinks ..,
        keys turned back by discard positions (float32 rotation, as the quantized cache's)."""
        c = self.g.config
        src, dst = slice(sinks + discard, sinks + discard + n_rows), slice(sinks, sinks + n_rows)
        keys = self.k_cache[:, src].reshape(c.n_layers, n_rows, c.n_kv_heads, c.head_dim)
        back = exact.rope_back(keys, self.cos[discard], self.sin[discard])
        self.k_cache[:, dst] = back.reshape(c.n_layers, n_rows, c.kv_dim)
        self.v_cache[:, dst] = self.v_cache[:, src].copy()


class Executor:
    """Runs decode steps of a Graph with a kernel set."""

    def __init__(self, graph: Graph, kernels: Kernels):
        self.graph = graph
        self.kernels = kernels

    def reset(self) -> None:
        self.kernels.reset()

    def step(self, token: int, pos: int, need_logits: bool = True) -> np.ndarray | None:
        """One decode step; need_logits False stops after the last layer (the
        KV cache is written, the head is skipped) and returns None."""
        k = self.kernels
        env: dict[str, np.ndarray] = {}
        nodes = self.graph.nodes if need_logits else self.graph.nodes[:head_start_node(self.graph)]
        for node in nodes:
            a = [env.get(n) for n in node.inputs]
            op = node.op
            if op == "embedding":
                out = k.embedding(node, token)
            elif op == "rmsnorm":
                out = k.rmsnorm(node, a[0])
            elif op == "linear":
                out = k.linear(node, a[0])
            elif op == "rope":
                out = k.rope(node, a[0], pos)
            elif op == "attention":
                out = k.attention(node, a[0], a[1], a[2], pos)
            elif op == "add":
                out = k.add(node, a[0], a[1])
            elif op == "silu_mul":
                out = k.silu_mul(node, a[0], a[1])
            else:  # verify.py rejects unknown ops before we get here
                raise AssertionError(op)
            env[node.output] = out
        return env[self.graph.output] if need_logits else None


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    generated_ids: list[int]
    stop_reason: str  # "eos" | "max_tokens" | "context"


def generate(
    executor: Executor,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    max_seq: int,
    eos_ids: Sequence[int],
    sampling: SamplingOptions,
    top_k: int = 0,
    roll=None,
) -> Generation:
    """The same state machine as firmware/tllm_engine.c: prefill the prompt
    one token at a time (the head only for the last prompt token, whose
    logits are the only ones read), then sample / emit / step until EOS, the
    token limit or the end of the context.  top_k: a `--sampler topk:K`
    build's K (sampler.py), 0 for the full and greedy builds.  BLAS runs
    on one thread meanwhile (blas.py).  roll: a rolling context
    (context.ContextRoll; None: stop at the context's end), shifted as
    context.py states."""
    with one_blas_thread():
        return _generate(executor, prompt_ids, max_new_tokens, max_seq, eos_ids, sampling, top_k, roll)


def _generate(executor, prompt_ids, max_new_tokens, max_seq, eos_ids, sampling, top_k, roll) -> Generation:
    executor.reset()
    sampler = Sampler(sampling, top_k)
    prompt = list(prompt_ids)
    out: list[int] = []
    if max_new_tokens <= 0:
        return Generation(prompt, out, "max_tokens")
    logits = None
    for pos, tok in enumerate(prompt):
        logits = executor.step(tok, pos, need_logits=pos == len(prompt) - 1)
    pos = len(prompt)
    while True:
        tok = sampler.sample(logits)
        out.append(tok)
        if tok in eos_ids:
            return Generation(prompt, out, "eos")
        if len(out) >= max_new_tokens:
            return Generation(prompt, out, "max_tokens")
        if pos + 1 >= max_seq:  # the token buffer holds max_seq ids
            if roll is None:
                return Generation(prompt, out, "context")
            executor.kernels.shift(roll.sinks, roll.discard, pos - roll.sinks - roll.discard)
            pos -= roll.discard
        logits = executor.step(tok, pos)
        pos += 1


class QuantKernels:
    """The quantized model exactly as the firmware computes it (W4A8, int8 KV).

    Each method mirrors one C kernel in firmware/tllm_kernels.c; see exact.py
    for the rules that make float32 results bit-identical."""

    def __init__(self, qgraph, max_seq: int):
        self.qg = qgraph
        c = qgraph.config
        self.max_seq = max_seq
        self.cos, self.sin = rope_tables(c.head_dim, c.rope_theta, max_seq)
        self.att_scale = exact.attention_scale(c.head_dim)
        self.linears = QuantLinears(qgraph)
        self.reset()

    def reset(self) -> None:
        c = self.qg.config
        shape = (c.n_layers, self.max_seq, c.n_kv_heads, c.head_dim)
        self.k_q = np.zeros(shape, np.int8)
        self.v_q = np.zeros(shape, np.int8)
        self.k_s = np.zeros(shape[:3], np.float32)
        self.v_s = np.zeros(shape[:3], np.float32)
        if self.qg.kv_bits.v == 4:  # int4 values (unpacked) and one scale per group (quant/kv.py)
            self.kv4_group = kv_layout(c, 4).group
            self.v_s = np.zeros(shape[:3] + (c.head_dim // self.kv4_group,), np.float32)
        if self.qg.kv_bits.k == 4:  # int4 keys likewise (8:4 keeps its keys int8)
            self.k_s = np.zeros_like(self.v_s)

    def embedding(self, node, token):
        gm = getattr(self.qg, "gguf", {}).get(node.inputs[1])
        if gm is not None:  # a llama.cpp block format kept as it is (tllm_embed_q40/q41/q80)
            d, m, q = gguf_fields(gm.qtype, gm.data[token:token + 1], gm.cols)
            return exact.dequant_row_gguf(gm.qtype, d[0], None if m is None else m[0], q[0])
        t = self.qg.q4[node.inputs[1]]
        return exact.dequant_row_q4(t.q[token], t.scales[token], t.group_size)

    def rmsnorm(self, node, x):
        return exact.rmsnorm(x, self.qg.vectors[node.inputs[1]], node.attrs["eps"])

    def linear(self, node, x):
        if self.qg.method == "per-channel":  # CMSIS-NN arithmetic: static int8 in, int8 out
            t, st = self.qg.q4[node.inputs[1]], self.qg.static[node.output]
            q_out = exact.cmsis_fc_s4(exact.quantize_static_s8(x, exact.inverse_scale(st.in_scale)), t.q, st.bias,
                                      st.multipliers, st.shifts)
            return exact.dequantize_s8(q_out, st.out_scale)
        return self.linears(node, x[None])[0]

    def rope(self, node, x, pos):
        return exact.rope(x, node.attrs["n_heads"], node.attrs["head_dim"], self.cos[pos], self.sin[pos])

    def attention(self, node, q, k, v, pos):
        at = node.attrs
        layer, hd, nh, nkv = at["layer"], at["head_dim"], at["n_heads"], at["n_kv_heads"]
        if self.qg.kv_bits == 4:
            return self._attention_kv4(layer, hd, nh, nkv, q, k, v, pos)
        if self.qg.kv_bits == KV8V4:  # tllm_attention_k8v4
            g = self.kv4_group
            self.k_q[layer, pos], self.k_s[layer, pos] = exact.quantize_rows_i8(k.reshape(nkv, hd))
            self.v_q[layer, pos], self.v_s[layer, pos] = exact.quantize_rows_i4(v.reshape(nkv, hd), g)
            return exact.attention_k8v4(q.reshape(nh, hd), self.k_q[layer, : pos + 1], self.k_s[layer, : pos + 1],
                                        self.v_q[layer, : pos + 1], self.v_s[layer, : pos + 1], self.att_scale, g)
        self.k_q[layer, pos], self.k_s[layer, pos] = exact.quantize_rows_i8(k.reshape(nkv, hd))
        self.v_q[layer, pos], self.v_s[layer, pos] = exact.quantize_rows_i8(v.reshape(nkv, hd))
        return exact.attention_i8(q.reshape(nh, hd), self.k_q[layer, : pos + 1], self.k_s[layer, : pos + 1],
                                  self.v_q[layer, : pos + 1], self.v_s[layer, : pos + 1], self.att_scale)

    def _attention_kv4(self, layer, hd, nh, nkv, q, k, v, pos):
        g, scale = self.kv4_group, self.att_scale
        rotate = self.qg.kv_rotate == "hadamard"
        if rotate:  # tllm_attention_kv4_hadamard
            q, k = exact.hadamard_heads(q, nh, hd), exact.hadamard_heads(k, nkv, hd)
            scale = exact.rotated_attention_scale(scale, hd)
        centers = self.qg.kv_centers  # quant/kv_center.py: the cache holds k - c_k and v - c_v
        if centers is not None:
            k, v = exact.centered(k, centers.k[layer]), exact.centered(v, centers.v[layer])
        quantize_keys = exact.quantize_rows_i4_clip if rotate else exact.quantize_rows_i4
        quantize_values = exact.quantize_rows_i4_clip if centers is not None else exact.quantize_rows_i4
        self.k_q[layer, pos], self.k_s[layer, pos] = quantize_keys(k.reshape(nkv, hd), g)
        self.v_q[layer, pos], self.v_s[layer, pos] = quantize_values(v.reshape(nkv, hd), g)
        out = exact.attention_kv4(q.reshape(nh, hd), self.k_q[layer, : pos + 1], self.k_s[layer, : pos + 1],
                                  self.v_q[layer, : pos + 1], self.v_s[layer, : pos + 1], scale, g)
        return out if centers is None else exact.uncentered_output(out, centers.v[layer], nh, nkv, hd)

    def add(self, node, a, b):
        return (a + b).astype(np.float32)

    def silu_mul(self, node, gate, up):
        return exact.silu_mul(gate, up)

    def shift(self, sinks: int, discard: int, n_rows: int) -> None:
        """The context shift (context.py) layer by layer, as the firmware's context_shift calls
        tllm_kv_shift_i8 / tllm_kv_shift_kv4[_hadamard] / tllm_kv_shift_k8v4 (exact.kv_shift_*)."""
        cos, sin = self.cos[discard], self.sin[discard]
        for layer in range(self.qg.config.n_layers):
            caches = (self.k_q[layer], self.k_s[layer], self.v_q[layer], self.v_s[layer])
            if self.qg.kv_bits == 4:
                centers = self.qg.kv_centers
                exact.kv_shift_kv4(*caches, sinks, discard, n_rows, cos, sin, self.kv4_group,
                                   rotated=self.qg.kv_rotate == "hadamard",
                                   k_center=None if centers is None else centers.k[layer])
            elif self.qg.kv_bits == KV8V4:
                exact.kv_shift_k8v4(*caches, sinks, discard, n_rows, cos, sin)
            else:
                exact.kv_shift_i8(*caches, sinks, discard, n_rows, cos, sin)


class QuantLinears:
    """The group-wise quantized linears for P vectors at once ([P, cols] ->
    [P, rows]): the int8 activation groups, then exact.matmat_gguf
    (tllm_matvec_q40/q41/q80: llama.cpp's blocks kept) or matmat_q4
    (tllm_matvec_q4), every row bit for bit the firmware's matvec of its
    vector.  Each matrix is prepared once (exact.block_operand: 4 bytes
    per weight); the step kernels call it with P = 1, the sequence kernels
    (sequence.py) with a whole sequence."""

    def __init__(self, qgraph, chunk: int | None = None):
        self.qg = qgraph
        self.chunk = chunk  # rows per epilogue pass (None: exact.row_chunks' cache-sized default)
        self._ops: dict = {}

    def _operand(self, name: str):
        op = self._ops.get(name)
        if op is None:
            gm = getattr(self.qg, "gguf", {}).get(name)
            if gm is not None:
                op = exact.GGUFOperand.of(gm.qtype, *gm.fields())
            else:
                t = self.qg.q4[name]
                op = (exact.block_operand(t.q, t.group_size), np.ascontiguousarray(np.asarray(t.scales, np.float32).T))
            op = self._ops[name] = op
        return op

    def __call__(self, node: Node, x: np.ndarray) -> np.ndarray:
        bias = self.qg.vectors[node.inputs[2]] if len(node.inputs) > 2 else None
        op = self._operand(node.inputs[1])
        if isinstance(op, exact.GGUFOperand):
            xq, xs = exact.quantize_groups_i8(x, op.q.shape[1])
            return exact.matmat_gguf(op, xq, xs, bias, self.chunk)
        qb, scales_t = op
        xq, xs = exact.quantize_groups_i8(x, qb.shape[1])
        return exact.matmat_q4_operand(qb, scales_t, xq, xs, bias, self.chunk)
