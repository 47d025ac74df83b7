"""Structured pruning: drop whole attention groups and FFN channels by importance
measured on calibration text, giving a smaller model of the same family.

Attention: with grouped-query attention a KV head is shared by `kv_group`
query heads, so the unit we remove is one KV head together with its query
heads (q/k/v rows, o_proj columns); the group size stays the same and the
result is still a valid GQA config.  A group's importance is the increase of
the calibration loss when its contribution is removed (its o_proj columns
zeroed): exact, and cheap at these sizes (one forward per group).

FFN: channel j of the SwiGLU MLP contributes a_j * W_down[:, j] with
a = silu(gate) * up; its importance is sqrt(E[a_j^2]) * ||W_down[:, j]||,
the RMS size of that contribution on calibration tokens.

Every layer keeps the same number of groups and channels, because a Hugging
Face config states one head count and one intermediate size for all layers.
The residual width (hidden_size) is kept: the embedding, norms and
classifier are unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import UserError
from .torch_io import make_batch


@dataclass(frozen=True)
class PruneReport:
    kept_groups: list  # per layer: kept KV head indices
    kept_channels: list  # per layer: number of FFN channels kept
    group_importance: list  # per layer: loss increase per KV group
    heads: tuple  # (n_heads, n_kv_heads) after
    ffn: int


def keep_count(n: int, fraction: float, what: str) -> int:
    if not 0.0 <= fraction < 1.0:
        raise UserError(f"--prune-{what} {fraction} must be in [0, 1): the fraction to remove")
    return max(1, int(round(n * (1.0 - fraction))))


def _loss(model, ids, labels) -> float:
    import torch

    with torch.no_grad():
        return float(model(input_ids=ids, labels=labels).loss)


def prune(model, calib: Sequence[Sequence[int]], pad_id: int, heads_fraction: float, ffn_fraction: float):
    """Prunes `model` in place (a transformers Llama/Qwen2) and returns the report."""
    import torch

    cfg = model.config
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    group = nh // nkv
    keep_kv = keep_count(nkv, heads_fraction, "heads")
    keep_ffn = keep_count(cfg.intermediate_size, ffn_fraction, "ffn")
    ids, labels = make_batch(calib, pad_id)
    layers = model.model.layers
    model.eval()

    base = _loss(model, ids, labels)
    importance = []
    for layer in layers:
        o = layer.self_attn.o_proj.weight
        scores = []
        for g in range(nkv):
            cols = slice(g * group * hd, (g + 1) * group * hd)
            saved = o.data[:, cols].clone()
            o.data[:, cols] = 0
            scores.append(_loss(model, ids, labels) - base)
            o.data[:, cols] = saved
        importance.append(scores)

    acts = []  # E[a_j^2] per layer over real (non-pad) tokens
    mask = (labels != -100).reshape(-1)

    def hook(_mod, inp):
        a = inp[0].reshape(-1, inp[0].shape[-1])[mask]
        acts.append((a * a).mean(dim=0))

    handles = [layer.mlp.down_proj.register_forward_pre_hook(hook) for layer in layers]
    try:
        _loss(model, ids, labels)
    finally:
        for h in handles:
            h.remove()

    kept_groups, kept_channels = [], []
    with torch.no_grad():
        for i, layer in enumerate(layers):
            kv = sorted(sorted(range(nkv), key=lambda g: -importance[i][g])[:keep_kv])
            q_rows = torch.tensor([g * group * hd + r for g in kv for r in range(group * hd)])
            kv_rows = torch.tensor([g * hd + r for g in kv for r in range(hd)])
            at = layer.self_attn
            _take_rows(at.q_proj, q_rows)
            _take_rows(at.k_proj, kv_rows)
            _take_rows(at.v_proj, kv_rows)
            _take_cols(at.o_proj, q_rows)
            mlp = layer.mlp
            score = acts[i].sqrt() * mlp.down_proj.weight.norm(dim=0)
            ch = torch.sort(torch.argsort(score, descending=True, stable=True)[:keep_ffn]).values
            _take_rows(mlp.gate_proj, ch)
            _take_rows(mlp.up_proj, ch)
            _take_cols(mlp.down_proj, ch)
            for m in (at,):  # attention modules cache their head counts
                for attr, val in (("num_heads", keep_kv * group), ("num_key_value_heads", keep_kv)):
                    if hasattr(m, attr):
                        setattr(m, attr, val)
            kept_groups.append(kv)
            kept_channels.append(keep_ffn)
    cfg.num_attention_heads, cfg.num_key_value_heads = keep_kv * group, keep_kv
    cfg.head_dim = hd  # no longer hidden_size / heads in general
    cfg.intermediate_size = keep_ffn
    return PruneReport(kept_groups, kept_channels, importance, (keep_kv * group, keep_kv), keep_ffn)


def _take_rows(lin, rows) -> None:
    import torch

    lin.weight = torch.nn.Parameter(lin.weight.data[rows].clone())
    if lin.bias is not None:
        lin.bias = torch.nn.Parameter(lin.bias.data[rows].clone())
    lin.out_features = len(rows)


def _take_cols(lin, cols) -> None:
    import torch

    lin.weight = torch.nn.Parameter(lin.weight.data[:, cols].clone())
    lin.in_features = len(cols)
