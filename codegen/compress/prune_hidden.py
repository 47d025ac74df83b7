"""Structured pruning of the residual width (hidden_size), after heads and FFN.

Channel c of the residual stream is read by every RMSNorm and written by the
embedding, every o_proj and every down_proj; removing it means dropping
column c of the embedding (and of an untied classifier), of q/k/v and
gate/up, row c of o_proj and down_proj, and entry c of every norm gain.

Importance of channel c (activation-based, as in width pruning of LLMs):
sqrt(sum over all norms of E[y_c^2]), y = the norm's output on calibration
tokens: how much signal the channel actually carries into the layers and
the classifier.  The same channels go from every layer, because the
residual is one stream.

RMSNorm divides by the RMS over ALL channels; the kept ones alone have a
different RMS, so each norm's gain is multiplied by E[rms(x_kept) / rms(x)]
measured on the same tokens: on average the pruned model's norm outputs
match the original's on the kept channels (exactly, when the dropped
channels carry nothing: tests/unit/test_compress.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .prune import _take_cols, _take_rows, keep_count
from .torch_io import make_batch


@dataclass(frozen=True)
class HiddenPruneReport:
    hidden_before: int
    hidden_after: int
    kept: list  # kept residual channel indices (ascending)
    importance: list  # per channel, before pruning


def _norms(model) -> list:
    layers = model.model.layers
    return [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)] + [model.model.norm]


def prune_hidden(model, calib: Sequence[Sequence[int]], pad_id: int, fraction: float) -> HiddenPruneReport:
    """Prunes the residual width of `model` in place (a transformers Llama/Qwen2)."""
    import torch

    cfg = model.config
    d = cfg.hidden_size
    keep = keep_count(d, fraction, "hidden")
    ids, labels = make_batch(calib, pad_id)
    mask = (labels != -100).reshape(-1)
    norms = _norms(model)
    energy = torch.zeros(d, dtype=torch.float64)
    inputs: dict[int, torch.Tensor] = {}

    def hook(i):
        def run(_mod, inp, out):
            y = out.reshape(-1, d)[mask].double()
            energy.add_((y * y).mean(dim=0))
            inputs[i] = inp[0].reshape(-1, d)[mask].detach().double()
        return run

    handles = [n.register_forward_hook(hook(i)) for i, n in enumerate(norms)]
    model.eval()
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    importance = energy.sqrt()
    kept = torch.sort(torch.argsort(importance, descending=True, stable=True)[:keep]).values

    with torch.no_grad():
        for i, n in enumerate(norms):
            x = inputs[i]
            ratio = (x[:, kept].pow(2).mean(dim=1).sqrt() / x.pow(2).mean(dim=1).sqrt().clamp_min(1e-12)).mean()
            n.weight = torch.nn.Parameter((n.weight.data[kept] * ratio.float()).clone())
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        emb = model.model.embed_tokens
        emb.weight = torch.nn.Parameter(emb.weight.data[:, kept].clone())
        emb.embedding_dim = keep
        if tied:
            model.lm_head.weight = emb.weight
            model.lm_head.in_features = keep
        else:
            _take_cols(model.lm_head, kept)
        for layer in model.model.layers:
            at, mlp = layer.self_attn, layer.mlp
            for lin in (at.q_proj, at.k_proj, at.v_proj, mlp.gate_proj, mlp.up_proj):
                _take_cols(lin, kept)
            for lin in (at.o_proj, mlp.down_proj):
                _take_rows(lin, kept)
        if getattr(cfg, "head_dim", None) is None:
            cfg.head_dim = d // cfg.num_attention_heads  # no longer hidden_size / heads
    cfg.hidden_size = keep
    return HiddenPruneReport(d, keep, kept.tolist(), importance.tolist())
