"""llama2.c checkpoints and tokenizer.bin.

A random Llama is written once in Hugging Face layout (safetensors +
config.json, by hand: no torch needed) and once per llama2.c version with a
writer that follows llama2.c's export.py layout; both imports must compute
the same logits."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from safetensors.numpy import save_file

from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.frontends.hf import load_hf
from tinyllm_gen.frontends.llama2c import load_llama2c
from tinyllm_gen.frontends.tokenizer import Tokenizer
from tinyllm_gen.reference.executor import Executor, FloatKernels

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, SEQ = 64, 96, 2, 4, 2, 32
HD = DIM // HEADS
MAGIC = 0x616B3432


# ------------------------------------------------------------ model writers


def write_hf(d: Path, vocab: int, tied: bool, seed: int = 0) -> Path:
    """A random Llama in HF layout, with the llama2.c constants (theta 1e4, eps 1e-5)."""
    rng = np.random.default_rng(seed)
    r = lambda *s: (0.15 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(vocab, DIM), "model.norm.weight": 1 + r(DIM)}
    if not tied:
        t["lm_head.weight"] = r(vocab, DIM)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + r(DIM)
        t[p + "post_attention_layernorm.weight"] = 1 + r(DIM)
        t[p + "self_attn.q_proj.weight"] = r(HEADS * HD, DIM)
        t[p + "self_attn.k_proj.weight"] = r(KV_HEADS * HD, DIM)
        t[p + "self_attn.v_proj.weight"] = r(KV_HEADS * HD, DIM)
        t[p + "self_attn.o_proj.weight"] = r(DIM, HEADS * HD)
        t[p + "mlp.gate_proj.weight"] = r(HIDDEN, DIM)
        t[p + "mlp.up_proj.weight"] = r(HIDDEN, DIM)
        t[p + "mlp.down_proj.weight"] = r(DIM, HIDDEN)
    d.mkdir(parents=True, exist_ok=True)
    save_file(t, str(d / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": DIM, "intermediate_size": HIDDEN,
           "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
           "vocab_size": vocab, "max_position_embeddings": SEQ, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def to_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF rotate-half rows (i, i+hd/2) -> llama2.c/Meta interleaved (2i, 2i+1)."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def from_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of `to_interleaved`: row 2i -> i, row 2i+1 -> i + hd/2."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def llama2c_tensors(weights, tied: bool):
    """The llama2.c model's tensors (interleaved wq/wk), keyed like export.py."""
    L = range(LAYERS)
    t = {"tok_embeddings": weights["tok_embeddings"], "norm": weights["norm"],
         "output": weights["tok_embeddings"] if tied else weights["output"]}
    for kind, ours in (("attention_norm", "attention_norm"), ("ffn_norm", "ffn_norm"), ("wv", "wv"),
                       ("wo", "wo"), ("w1", "w_gate"), ("w2", "w_down"), ("w3", "w_up")):
        t[kind] = [weights[f"layers.{i}.{ours}"] for i in L]
    t["wq"] = [to_interleaved(weights[f"layers.{i}.wq"], HEADS) for i in L]
    t["wk"] = [to_interleaved(weights[f"layers.{i}.wk"], KV_HEADS) for i in L]
    return t


def _params(vocab: int) -> bytes:
    return struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, vocab, SEQ)


def _f32(*arrays) -> bytes:
    return b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for a in arrays)


