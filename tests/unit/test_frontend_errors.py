"""The HF frontend refuses what it cannot run, by name, in one line.

Checkpoints are written by hand (numpy + safetensors, no torch) so each case
is one small edit of a known-good directory."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.frontends.hf import load_hf

DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB, MAXPOS = 32, 48, 2, 4, 2, 64, 64
HD = DIM // HEADS
ARCH = {"llama": "LlamaForCausalLM", "phi3": "Phi3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def tensors(arch: str, tied: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(VOCAB, DIM), "model.norm.weight": r(DIM)}
    if not tied:
        t["lm_head.weight"] = r(VOCAB, DIM)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = r(DIM)
        t[p + "post_attention_layernorm.weight"] = r(DIM)
        t[p + "self_attn.o_proj.weight"] = r(DIM, HEADS * HD)
        t[p + "mlp.down_proj.weight"] = r(DIM, HIDDEN)
        if arch == "phi3":
            t[p + "self_attn.qkv_proj.weight"] = r((HEADS + 2 * KV) * HD, DIM)
            t[p + "mlp.gate_up_proj.weight"] = r(2 * HIDDEN, DIM)
            continue
        for proj, heads in (("q", HEADS), ("k", KV), ("v", KV)):
            t[f"{p}self_attn.{proj}_proj.weight"] = r(heads * HD, DIM)
            if arch == "qwen2":
                t[f"{p}self_attn.{proj}_proj.bias"] = r(heads * HD)
        t[p + "mlp.gate_proj.weight"] = r(HIDDEN, DIM)
        t[p + "mlp.up_proj.weight"] = r(HIDDEN, DIM)
    return t


def config(arch: str, **over) -> dict:
    cfg = {"architectures": [ARCH[arch]], "hidden_size": DIM, "intermediate_size": HIDDEN,
           "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV,
           "vocab_size": VOCAB, "max_position_embeddings": MAXPOS, "rms_norm_eps": 1e-6,
           "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": [2, 3],
           "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    cfg.update(over)
    return {k: v for k, v in cfg.items() if v is not _DROP}


_DROP = object()


def write(d: Path, arch: str = "llama", cfg: dict | None = None, t: dict | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg if cfg is not None else config(arch)))
    save_file(t if t is not None else tensors(arch), str(d / "model.safetensors"))
    return d


def refused(path: Path, *needles: str) -> str:
    with pytest.raises(UserError) as e:
        load_model(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


# ---------------------------------------------------------- the good cases


@pytest.mark.parametrize("arch", list(ARCH))
def test_handwritten_checkpoints_load(tmp_path, arch):
    m = load_hf(write(tmp_path, arch))
    c = m.graph.config
    assert (c.arch, c.eos_ids, c.bos_id, c.qkv_bias) == (arch, (2, 3), 1, arch == "qwen2")
    assert m.tokenizer is None


def test_transformers4_style_config_and_generation_config(tmp_path):
    """rope_theta at top level (transformers 4); bos/eos only in generation_config.json."""
    cfg = config("llama", rope_parameters=_DROP, rope_theta=500000.0, rope_scaling=None,
                 bos_token_id=_DROP, eos_token_id=_DROP)
    d = write(tmp_path, cfg=cfg)
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 5, "eos_token_id": 6}))
    c = load_hf(d).graph.config
    assert (c.rope_theta, c.bos_id, c.eos_ids) == (500000.0, 5, (6,))


def test_tied_model_ignores_stale_lm_head(tmp_path):
    t = tensors("qwen2", tied=False)  # lm_head present although tied: transformers ignores it
    c = load_hf(write(tmp_path, cfg=config("qwen2", tie_word_embeddings=True), t=t)).graph
    assert c.config.tied_embeddings and "output" not in c.weights


# ------------------------------------------------------------ config refusals


def test_unknown_architecture(tmp_path):
    msg = refused(write(tmp_path, cfg=config("llama", architectures=["GPT2LMHeadModel"])))
    assert msg == ("unsupported architecture 'GPT2LMHeadModel' in config.json: supported are "
                   "LlamaForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM")


def test_missing_and_invalid_config(tmp_path):
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "no config.json")
    d = write(tmp_path / "bad")
    (d / "config.json").write_text("{not json")
    refused(d, "config.json", "not valid JSON")
    refused(write(tmp_path / "noarch", cfg=config("llama", architectures=_DROP)), "architectures")
    refused(write(tmp_path / "dim", cfg=config("llama", hidden_size=0)), "hidden_size")
    refused(write(tmp_path / "gqa", cfg=config("llama", num_key_value_heads=3)), "num_key_value_heads 3")
    refused(write(tmp_path / "eos", cfg=config("llama", eos_token_id=[2, 640])), "eos_token_id 640")
    refused(tmp_path / "nowhere", "nowhere", "no such file")


@pytest.mark.parametrize("over,needles", [
    (dict(rope_scaling={"type": "linear", "factor": 2.0}), ("rope_scaling", "linear")),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}), ("rope_scaling", "yarn")),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     ("partial_rotary_factor 0.5",)),
    (dict(partial_rotary_factor=0.25), ("partial_rotary_factor 0.25",)),
    (dict(sliding_window=16), ("sliding_window 16",)),
    (dict(layer_types=["full_attention", "sliding_attention"]), ("sliding_attention",)),
    (dict(hidden_act="gelu_pytorch_tanh"), ("hidden_act", "gelu_pytorch_tanh")),
    (dict(attention_bias=True), ("attention_bias", "o_proj")),
    (dict(mlp_bias=True), ("mlp_bias",)),
], ids=["rope_scaling", "rope_type", "partial_rotary", "partial_rotary_v4", "sliding_window",
        "layer_types", "hidden_act", "attention_bias", "mlp_bias"])
def test_llama_config_refusals(tmp_path, over, needles):
    refused(write(tmp_path, cfg=config("llama", **over)), "config.json", *needles)


def test_sliding_window_variants(tmp_path):
    refused(write(tmp_path / "q", "qwen2", cfg=config("qwen2", use_sliding_window=True, sliding_window=16)),
            "use_sliding_window")
    # Phi-3's window never slides below its own length: the context becomes the window.
    assert load_hf(write(tmp_path / "p", "phi3", cfg=config("phi3", sliding_window=MAXPOS - 1))).graph.config.max_seq \
        == MAXPOS - 1
    # Windows that cover the whole context never slide: accepted.
    load_hf(write(tmp_path / "p2", "phi3", cfg=config("phi3", sliding_window=MAXPOS)))
    load_hf(write(tmp_path / "q2", "qwen2", cfg=config("qwen2", use_sliding_window=False, sliding_window=16)))


# ------------------------------------------------------------ tensor refusals


def test_missing_tensor(tmp_path):
    t = tensors("llama")
    del t["model.layers.1.mlp.up_proj.weight"]
    msg = refused(write(tmp_path, t=t))
    assert msg == "model.safetensors: tensor model.layers.1.mlp.up_proj.weight missing"
    t = tensors("llama")
    del t["lm_head.weight"]  # untied model without its classifier
    refused(write(tmp_path / "lm", t=t), "lm_head.weight missing")


def test_shape_mismatch(tmp_path):
    t = tensors("llama")
    t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((HEADS * HD, DIM), np.float32)  # MHA-shaped k
    refused(write(tmp_path / "k", t=t), "model.layers.0.self_attn.k_proj.weight", "(32, 32)", "expected (16, 32)")
    t = tensors("phi3")
    t["model.layers.1.mlp.gate_up_proj.weight"] = np.zeros((HIDDEN, DIM), np.float32)
    refused(write(tmp_path / "p", "phi3", t=t), "gate_up_proj", "(48, 32)", "expected (96, 32)")


def test_unused_tensors_are_refused(tmp_path):
    t = tensors("llama")
    t["model.layers.0.self_attn.o_proj.bias"] = np.zeros(DIM, np.float32)
    refused(write(tmp_path / "b", t=t), "model.layers.0.self_attn.o_proj.bias", "not used")
    t = tensors("llama")  # RoPE inv_freq: not read, but checked against rope_theta (frontends/derived.py)
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = (1.0 / 10000.0 ** (np.arange(0, HD, 2) / HD)).astype(np.float32)
    load_hf(write(tmp_path / "ok", t=t))
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.zeros(HD // 2, np.float32)
    refused(write(tmp_path / "zero", t=t), "model.layers.0.self_attn.rotary_emb.inv_freq", "does not match",
            "rope_theta 10000")


def test_non_float_dtype(tmp_path):
    t = tensors("llama")
    t["model.layers.0.mlp.up_proj.weight"] = np.zeros((HIDDEN, DIM), np.int8)
    refused(write(tmp_path, t=t), "model.layers.0.mlp.up_proj.weight", "I8")


def test_missing_truncated_and_corrupt_safetensors(tmp_path):
    d = write(tmp_path / "none")
    (d / "model.safetensors").unlink()
    refused(d, "no *.safetensors")
    d = write(tmp_path / "trunc")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:-100])
    refused(d, "model.safetensors", "truncated or corrupt")
    (d / "model.safetensors").write_bytes(b"\x00" * 3)
    refused(d, "model.safetensors", "truncated or corrupt")
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 12) + b"{not json!!}")
    refused(d, "model.safetensors", "truncated or corrupt")


def test_shards(tmp_path):
    t = tensors("llama")
    names = sorted(t)
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config("llama")))
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for fname, keys in shards.items():
        save_file({k: t[k] for k in keys}, str(d / fname))
    index = {"weight_map": {k: f for f, ks in shards.items() for k in ks}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    w = load_hf(d).graph.weights
    np.testing.assert_array_equal(w["layers.1.w_up"], t["model.layers.1.mlp.up_proj.weight"])
    # A missing shard is named by the index; a missing tensor by the shard it belongs to.
    (d / "model-00002-of-00002.safetensors").rename(d / "elsewhere.bin")
    refused(d, "model-00002-of-00002.safetensors", "missing")
    (d / "elsewhere.bin").rename(d / "model-00002-of-00002.safetensors")
    victim = names[-1]
    save_file({k: t[k] for k in names[half:-1]}, str(d / "model-00002-of-00002.safetensors"))
    refused(d, f"model-00002-of-00002.safetensors: tensor {victim} missing")


def test_tokenizer_override(tmp_path):
    d = write(tmp_path / "m")
    with pytest.raises(UserError, match="nope.json: tokenizer file not found"):
        load_model(d, tmp_path / "nope.json")
    (tmp_path / "broken.json").write_text("{]")
    with pytest.raises(UserError) as e:
        load_model(d, tmp_path / "broken.json")
    assert "broken.json" in str(e.value) and "\n" not in str(e.value)
