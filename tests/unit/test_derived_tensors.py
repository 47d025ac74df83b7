"""Tensors a model file carries but the compiler derives itself
(frontends/derived.py): RoPE inv_freq buffers in safetensors, llama.cpp's
rope_freqs in GGUF, llama2.c v0's freq_cis tables, a tied model's stored
lm_head.  Each is checked against what the compiler computes (a one-line
error naming it when they disagree), or named as ignored by `inspect`.
(ONNX: tests/unit/test_frontend_onnx.py.)"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from tinyllm_gen.describe import describe, describe_text
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.frontends.derived import rope_inv_freq
from tinyllm_gen.reference.executor import rope_tables

DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB, CTX = 32, 48, 2, 4, 2, 300, 32
HD = DIM // HEADS


def tensors(seed: int = 0, tied: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(VOCAB, DIM), "model.norm.weight": 1 + 0.1 * r(DIM)}
    if not tied:
        t["lm_head.weight"] = r(VOCAB, DIM)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * r(DIM)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * r(DIM)
        for name, shape in (("self_attn.q_proj", (HEADS * HD, DIM)), ("self_attn.k_proj", (KV * HD, DIM)),
                            ("self_attn.v_proj", (KV * HD, DIM)), ("self_attn.o_proj", (DIM, HEADS * HD)),
                            ("mlp.gate_proj", (HIDDEN, DIM)), ("mlp.up_proj", (HIDDEN, DIM)),
                            ("mlp.down_proj", (DIM, HIDDEN))):
            t[p + name + ".weight"] = r(*shape)
    return t


def hf_dir(d: Path, extra: dict | None = None, tied: bool = False, theta: float = 10000.0, tokenizer=False) -> Path:
    d.mkdir(parents=True)
    t = tensors(tied=tied)
    t.update(extra or {})
    save_file(t, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": DIM, "intermediate_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV, "vocab_size": VOCAB,
        "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": theta, "hidden_act": "silu",
        "tie_word_embeddings": tied, "bos_token_id": 0, "eos_token_id": 1}))
    if tokenizer:
        from tinymodels import make_tokenizer

        make_tokenizer(d, VOCAB)
    return d


def transformers_inv_freq(theta: float, dtype=np.float32) -> np.ndarray:
    """As transformers computes it: theta ** (arange(0, d, 2) / d) in float32."""
    exps = np.arange(0, HD, 2, dtype=np.int64).astype(np.float32) / np.float32(HD)
    return (np.float32(1.0) / (np.float32(theta) ** exps)).astype(dtype)


def test_inv_freq_is_the_one_rope_tables_uses():
    for hd, theta in ((8, 10000.0), (64, 1e6), (48, 500000.0)):
        cos, sin = rope_tables(hd, theta, 2)
        inv = rope_inv_freq(hd, theta)
        assert np.array_equal(cos[1], np.cos(inv).astype(np.float32))
        assert np.array_equal(sin[1], np.sin(inv).astype(np.float32))


# ---------------------------------------------------------------- safetensors


@pytest.mark.parametrize("where", ["model.rotary_emb.inv_freq", "model.layers.0.self_attn.rotary_emb.inv_freq"])
def test_a_matching_inv_freq_buffer_is_accepted(tmp_path, where):
    d = hf_dir(tmp_path / "m", {where: transformers_inv_freq(10000.0)})
    assert load_model(d).ignored == ()


@pytest.mark.parametrize("theta", [1e4, 1e6])
def test_a_half_precision_inv_freq_is_accepted(tmp_path, theta):
    """An fp16 checkpoint rounds the buffer (its smallest values are fp16
    subnormals at theta 1e6); a bf16 one keeps 8 bits."""
    import torch
    from safetensors.torch import save_file as save_torch

    d = hf_dir(tmp_path / "m", theta=theta)
    t = {k: torch.from_numpy(v) for k, v in tensors().items()}
    for dtype in (torch.float16, torch.bfloat16):
        t["model.rotary_emb.inv_freq"] = torch.from_numpy(transformers_inv_freq(theta)).to(dtype)
        save_torch(t, str(d / "model.safetensors"))
        assert load_model(d).ignored == ()


def test_an_inv_freq_from_another_theta_is_one_line(tmp_path):
    """The buffer says the model was trained with theta 500000, config.json says 10000."""
    d = hf_dir(tmp_path / "m", {"model.rotary_emb.inv_freq": transformers_inv_freq(500000.0)})
    with pytest.raises(UserError) as e:
        load_model(d)
    msg = str(e.value)
    assert "\n" not in msg and "model.rotary_emb.inv_freq (RoPE inverse frequencies) does not match" in msg
    assert "rope_theta 10000" in msg and "value 1 is" in msg and "set rope_theta in config.json" in msg


def test_an_inv_freq_of_the_wrong_length_is_one_line(tmp_path):
    d = hf_dir(tmp_path / "m", {"model.rotary_emb.inv_freq": np.ones(HD, np.float32)})
    with pytest.raises(UserError, match=r"has shape \(8,\), but head_dim 8 gives 4 frequencies"):
        load_model(d)


def test_a_nan_inv_freq_is_one_line(tmp_path):
    d = hf_dir(tmp_path / "m", {"model.rotary_emb.inv_freq": np.array([1, np.nan, 0.01, 0.001], np.float32)})
    with pytest.raises(UserError, match=r"tensor model.rotary_emb.inv_freq holds 1 non-finite value"):
        load_model(d)


def test_a_tied_models_stored_lm_head_is_checked_or_named(tmp_path):
    t = tensors(tied=True)
    same = hf_dir(tmp_path / "same", {"lm_head.weight": t["model.embed_tokens.weight"]}, tied=True)
    assert load_model(same).ignored == ()
    other = hf_dir(tmp_path / "other", {"lm_head.weight": t["model.embed_tokens.weight"] * 2}, tied=True,
                   tokenizer=True)
    m = load_model(other)
    assert len(m.ignored) == 1 and m.ignored[0].startswith("lm_head.weight: not used, config.json ties")
    info = describe(m)
    assert info["ignored_tensors"] == list(m.ignored)
    assert "  ignored tensors (1: in the file, not in the compiled model):" in describe_text(info)
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "inspect", str(other)], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "lm_head.weight: not used" in proc.stdout, proc.stderr


# ---------------------------------------------------------------- GGUF


@pytest.fixture(scope="module")
def gguf_src(tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    return hf_dir(tmp_path_factory.mktemp("gguf") / "hf", tokenizer=True)


@pytest.mark.parametrize("name", ["rope_freqs.weight", "rope_factors_short.weight"])
def test_gguf_rope_frequency_factors(gguf_src, tmp_path, name):
    from gguf_models import hf_to_gguf

    ok = hf_to_gguf(gguf_src, tmp_path / "ones.gguf", extra_tensors={name: np.ones(HD // 2, np.float32)})
    assert load_model(ok).graph.config.rope_theta == 10000.0  # plain RoPE: checked, accepted
    for factors, why in ((np.array([1, 1, 2, 8], np.float32), r"factor 2 is 2: RoPE scaling"),
                         (np.array([1, np.nan, 1, 1], np.float32), r"factor 1 is NaN"),
                         (np.ones(HD, np.float32), r"has shape \(8,\), expected \(4,\)")):
        bad = hf_to_gguf(gguf_src, tmp_path / "bad.gguf", extra_tensors={name: factors})
        with pytest.raises(UserError, match=rf"tensor {name} .*{why}"):
            load_model(bad)


# ---------------------------------------------------------------- llama2.c v0


def write_v0(path: Path, cos: np.ndarray, sin: np.ndarray) -> Path:
    rng = np.random.default_rng(3)
    r = lambda *s: (0.1 * rng.standard_normal(s)).astype("<f4")  # noqa: E731
    body = [r(VOCAB, DIM)]
    body += [1 + r(DIM) for _ in range(LAYERS)]
    for rows, cols in ((DIM, DIM), (KV * HD, DIM), (KV * HD, DIM), (DIM, DIM)):
        body += [r(rows, cols) for _ in range(LAYERS)]
    body += [1 + r(DIM) for _ in range(LAYERS)]
    for rows, cols in ((HIDDEN, DIM), (DIM, HIDDEN), (HIDDEN, DIM)):
        body += [r(rows, cols) for _ in range(LAYERS)]
    body += [1 + r(DIM), cos.astype("<f4"), sin.astype("<f4")]
    path.write_bytes(struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB, CTX)
                     + b"".join(np.ascontiguousarray(a, "<f4").tobytes() for a in body))
    return path


def test_llama2c_freq_cis_tables_are_named_as_ignored(tmp_path):
    """As llama2.c's export.py writes them (torch float32), they agree with the
    compiler's RoPE; other content is still only named (run.c skips them too)."""
    exps = np.arange(0, HD, 2, dtype=np.float32) / np.float32(HD)
    freqs = np.outer(np.arange(CTX, dtype=np.float32), np.float32(1.0) / (np.float32(10000.0) ** exps))
    m = load_model(write_v0(tmp_path / "good.bin", np.cos(freqs), np.sin(freqs)))
    assert m.ignored == ("freq_cis_real, freq_cis_imag: RoPE tables, not read (the compiler computes RoPE from "
                         "rope_theta 10000); they agree with it",)
    zeros = np.zeros((CTX, HD // 2), np.float32)
    m = load_model(write_v0(tmp_path / "zeros.bin", zeros, zeros))
    assert "they do NOT agree with it (largest difference 1)" in m.ignored[0]
    nan = zeros.copy()
    nan[3, 1] = np.nan
    assert "NaN present" in load_model(write_v0(tmp_path / "nan.bin", nan, zeros)).ignored[0]
    assert "ignored tensors (1" in describe_text(describe(m))
