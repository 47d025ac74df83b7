"""Centred int4 KV cache (`--kv-center`, on by default where the int4 keys
are Hadamard-rotated): each layer's cache holds k - c_k and v - c_v, where
c_k and c_v are the mean post-RoPE key and the mean value of each kv head
over calibration text.

Why it is exact in the model's arithmetic:
  * keys: every score of one query over the cache moves by the same q.c_k,
    and softmax does not see a shift common to all its inputs, so the
    attention weights are unchanged;
  * values: the weights sum to 1, so sum_t p_t (v_t - c_v) + c_v is the
    attention's output; the kernel adds c_v back after the weighted sum.

The centres are the means over the positions the build uses (context_windows
of its max_seq), so they are part of what compile decides after the plan.

Why it helps: a trained model's keys share a large common part (a few
channels with the same sign at every position: the bias the scores rest
on).  The Hadamard rotation spreads that common part over every element of
the head, so it sets every group's scale, and int4's 15 steps are spent on
what all positions share instead of on what tells them apart.  Measured on
SmolLM2-135M-Instruct (docs/numerics.md, the GPL-3 text in 63-token
documents): int4 KV +6.69% perplexity against the float model without
centring, +3.12% centred on the built-in sample.

Storage: c_k in the rotated frame (H c_k per head, so the kernel subtracts
it right after rotating k, no second transform) and c_v as it is, float32
[n_kv_heads * head_dim] per layer, in the weights blob as
`layers.N.kv_k_center` / `layers.N.kv_v_center`.  They are rounded to 8
significant bits (bfloat16's precision): a centre needs no more, and the
rounding keeps a build's bytes the same where two machines' float64
products differ in their last bit.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UserError
from ..ir import Graph
from ..reference.sequence import SeqFloatKernels, run_sequence
from .calibrated import calibration_documents

# The centres' default text (--calibration replaces it): everyday English of many kinds (news, letters,
# instructions, dialogue, explanation), written for this purpose: the keys' common part is the model's,
# not the text's, but a sample of one narrow kind shifts it (the weights' sample, quant/calibration.txt,
# is children's stories for the bundled model).
KV_CALIBRATION_TEXT = Path(__file__).with_name("kv_calibration.txt")
K_CENTER, V_CENTER = "kv_k_center", "kv_v_center"  # blob entry suffixes: layers.N.<suffix>


@dataclass(frozen=True)
class KVCenters:
    """Per layer: the rotated key centre and the value centre, float32 [kv_dim]."""

    k: tuple[np.ndarray, ...]
    v: tuple[np.ndarray, ...]

    def blob_items(self) -> list[tuple[str, np.ndarray]]:
        """(entry name, centre) in center_names' order."""
        return list(zip(center_names(len(self.k)), self.k + self.v))


def center_name(layer: int, which: str) -> str:
    return f"layers.{layer}.{which}"


def center_names(n_layers: int) -> list[str]:
    """The centres' blob entry names in the order build_blob writes them (KVCenters.blob_items)."""
    return [center_name(i, K_CENTER) for i in range(n_layers)] + [center_name(i, V_CENTER) for i in range(n_layers)]


def parse_center_name(name: str) -> tuple[int, str] | None:
    """(layer, K_CENTER | V_CENTER) for a centre's blob entry name, else None."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and parts[2] in (K_CENTER, V_CENTER):
        return int(parts[1]), parts[2]
    return None


def centers_from_blob(vectors: dict[str, np.ndarray], n_layers: int) -> KVCenters | None:
    """The centres among a blob's float vectors (lower/blob.read_blob), None when it has none."""
    k = [vectors.get(center_name(i, K_CENTER)) for i in range(n_layers)]
    v = [vectors.get(center_name(i, V_CENTER)) for i in range(n_layers)]
    if all(x is None for x in k + v):
        return None
    if any(x is None for x in k + v):
        raise UserError("the weights blob holds the KV centres of some layers only: recompile the tree")
    return KVCenters(tuple(k), tuple(v))


class _KVRecorder(SeqFloatKernels):
    """The float model, summing every attention's post-RoPE keys and values per layer."""

    def __init__(self, graph: Graph, max_seq: int):
        super().__init__(graph, max_seq)
        n, dim = graph.config.n_layers, graph.config.n_kv_heads * graph.config.head_dim
        self.k_sum = np.zeros((n, dim), np.float64)
        self.v_sum = np.zeros((n, dim), np.float64)
        self.count = 0

    def attention(self, node, q, k, v):
        layer = node.attrs["layer"]
        self.k_sum[layer] += np.asarray(k, np.float64).sum(axis=0)
        self.v_sum[layer] += np.asarray(v, np.float64).sum(axis=0)
        if layer == 0:
            self.count += k.shape[0]
        return super().attention(node, q, k, v)


