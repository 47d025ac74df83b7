"""Depth pruning: drop whole transformer blocks by measured importance.

Importance of block i = the calibration loss increase when block i is
skipped (its input passed straight to block i+1), every block measured on the
full model, and the blocks with the smallest increase are removed.

Why the loss and not hidden-state cosine similarity: the similarity of a
block's input and output says how much the block changes the residual, not
whether the change matters to what the model predicts; a late block can
change the residual little and still decide the next token, and an early
block's large change can be undone downstream.  The loss increase measures
the quantity distillation then has to recover, exactly, and costs one
calibration forward per block (the same price as the attention-group
importance in prune.py).  Scores are taken once on the full model rather
than greedily after each removal: greedy re-scoring costs layers x removed
forwards (about 400 for 30 -> 10 blocks of SmolLM2, hours on this machine),
one-shot costs 30.

The surviving blocks keep their order; their attention `layer_idx` (the KV
cache slot) is renumbered and `num_hidden_layers` (and `layer_types` where
the config has one) follow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .prune import keep_count
from .torch_io import make_batch


@dataclass(frozen=True)
class DepthPruneReport:
    layers_before: int
    kept: list  # kept block indices, ascending (indices of the model before pruning)
    loss_increase: list  # per block: calibration loss with the block skipped - base loss
    base_loss: float


def _set_layers(model, layers) -> None:
    import torch

    model.model.layers = torch.nn.ModuleList(layers)
    model.config.num_hidden_layers = len(layers)  # LlamaModel runs layers[:num_hidden_layers]


def _loss(model, ids, labels) -> float:
    """Calibration loss without a KV cache: while a block is skipped, the later
    blocks' layer_idx no longer match the cache's slots."""
    import torch

    with torch.no_grad():
        return float(model(input_ids=ids, labels=labels, use_cache=False).loss)


def block_importance(model, calib: Sequence[Sequence[int]], pad_id: int) -> tuple:
    """(base loss, per-block loss increase when that block alone is skipped)."""
    import torch

    ids, labels = make_batch(calib, pad_id)
    model.eval()
    full = list(model.model.layers)
    n = model.config.num_hidden_layers
    base = _loss(model, ids, labels)
    scores = []
    try:
        for i in range(len(full)):
            _set_layers(model, full[:i] + full[i + 1:])
            scores.append(_loss(model, ids, labels) - base)
    finally:
        model.model.layers = torch.nn.ModuleList(full)
        model.config.num_hidden_layers = n
    return base, scores


def prune_depth(model, calib: Sequence[Sequence[int]], pad_id: int, fraction: float) -> DepthPruneReport:
    """Removes round(layers * fraction) blocks of `model` in place (a transformers Llama/Qwen2)."""
    full = list(model.model.layers)
    keep = keep_count(len(full), fraction, "layers")
    base, scores = block_importance(model, calib, pad_id)
    # Most important first; a tie keeps the earlier block (stable sort), so the choice is deterministic.
    kept = sorted(sorted(range(len(full)), key=lambda i: -scores[i])[:keep])
    _set_layers(model, [full[i] for i in kept])
    for new, layer in enumerate(model.model.layers):
        layer.self_attn.layer_idx = new
    types = getattr(model.config, "layer_types", None)
    if isinstance(types, list) and len(types) == len(full):
        model.config.layer_types = [types[i] for i in kept]
    return DepthPruneReport(len(full), kept, scores, base)
