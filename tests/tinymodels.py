"""Tiny random models for tests: built from a config and a seed, never
downloaded.  Weights are scaled so the models have confident, non-uniform
next-token distributions (a purely N(0, 0.02) model ties too often to test
sampling well)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CORPUS = ("Once upon a time there was a little cat. The cat liked to play in the sun. "
          "One day the cat saw a big red ball. She was very happy. The end. ") * 20


def make_tokenizer(path: Path, vocab_size: int) -> Path:
    """A byte-level BPE tokenizer.json with <s>=0 and </s>=1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return path / "tokenizer.json"


def make_hf_model(path: Path, arch: str = "llama", *, dim: int = 64, hidden: int = 96, layers: int = 2,
                  heads: int = 4, kv_heads: int = 2, vocab: int = 300, context: int = 128, tied: bool = True,
                  seed: int = 0, weight_scale: float = 1.0, eos: int | None = 1) -> Path:
    """save_pretrained() of a random transformers model plus a tokenizer."""
    import torch
    import transformers as tf

    common = dict(hidden_size=dim, intermediate_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=context,
                  tie_word_embeddings=tied, bos_token_id=0, eos_token_id=eos, rms_norm_eps=1e-5, rope_theta=10000.0)
    if arch == "llama":
        cfg, cls = tf.LlamaConfig(**common), tf.LlamaForCausalLM
    elif arch == "qwen2":
        cfg, cls = tf.Qwen2Config(**common, use_sliding_window=False), tf.Qwen2ForCausalLM
    elif arch == "phi3":
        common.pop("tie_word_embeddings")
        cfg, cls = tf.Phi3Config(**common, tie_word_embeddings=tied, pad_token_id=None), tf.Phi3ForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:  # biases
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(weight_scale * torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1]))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    make_tokenizer(path, vocab)
    cfg_json = json.loads((path / "config.json").read_text())
    assert cfg_json["vocab_size"] == vocab
    return path


def export_onnx(model_dir: Path, out_dir: Path, seq: int = 6) -> Path:
    """torch.onnx.export (the dynamo exporter, opset 18) of a saved tiny model
    as a transformers user would: logits of a whole sequence, no KV cache;
    config.json and tokenizer.json copied beside model.onnx, as exporters do."""
    import shutil
    import warnings

    import torch
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(model_dir).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    out_dir.mkdir(parents=True, exist_ok=True)
    ids = torch.arange(seq, dtype=torch.int64).reshape(1, seq) % model.config.vocab_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Logits(model), (ids,), str(out_dir / "model.onnx"), input_names=["input_ids"],
                          output_names=["logits"], dynamic_shapes=({1: torch.export.Dim("seq", max=64)},),
                          opset_version=18, dynamo=True, verbose=False)
    for name in ("config.json", "tokenizer.json"):
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, out_dir / name)
    return out_dir
