"""`tinyllm-gen convert model.gguf -o DIR`: a GGUF file as a Hugging Face folder.

For `compress` (which trains with transformers) and for users: config.json
(LlamaConfig / Qwen2Config / Phi3Config fields), model.safetensors,
tokenizer.json + tokenizer_config.json (chat template, BOS/EOS, add_bos) and
generation_config.json, written from the GGUF import itself, so no detour
through llama.cpp or transformers' GGUF loader.

The weights are stored as float32: they are the dequantized GGUF values
(d * q + m computed in float32), which bf16/fp16 cannot hold exactly, and
float32 keeps `load_hf(DIR)` bit-identical to `load_gguf(model.gguf)`, so
everything downstream sees the same numbers either way.  (A Q4_1 135M model
becomes 540 MB instead of 98 MB; that is the price of exactness.)

DIR is written to a sibling temp directory and renamed into place: it is
either absent or complete."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from tokenizers import Tokenizer as HFTokenizer
from safetensors.numpy import save_file

from .errors import UserError
from .frontends.gguf import GGUFModel, load_gguf

_HF_ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
            "phi3": ("Phi3ForCausalLM", "phi3")}


def hf_config(m: GGUFModel) -> dict:
    c = m.graph.config
    arch, model_type = _HF_ARCH[c.arch]
    meta = m.metadata
    context = int(meta.get(f"{c.arch}.context_length", c.max_seq))
    cfg = {
        "architectures": [arch], "model_type": model_type,
        "hidden_size": c.dim, "intermediate_size": c.hidden_dim, "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
        "vocab_size": c.vocab_size, "max_position_embeddings": context,
        "rms_norm_eps": float(c.norm_eps), "rope_theta": float(c.rope_theta),
        "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_theta)},
        "hidden_act": "silu", "tie_word_embeddings": bool(c.tied_embeddings),
        "bos_token_id": c.bos_id, "eos_token_id": (list(c.eos_ids) if len(c.eos_ids) > 1 else
                                                   (c.eos_ids[0] if c.eos_ids else None)),
        "pad_token_id": None, "torch_dtype": "float32", "use_cache": True,
    }
    if c.arch == "llama":
        cfg.update(attention_bias=False, mlp_bias=False)
    elif c.arch == "qwen2":
        cfg.update(use_sliding_window=False, sliding_window=None)
    else:
        window = meta.get("phi3.attention.sliding_window")
        cfg.update(sliding_window=int(window) if window else None, original_max_position_embeddings=context)
    return cfg


def hf_state_dict(m: GGUFModel) -> dict[str, np.ndarray]:
    """Canonical names -> transformers' parameter names (phi3 re-fused)."""
    c = m.graph.config
    w = m.graph.weights
    sd = {"model.embed_tokens.weight": w["tok_embeddings"], "model.norm.weight": w["norm"]}
    if not c.tied_embeddings:
        sd["lm_head.weight"] = w["output"]
    for i in range(c.n_layers):
        p, h = f"layers.{i}.", f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = w[p + "attention_norm"]
        sd[h + "post_attention_layernorm.weight"] = w[p + "ffn_norm"]
        sd[h + "self_attn.o_proj.weight"] = w[p + "wo"]
        sd[h + "mlp.down_proj.weight"] = w[p + "w_down"]
        if c.arch == "phi3":
            sd[h + "self_attn.qkv_proj.weight"] = np.concatenate([w[p + "wq"], w[p + "wk"], w[p + "wv"]])
            sd[h + "mlp.gate_up_proj.weight"] = np.concatenate([w[p + "w_gate"], w[p + "w_up"]])
        else:
            for x in "qkv":
                sd[h + f"self_attn.{x}_proj.weight"] = w[p + "w" + x]
                if c.qkv_bias:
                    sd[h + f"self_attn.{x}_proj.bias"] = w[p + "b" + x]
            sd[h + "mlp.gate_proj.weight"] = w[p + "w_gate"]
            sd[h + "mlp.up_proj.weight"] = w[p + "w_up"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def tokenizer_files(m: GGUFModel) -> dict[str, str]:
    tok = m.tokenizer
    if tok is None or tok.hf_json is None:
        return {}

    hf = HFTokenizer.from_str(tok.hf_json)
    name = (lambda i: hf.id_to_token(i) if i is not None else None)
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": tok.add_bos, "add_eos_token": False,
        "bos_token": name(tok.bos_id), "eos_token": name(tok.eos_id),
        "clean_up_tokenization_spaces": False,
        "model_max_length": m.graph.config.max_seq,
    }
    if tok.chat_template:
        cfg["chat_template"] = tok.chat_template
    return {"tokenizer.json": tok.hf_json, "tokenizer_config.json": json.dumps(cfg, indent=2) + "\n"}


def convert(gguf_path: Path, out: Path) -> GGUFModel:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory: choose a new or empty -o")
    m = load_gguf(Path(gguf_path))
    c = m.graph.config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(hf_config(m), indent=2) + "\n")
        gen = {"bos_token_id": c.bos_id, "eos_token_id": list(c.eos_ids) if len(c.eos_ids) > 1 else
               (c.eos_ids[0] if c.eos_ids else None), "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        save_file(hf_state_dict(m), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, text in tokenizer_files(m).items():
            (tmp / name).write_text(text, encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        for f in [tmp, *tmp.iterdir()]:  # mkdtemp and safetensors create owner-only files
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
        if out.exists():
            out.rmdir()  # empty (checked above)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return m
