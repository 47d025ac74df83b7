"""The HF frontend + float reference against transformers itself.

Tiny random models (seeded, with non-trivial norms and biases so a swapped
or dropped tensor shows) are saved with save_pretrained, imported with
`load_hf`, and run token by token by our Executor; transformers' full-sequence
forward over the same tokens must agree on every position's logits."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tinyllm_gen.frontends import load_model  # noqa: E402
from tinyllm_gen.frontends.hf import load_hf  # noqa: E402
from tinyllm_gen.reference.executor import Executor, FloatKernels  # noqa: E402

pytestmark = pytest.mark.oracle

PROMPT_LEN, NEW_TOKENS = 16, 16
COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.15)


def _make(arch: str, seed: int, **over):
    """A random-initialised transformers model in float32, eager attention."""
    torch.manual_seed(seed)
    kw = {**COMMON, **over}
    if arch == "llama":
        cfg = transformers.LlamaConfig(**kw)
        cls = transformers.LlamaForCausalLM
    elif arch == "phi3":
        cfg = transformers.Phi3Config(sliding_window=None, **kw)
        cls = transformers.Phi3ForCausalLM
    else:
        cfg = transformers.Qwen2Config(**kw)
        cls = transformers.Qwen2ForCausalLM
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # RMSNorm weights default to ones: make them matter
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            elif name.endswith(".bias"):  # zero-initialised by default
                p.copy_(0.3 * torch.randn_like(p))
    return model


def _run_ours(graph, prompt):
    """Prefill the prompt then greedy-decode; logits of every position."""
    max_seq = PROMPT_LEN + NEW_TOKENS
    ex = Executor(graph, FloatKernels(graph, max_seq))
    tokens = list(prompt)
    logits = []
    for pos in range(max_seq):
        logits.append(ex.step(tokens[pos], pos))
        if pos + 1 >= len(tokens) and len(tokens) < max_seq:
            tokens.append(int(np.argmax(logits[-1])))
    return tokens, np.stack(logits)


CASES = [
    ("llama", dict(tie_word_embeddings=False)),
    ("llama", dict(tie_word_embeddings=True, num_hidden_layers=3)),
    ("llama", dict(num_key_value_heads=4, head_dim=24, rope_theta=500.0)),  # MHA, explicit head_dim
    ("phi3", dict(tie_word_embeddings=False)),
    ("qwen2", dict(tie_word_embeddings=True)),
    ("qwen2", dict(tie_word_embeddings=False, num_key_value_heads=1)),
]


@pytest.mark.parametrize("arch,over", CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(CASES)])
def test_logits_and_greedy_tokens_match_transformers(tmp_path, arch, over):
    model = _make(arch, seed=len(arch) * 7 + len(over), **over)
    model.save_pretrained(tmp_path, safe_serialization=True)
    imported = load_hf(tmp_path)
    g = imported.graph
    assert g.config.arch == arch
    assert g.config.tied_embeddings == bool(over.get("tie_word_embeddings", False))
    assert g.config.qkv_bias == (arch == "qwen2")
    if "rope_theta" in over:
        assert g.config.rope_theta == over["rope_theta"]

    rng = np.random.default_rng(1)
    prompt = [1] + rng.integers(3, COMMON["vocab_size"], PROMPT_LEN - 1).tolist()
    tokens, ours = _run_ours(g, prompt)

    with torch.no_grad():
        ref = model(torch.tensor([tokens]), use_cache=False).logits[0].double().numpy()
    assert np.abs(ref).max() > 0.5, "logits too small for a meaningful comparison"
    assert np.max(np.abs(ours - ref)) <= 1e-4
    # Greedy: each generated token is transformers' argmax at the previous position.
    hf_greedy = ref[PROMPT_LEN - 1: -1].argmax(axis=1).tolist()
    assert tokens[PROMPT_LEN:] == hf_greedy
    assert len(set(tokens[PROMPT_LEN:])) > 1, "degenerate model: greedy repeats one token"


def test_bf16_fp16_and_sharded_checkpoints(tmp_path):
    """bf16 is decoded from raw bits (numpy has no bfloat16); fp16 through
    safetensors; several shards are merged.  Each must equal torch's own
    widening to float32 exactly."""
    model = _make("llama", seed=3)
    ref = {k: v.float() for k, v in model.state_dict().items()}
    for dtype in (torch.bfloat16, torch.float16):
        out = tmp_path / str(dtype).split(".")[-1]
        copy.deepcopy(model).to(dtype).save_pretrained(out, safe_serialization=True, max_shard_size="40KB")
        assert len(list(out.glob("*.safetensors"))) > 1, "expected a sharded save"
        w = load_model(out).graph.weights
        narrowed = {k: v.to(dtype).float().numpy() for k, v in ref.items()}
        np.testing.assert_array_equal(w["layers.1.wk"], narrowed["model.layers.1.self_attn.k_proj.weight"])
        np.testing.assert_array_equal(w["layers.0.ffn_norm"], narrowed["model.layers.0.post_attention_layernorm.weight"])
        np.testing.assert_array_equal(w["output"], narrowed["lm_head.weight"])
        assert all(a.dtype == np.float32 for a in w.values())


def test_hf_tokenizer_json(tmp_path):
    """A byte-level BPE tokenizer.json next to the model: encode/decode go
    through `tokenizers`, token_bytes inverts the GPT-2 byte mapping."""
    from tokenizers import Tokenizer as HFTok, decoders, models, pre_tokenizers, trainers

    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["héllo wörld, tiny models on tiny chips 🙂"] * 20, trainer)
    model = _make("llama", seed=5, vocab_size=tok.get_vocab_size())
    model.save_pretrained(tmp_path, safe_serialization=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))

    t = load_hf(tmp_path).tokenizer
    assert t is not None and t.vocab_size == tok.get_vocab_size()
    assert (t.bos_id, t.eos_id) == (1, 2)  # config.json's ids
    text = "héllo wörld 🙂 tiny"
    ids = t.encode(text)
    assert ids[0] == 1 and t.encode(text, bos=False) == ids[1:]
    assert t.decode(ids) == text
    assert b"".join(t.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert t.token_bytes(1) == b"" and t.token_bytes(2) == b""


def test_hf_sentencepiece_style_tokenizer_json(tmp_path):
    """A Llama-style tokenizer.json (Metaspace '\u2581', <0xNN> byte fallback,
    Strip decoder): token_bytes maps '\u2581' to a space and <0xNN> to its byte."""
    from tokenizers import AddedToken, Tokenizer as HFTok, decoders, models, normalizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ["\u2581", "h", "i", "\u2581h", "\u2581hi"]:
        vocab[piece] = len(vocab)
    merges = [("\u2581", "h"), ("\u2581h", "i")]
    tok = HFTok(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True) for s in ("<unk>", "<s>", "</s>")])
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"},
                                                                "eos_token": "</s>"}))

    from tinyllm_gen.frontends.tokenizer import Tokenizer

    t = Tokenizer.from_hf_json(tmp_path / "tokenizer.json")
    assert (t.bos_id, t.eos_id, t.vocab_size) == (1, 2, len(vocab))
    ids = t.encode("hi hé")
    assert ids[:3] == [1, vocab["\u2581hi"], vocab["\u2581h"]]
    assert ids[3:] == [3 + 0xC3, 3 + 0xA9]  # é is not in the vocabulary: byte fallback
    assert t.decode(ids) == "hi hé"
    assert b"".join(t.token_bytes(i) for i in ids) == " hi hé".encode()
    assert t.token_bytes(0) == b"" and t.token_bytes(vocab["\u2581"]) == b" "
