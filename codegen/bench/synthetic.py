"""Random-weight models of well-known shapes, written as Hugging Face
directories with numpy only (no torch): the benchmark's fixed workloads.

The tokenizer is a plain byte-level vocabulary (256 bytes + <s> + </s>,
padded with unused tokens to the shape's vocabulary size), so the firmware
has a real vocabulary to print without any training."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from .. import timing
from ..timing import Shape


# llama2.c's stories260K (the shape the targets in the issues are measured on) and stories15M: the
# timing model's shapes (one Shape for both), with the context their config.json states
SHAPES = {name: timing.SHAPES[name] for name in ("stories260k", "stories15m")}


def _byte_tokenizer(vocab: int) -> dict:
    byte_to_unicode = pre_tokenizers.ByteLevel.alphabet()
    chars = sorted(byte_to_unicode)
    tok_vocab = {"<s>": 0, "</s>": 1}
    for ch in chars:
        tok_vocab[ch] = len(tok_vocab)
    for i in range(len(tok_vocab), vocab):
        tok_vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=tok_vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return json.loads(tok.to_str())


def write_random_llama(out: Path, shape: Shape, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    hd = shape.dim // shape.heads
    t: dict[str, np.ndarray] = {}

    def w(name: str, rows: int, cols: int) -> None:
        t[name] = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w("model.embed_tokens.weight", shape.vocab, shape.dim)
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w(p + "self_attn.q_proj.weight", shape.heads * hd, shape.dim)
        w(p + "self_attn.k_proj.weight", shape.kv_heads * hd, shape.dim)
        w(p + "self_attn.v_proj.weight", shape.kv_heads * hd, shape.dim)
        w(p + "self_attn.o_proj.weight", shape.dim, shape.heads * hd)
        w(p + "mlp.gate_proj.weight", shape.hidden, shape.dim)
        w(p + "mlp.up_proj.weight", shape.hidden, shape.dim)
        w(p + "mlp.down_proj.weight", shape.dim, shape.hidden)
        t[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(shape.dim)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(shape.dim)).astype(np.float32)
    t["model.norm.weight"] = np.ones(shape.dim, np.float32)
    out.mkdir(parents=True, exist_ok=True)
    save_file(t, str(out / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.dim,
        "intermediate_size": shape.hidden, "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "vocab_size": shape.vocab, "max_position_embeddings": shape.context,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True, "hidden_act": "silu",
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(_byte_tokenizer(shape.vocab)) + "\n")
    return out