def write_v0(path: Path, t, vocab: int, tied: bool) -> Path:
    half = np.arange(SEQ * HD // 2, dtype=np.float32)  # freq_cis tables: content is ignored
    body = [t["tok_embeddings"], *t["attention_norm"], *t["wq"], *t["wk"], *t["wv"], *t["wo"],
            *t["ffn_norm"], *t["w1"], *t["w2"], *t["w3"], t["norm"], np.cos(half), np.sin(half)]
    if not tied:
        body.append(t["output"])
    path.write_bytes(_params(vocab if tied else -vocab) + _f32(*body))
    return path


def _v12_header(version: int, vocab: int, tied: bool, extra: bytes = b"") -> bytes:
    h = struct.pack("<Ii", MAGIC, version) + _params(vocab) + struct.pack("<B", int(tied)) + extra
    return h + b"\0" * (256 - len(h))


def write_v1(path: Path, t, vocab: int, tied: bool) -> Path:
    body = [*t["attention_norm"], *t["ffn_norm"], t["norm"], t["tok_embeddings"], *t["wq"], *t["wk"],
            *t["wv"], *t["wo"], *t["w1"], *t["w2"], *t["w3"]]
    if not tied:
        body.append(t["output"])
    path.write_bytes(_v12_header(1, vocab, tied) + _f32(*body))
    return path


def q80(w: np.ndarray, group: int):
    """export.py's quantize_q80 in numpy float32: symmetric int8, one scale per group."""
    g = np.asarray(w, np.float32).reshape(-1, group)
    scale = (np.abs(g).max(axis=1) / np.float32(127.0)).astype(np.float32)
    q = np.round(g / scale[:, None]).astype(np.int8)
    return q, scale


def q80_roundtrip(w: np.ndarray, group: int) -> np.ndarray:
    q, s = q80(w, group)
    return (q.astype(np.float32) * s[:, None]).reshape(w.shape)


def q80_mats(t, tied: bool):
    mats = [t["tok_embeddings"], *t["wq"], *t["wk"], *t["wv"], *t["wo"], *t["w1"], *t["w2"], *t["w3"]]
    return mats + ([] if tied else [t["output"]])


def write_v2(path: Path, t, vocab: int, tied: bool, group: int) -> Path:
    """export.py's version2_export byte for byte (checked against the real
    exporter, tests/regression/test_llama2c_v2_export.py): fp32 norms, then
    per tensor its int8 values immediately followed by its fp32 scales."""
    norms = _f32(*t["attention_norm"], *t["ffn_norm"], t["norm"])
    quant = [q80(m, group) for m in q80_mats(t, tied)]
    body = norms + b"".join(q.tobytes() + _f32(s) for q, s in quant)
    path.write_bytes(_v12_header(2, vocab, tied, struct.pack("<i", group)) + body)
    return path


def run_logits(graph, tokens):
    ex = Executor(graph, FloatKernels(graph, SEQ))
    return np.stack([ex.step(tok, pos) for pos, tok in enumerate(tokens)])


TOKENS = [1, 17, 99, 5, 42, 42, 7, 120, 3, 64, 11, 2]


# ------------------------------------------------------------------ models


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("version", [0, 1])
def test_fp32_versions_match_hf_import(tmp_path, version, tied):
    vocab = 128
    hf = load_hf(write_hf(tmp_path / "hf", vocab, tied)).graph
    t = llama2c_tensors(hf.weights, tied)
    path = (write_v0 if version == 0 else write_v1)(tmp_path / "model.bin", t, vocab, tied)
    m = load_model(path)
    c = m.graph.config
    assert m.tokenizer is None and m.source.startswith(f"llama2c-v{version}:")
    assert (c.n_kv_heads, c.max_seq, c.tied_embeddings, c.bos_id, c.eos_ids) == (KV_HEADS, SEQ, tied, 1, (2,))
    assert sorted(m.graph.weights) == sorted(hf.weights)
    for name, w in hf.weights.items():  # the un-permutation restores the HF layout exactly
        np.testing.assert_array_equal(m.graph.weights[name], w, err_msg=name)
    diff = np.abs(run_logits(m.graph, TOKENS) - run_logits(hf, TOKENS)).max()
    assert diff <= 1e-5


@pytest.mark.parametrize("tied,group", [(False, 64), (True, 32)])
def test_q80_version2_dequantizes_exactly(tmp_path, tied, group):
    vocab = 128
    hf = load_hf(write_hf(tmp_path / "hf", vocab, tied, seed=4)).graph
    t = llama2c_tensors(hf.weights, tied)
    m = load_llama2c(write_v2(tmp_path / "q.bin", t, vocab, tied, group), None)
    w = m.graph.weights
    # Norms stay fp32; every matrix is our own Q8_0 round trip (then un-permuted).
    for name in ("norm", "layers.1.attention_norm", "layers.0.ffn_norm"):
        np.testing.assert_array_equal(w[name], hf.weights[name])
    for i in range(LAYERS):
        np.testing.assert_array_equal(w[f"layers.{i}.wq"], from_interleaved(q80_roundtrip(t["wq"][i], group), HEADS))
        np.testing.assert_array_equal(w[f"layers.{i}.wk"], from_interleaved(q80_roundtrip(t["wk"][i], group), KV_HEADS))
        np.testing.assert_array_equal(w[f"layers.{i}.wv"], q80_roundtrip(t["wv"][i], group))
        np.testing.assert_array_equal(w[f"layers.{i}.w_down"], q80_roundtrip(t["w2"][i], group))
    np.testing.assert_array_equal(w["tok_embeddings"], q80_roundtrip(t["tok_embeddings"], group))
    if not tied:
        np.testing.assert_array_equal(w["output"], q80_roundtrip(t["output"], group))
    # And the quantized model is still close to the float one.
    ref = run_logits(hf, TOKENS)
    assert np.abs(run_logits(m.graph, TOKENS) - ref).max() < 0.1 * np.abs(ref).max()


def test_wk_permutation_is_per_kv_head(tmp_path):
    """Row 2i of each llama2.c head lands at i, row 2i+1 at i + hd/2."""
    hf = load_hf(write_hf(tmp_path / "hf", 128, True)).graph
    t = llama2c_tensors(hf.weights, True)
    t["wk"][0] = np.arange(KV_HEADS * HD, dtype=np.float32)[:, None] * np.ones((1, DIM), np.float32)
    w = load_llama2c(write_v1(tmp_path / "m.bin", t, 128, True)).graph.weights["layers.0.wk"][:, 0]
    expect = [h * HD + 2 * i + p for h in range(KV_HEADS) for p in (0, 1) for i in range(HD // 2)]
    assert w.tolist() == expect


# ---------------------------------------------------------------- tokenizer

MERGES = [(" ", -1e9), ("h", -1e9), ("e", -1e9), ("l", -1e9), ("o", -1e9), ("w", -1e9), ("r", -1e9),
          ("d", -1e9), ("ll", 5.0), ("he", 4.0), ("llo", 3.0), ("hello", 2.0), (" hello", 1.0),
          ("wo", 0.5), ("or", 0.9), ("wor", 0.4), ("ld", 0.3), (" w", 0.2), (" wor", 0.1), ("é", -1e9)]


def write_tokenizer_bin(path: Path, extra=MERGES, pad_to: int | None = None) -> Path:
    """llama2.c's layout: int32 max_token_length, then (f32 score, i32 len, bytes)
    per token: <unk>, BOS, EOS as export writes them, 256 byte pieces, then ours."""
    pieces = [("<unk>", 0.0), ("\n<s>\n", 0.0), ("\n</s>\n", 0.0)]
    pieces += [(f"<0x{b:02X}>", 0.0) for b in range(256)] + list(extra)
    while pad_to is not None and len(pieces) < pad_to:
        pieces.append((f"<pad{len(pieces)}>", -1e9))
    enc = [(p.encode("utf-8"), s) for p, s in pieces]
    out = struct.pack("<i", max(len(b) for b, _ in enc))
    out += b"".join(struct.pack("<fi", s, len(b)) + b for b, s in enc)
    path.write_bytes(out)
    return path


@pytest.fixture(scope="module")
def l2c_tok(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_llama2c(write_tokenizer_bin(tmp_path_factory.mktemp("tok") / "tokenizer.bin"))


def test_llama2c_encode_follows_run_c(l2c_tok):
    t = l2c_tok
    ids = {t.token_bytes(i): i for i in range(3, t.vocab_size)}
    # Merges by best score first: ll(5) he(4) llo(3) hello(2) " hello"(1); "world": or(.9) wor(.4) ...
    assert t.encode("hello") == [1, ids[b" hello"]]
    assert t.encode("hello world", bos=False) == [ids[b" hello"], ids[b" wor"], ids[b"ld"]]
    # Not in the vocabulary: UTF-8 byte fallback, id = byte + 3; a known code point is one lookup.
    assert t.encode("ü", bos=False) == [ids[b" "], 0xC3 + 3, 0xBC + 3]
    assert t.encode("é", bos=False) == [ids[b" "], ids["é".encode()]]
    assert t.encode("") == [1]
    assert (t.bos_id, t.eos_id, t.vocab_size) == (1, 2, 259 + len(MERGES))
    assert t.token_bytes(1) == b"" and t.token_bytes(2) == b"" and t.token_bytes(0) == b""
    assert t.token_bytes(3 + 0x0A) == b"\n"
    assert t.decode(t.encode("hello world")) == "hello world"
    # Firmware view: concatenated bytes keep the dummy-prefix space.
    assert b"".join(t.token_bytes(i) for i in t.encode("hello world")) == b" hello world"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("helowrd é\nü🙂<>0x")), max_size=24))
def test_llama2c_roundtrip(l2c_tok, text):
    assert l2c_tok.decode(l2c_tok.encode(text)) == text
    assert l2c_tok.decode(l2c_tok.encode(text, bos=False)) == text


def test_checkpoint_with_tokenizer(tmp_path):
    vocab = 259 + len(MERGES) + 1  # tokenizer entries beyond vocab_size are ignored, like run.c
    tok = write_tokenizer_bin(tmp_path / "tokenizer.bin", pad_to=vocab + 5)
    hf = load_hf(write_hf(tmp_path / "hf", vocab, True)).graph
    path = write_v1(tmp_path / "m.bin", llama2c_tensors(hf.weights, True), vocab, True)
    m = load_model(path, tok)
    assert m.tokenizer is not None and m.tokenizer.vocab_size == vocab
    assert m.tokenizer.decode(m.tokenizer.encode("hello wörld")) == "hello wörld"


# ------------------------------------------------------------------- errors


@pytest.fixture(scope="module")
def good_v1(tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("good")
    hf = load_hf(write_hf(d / "hf", 128, False)).graph
    return write_v1(d / "m.bin", llama2c_tensors(hf.weights, False), 128, False).read_bytes()


def _patch(data: bytes, offset: int, fmt: str, *values) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, *values)
    return bytes(b)


def _corruptions(good: bytes):
    yield "short", good[:10], "too short"
    yield "version", _patch(good, 4, "<i", 7), "version 7"
    yield "n_layers", _patch(good, 8 + 4 * 2, "<i", 0), "n_layers is 0"
    yield "dim", _patch(good, 8, "<i", -64), "dim is -64"
    yield "heads", _patch(good, 8 + 4 * 4, "<i", 3), "n_kv_heads"
    yield "flag", _patch(good, 36, "<B", 9), "shared_classifier"
    yield "truncated", good[:-4], "truncated"
    yield "trailing", good + b"\0" * 8, "trailing data"
    yield "bad magic", b"\xff\xff\xff\xff" + good[4:], "bad magic"
    yield "header only", good[:256], "truncated"
    g2 = _patch(_patch(good, 4, "<i", 2), 37, "<i", 0)
    yield "group 0", g2, "group_size 0"
    yield "group 7", _patch(g2, 37, "<i", 7), "group_size 7"


@pytest.mark.parametrize("case", [c[0] for c in _corruptions(b"\0" * 300)])
def test_corrupt_checkpoints_raise_one_line_user_error(tmp_path, good_v1, case):
    _, data, needle = next(c for c in _corruptions(good_v1) if c[0] == case)
    path = tmp_path / "broken.bin"
    path.write_bytes(data)
    with pytest.raises(UserError) as e:
        load_model(path)
    msg = str(e.value)
    assert "\n" not in msg and "broken.bin" in msg and needle in msg, msg


def test_corrupt_tokenizer_raises_user_error(tmp_path):
    good = write_tokenizer_bin(tmp_path / "t.bin").read_bytes()
    for name, data in (("trunc.bin", good[:-3]), ("neg.bin", _patch(good, 8, "<i", -5)),
                       ("empty.bin", b""), ("zero.bin", struct.pack("<i", 0))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UserError) as e:
            Tokenizer.from_llama2c(tmp_path / name)
        assert "\n" not in str(e.value) and name in str(e.value)
    with pytest.raises(UserError, match="vocab_size is 9999"):
        Tokenizer.from_llama2c(tmp_path / "t.bin", vocab_size=9999)
