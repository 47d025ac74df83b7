"""`tinyllm-gen inspect`: what a model is and what it costs at each precision."""
from __future__ import annotations

from .frontends import ImportedModel
from .quant.formats import GROUP_SIZES, n_groups, q4_row_bytes

SHOWN_IGNORED = 12  # ignored tensors listed by the text form of `inspect`


def _matrix_shapes(model: ImportedModel) -> list[tuple[int, int]]:
    return [w.shape for w in model.graph.weights.values() if w.ndim == 2]


def describe(model: ImportedModel) -> dict:
    c = model.graph.config
    mats = _matrix_shapes(model)
    vec_params = sum(w.size for w in model.graph.weights.values() if w.ndim == 1)
    mat_params = sum(r * k for r, k in mats)
    sizes = {"fp32": 4 * (mat_params + vec_params), "fp16": 2 * (mat_params + vec_params),
             "int8_g32": mat_params + 4 * sum(r * n_groups(k, 32) for r, k in mats) + 4 * vec_params}
    for g in GROUP_SIZES:
        sizes[f"int4_g{g}"] = sum(r * q4_row_bytes(k) + 4 * r * n_groups(k, g) for r, k in mats) + 4 * vec_params
    kv_per_token_int8 = c.n_layers * 2 * (c.kv_dim + 4 * c.n_kv_heads)
    return {
        "source": model.source, "architecture": c.arch, "parameters": c.n_params(),
        "dim": c.dim, "hidden_dim": c.hidden_dim, "n_layers": c.n_layers, "n_heads": c.n_heads,
        "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "vocab_size": c.vocab_size, "context": c.max_seq,
        "rope_theta": c.rope_theta, "norm_eps": c.norm_eps, "tied_embeddings": c.tied_embeddings,
        "qkv_bias": c.qkv_bias, "bos_id": c.bos_id, "eos_ids": list(c.eos_ids),
        "weight_bytes": sizes, "kv_cache_bytes_per_token_int8": kv_per_token_int8,
        "tokenizer": model.tokenizer.source if model.tokenizer else None,
        "ignored_tensors": list(model.ignored),
    }


def describe_text(info: dict) -> str:
    lines = [f"{info['source']}",
             f"  architecture   {info['architecture']}  ({info['parameters']:,} parameters)",
             f"  shape          dim {info['dim']}, hidden {info['hidden_dim']}, {info['n_layers']} layers, "
             f"{info['n_heads']} heads ({info['n_kv_heads']} KV, head_dim {info['head_dim']})",
             f"  vocabulary     {info['vocab_size']}   context {info['context']}",
             f"  rope_theta     {info['rope_theta']:g}   norm eps {info['norm_eps']:g}",
             f"  embeddings     {'tied' if info['tied_embeddings'] else 'untied'}"
             f"{'   q/k/v bias' if info['qkv_bias'] else ''}",
             "  weight bytes:"]
    for k, v in info["weight_bytes"].items():
        lines.append(f"    {k:<10} {v:>12,} B  ({v / 1024:.1f} KiB)")
    lines.append(f"  KV cache (int8 + scales): {info['kv_cache_bytes_per_token_int8']:,} B per token")
    ignored = info.get("ignored_tensors") or []
    if ignored:
        lines.append(f"  ignored tensors ({len(ignored)}: in the file, not in the compiled model):")
        lines += [f"    {entry}" for entry in ignored[:SHOWN_IGNORED]]
        if len(ignored) > SHOWN_IGNORED:
            lines.append(f"    ... and {len(ignored) - SHOWN_IGNORED} more (--json lists them all)")
    return "\n".join(lines)
