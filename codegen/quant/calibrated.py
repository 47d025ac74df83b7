"""Calibrated INT4 (`--weight-quant clip|awq|gptq`): Graph + calibration text -> QuantizedGraph.

* clip: every matrix gets error-minimising group scales (quant/clip.py),
  weighted by its input's second moment on calibration text;
* awq:  activation-aware per-channel scaling folded into the graph
  (quant/awq.py), then the same clipping on the scaled matrices;
* gptq: columns rounded in order with each one's error spread over the
  columns not yet rounded, by the input's full second moment E[x x^T]
  (quant/gptq.py); group scales by the same clip search.

The output is an ordinary QuantizedGraph (Q4 tensors + float vectors, the
formats of quant/formats.py), so lowering, the firmware and the reference
need no change and stay bit-identical; `graph` in it is the scaled float
graph (the same function as the input in exact arithmetic).

The tied embedding/classifier is looked up as an embedding AND used as the
classifier: its clipping weight mixes the classifier input's second moment
with a uniform term for the lookup (both normalised to mean 1); gptq mixes
the full matrix the same way (H / mean diag H + I).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UserError
from ..ir import Graph, output_weight_name
from .formats import GROUP_SIZES, WEIGHT_QUANTS as ALL_WEIGHT_QUANTS, QuantizedGraph
from .kv import KV8, KVBits, parse_kv_bits
from .rtn import quantize_graph
from .per_channel import DEFAULT_CALIBRATION_TEXT
from ..reference.sequence import SeqFloatKernels, run_sequence
from .awq import apply_awq
from .clip import quantize_q4_clip
from .gptq import quantize_q4_gptq

WEIGHT_QUANTS = tuple(m for m in ALL_WEIGHT_QUANTS if m != "gguf")  # the ones this module makes
CALIBRATION_TOKENS = 4096  # enough for a stable E[x^2] per channel at these widths
DOC_SEPARATOR = "\n\n"


def calibration_documents(tokenizer, text_file: Path | None, max_seq: int,
                          max_tokens: int = CALIBRATION_TOKENS) -> list[list[int]]:
    """Documents (split at blank lines) from BOS, up to `max_tokens` tokens in all."""
    path = Path(text_file) if text_file else DEFAULT_CALIBRATION_TEXT
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read calibration text ({getattr(e, 'strerror', None) or e}); "
                        "pass --calibration FILE") from None
    docs, total = [], 0
    for d in (d.strip() for d in text.split(DOC_SEPARATOR)):
        if not d or total >= max_tokens:
            continue
        ids = tokenizer.encode(d)[:max_seq]
        docs.append(ids[: max_tokens - total])
        total += len(docs[-1])
    if total < 8:
        raise UserError(f"{path}: calibration text is only {total} tokens; give at least a few sentences")
    return docs


def linear_inputs(graph: Graph, docs: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """Every linear's input value on the calibration documents, float model: [tokens, n]."""
    names = {n.inputs[0] for n in graph.nodes if n.op == "linear"}
    kern = SeqFloatKernels(graph, max(len(d) for d in docs))
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for ids in docs:
        _, kept = run_sequence(graph, kern, ids, keep=names, need_logits=False)  # the classifier's input, not its output
        for n in names:
            parts[n].append(kept[n])
    return {n: np.concatenate(v).astype(np.float64) for n, v in parts.items()}


def quantize_calibrated(graph: Graph, docs: Sequence[Sequence[int]], method: str, group_size: int = 32,
                        kv_bits: KVBits = KV8, kernels: str = "portable") -> QuantizedGraph:
    if method not in WEIGHT_QUANTS:
        raise UserError(f"--weight-quant {method} is not known: choose one of {', '.join(WEIGHT_QUANTS)}")
    if group_size not in GROUP_SIZES:
        raise UserError(f"--group-size {group_size} is not supported: choose one of {', '.join(map(str, GROUP_SIZES))}")
    kv_bits = parse_kv_bits(kv_bits)
    if method == "rtn":
        return quantize_graph(graph, group_size, kv_bits, kernels)
    acts = linear_inputs(graph, docs)
    col_scale: dict[str, np.ndarray] = {}
    if method == "awq":
        graph, col_scale, _ = apply_awq(graph, acts, group_size)
    second = {}  # weight name -> E[x_j^2] (clip, awq) or E[x x^T] (gptq) of the (scaled) input it multiplies
    moments: dict[str, np.ndarray] = {}  # gptq: one [n, n] matrix per input value, shared by its consumers
    for node in graph.nodes:
        if node.op == "linear":
            w = node.inputs[1]
            x = acts[node.inputs[0]] / col_scale.get(w, 1.0)
            if method != "gptq":
                second[w] = (x * x).mean(axis=0)
                continue
            if node.inputs[0] not in moments:
                moments[node.inputs[0]] = x.T @ x / len(x)
            second[w] = moments[node.inputs[0]]
    tied = output_weight_name(graph.config) == "tok_embeddings"
    if tied:
        h = second["tok_embeddings"]  # E[x_j^2], or E[x x^T] for gptq
        full = h.ndim == 2
        lookup = np.eye(len(h)) if full else 1.0  # an embedding row's error counts uniformly
        second["tok_embeddings"] = h / (np.diag(h) if full else h).mean() + lookup
    q4, vectors = {}, {}
    for name in graph.weight_names():
        w = graph.weights[name]
        if w.ndim == 2 and method == "gptq" and name in second:  # an untied embedding is no linear: clip
            q4[name] = quantize_q4_gptq(name, w, group_size, second[name])
        elif w.ndim == 2:
            q4[name] = quantize_q4_clip(name, w, group_size, second.get(name))
        else:
            vectors[name] = np.ascontiguousarray(w, dtype=np.float32)
    return QuantizedGraph(graph=graph, q4=q4, vectors=vectors, group_size=group_size, kv_bits=kv_bits,
                          method=method, kernels=kernels)