def _hadamard64(x: np.ndarray, head_dim: int) -> np.ndarray:
    """The unnormalised Walsh-Hadamard transform of each head, in float64 (the
    firmware's transform is exact.hadamard_heads; a centre only needs to be close)."""
    y = x.reshape(-1, head_dim).copy()
    h = 1
    while h < head_dim:
        y = y.reshape(-1, head_dim // (2 * h), 2, h)
        a, b = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
        y[:, :, 0, :], y[:, :, 1, :] = a + b, a - b
        y = y.reshape(-1, head_dim)
        h *= 2
    return y.reshape(x.shape)


def _bf16_precision(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to 8 significant bits (to nearest, ties away from zero)."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.sign(m) * np.floor(np.abs(m) * 256.0 + 0.5) / 256.0, e).astype(np.float32)


WINDOW_MIN = 8  # a shorter tail of a document adds only the first positions' keys again


def kv_calibration_documents(tokenizer, calibration: Path | None, max_seq: int) -> list[list[int]]:
    """The centres' calibration documents: --calibration's text, else the built-in sample."""
    return calibration_documents(tokenizer, calibration or KV_CALIBRATION_TEXT, max_seq)


def context_windows(docs: Sequence[Sequence[int]], max_seq: int) -> list[list[int]]:
    """Each document cut into windows of max_seq tokens, each run from
    position 0 (tails shorter than WINDOW_MIN dropped): the positions of the
    build's context, as a request fills them.  A key's common part turns
    with its position (RoPE), so the mean over the positions a build uses is
    the one that centres its cache.  Measured on SmolLM2 for a 63-token
    context: centres over whole paragraphs (up to 130 positions) +4.80%
    perplexity, over the paragraphs' 63-token windows +3.12%, and over the
    paragraphs run on into one stream cut every 63 tokens +7.42% (its
    windows start mid-sentence, where a request starts with its first token)."""
    return [list(d[i:i + max_seq]) for d in docs for i in range(0, len(d), max_seq)
            if len(d[i:i + max_seq]) >= min(WINDOW_MIN, len(d))]


_MEMO: "OrderedDict[bytes, KVCenters]" = OrderedDict()  # the last few results (each a few KB)
_MEMO_SIZE = 8


def _memo_key(graph: Graph, windows: Sequence[Sequence[int]]) -> bytes:
    """A digest of everything the centres depend on: the float model (config,
    node list, every weight's name, shape and bytes) and the windows."""
    h = hashlib.blake2b(digest_size=32)
    h.update(repr((graph.config, [(n.op, n.inputs, n.output, sorted(n.attrs.items())) for n in graph.nodes])).encode())
    for name in sorted(graph.weights):
        w = np.ascontiguousarray(graph.weights[name])
        h.update(repr((name, w.dtype.str, w.shape)).encode())
        h.update(memoryview(w).cast("B"))
    for ids in windows:
        h.update(np.asarray(ids, np.int64).tobytes() + b";")
    return h.digest()


def kv_centers(graph: Graph, docs: Sequence[Sequence[int]], max_seq: int) -> KVCenters:
    """The mean post-RoPE key (rotated per head) and the mean value of each
    layer over the calibration documents (in context_windows of the build's
    max_seq), run through the float model.

    Remembered for the last few (model, windows): an eval over several weight
    formats, or a plan and a compile in one process, centre the same float
    model on the same text (a forward pass over the whole sample: about a
    minute for SmolLM2-135M; the digest of its weights takes a second)."""
    windows = context_windows(docs, max_seq)
    if not windows:
        raise UserError("the KV centres' calibration text has no tokens: give --calibration a few paragraphs")
    key = _memo_key(graph, windows)
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key]
    _MEMO[key] = centers = _kv_centers(graph, windows)
    if len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return centers


def _kv_centers(graph: Graph, windows: Sequence[Sequence[int]]) -> KVCenters:
    rec = _KVRecorder(graph, max(len(w) for w in windows))
    for ids in windows:
        run_sequence(graph, rec, ids, need_logits=False)
    hd = graph.config.head_dim
    k_mean, v_mean = rec.k_sum / rec.count, rec.v_sum / rec.count
    k = tuple(_bf16_precision(_hadamard64(k_mean[i], hd)) for i in range(graph.config.n_layers))
    v = tuple(_bf16_precision(v_mean[i]) for i in range(graph.config.n_layers))
    for x in k + v:
        x.setflags(write=False)  # remembered and shared: nobody may change them in place
    return KVCenters(k, v)
