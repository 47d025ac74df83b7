"""llama.cpp's block formats kept as they are (issue 13, lossless half).

* pack/unpack round trip and size checks of Q4_0 / Q4_1 / Q8_0 (quant/formats.py);
* our dequantization equals llama.cpp's own (`gguf.quants.dequantize`) bit for bit;
* the twin is close to the float product (the C kernels equal the twins bit
  for bit in the kernel registry, tests/host/test_kernel_twins.py, every fp16
  value included);
* the quantize step keeps the blocks of a GGUF input and falls back to RTN for
  others;
* slow: every one of the real SmolLM2-135M GGUF's 272 tensors, unpacked from OUR
  weights blob, equals `gguf`'s dequantized tensor bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from gguf_models import smollm2_path
from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import (GGUF_BLOCK_BYTES, GGUF_KEPT, GGUFMatrix, dequantize_gguf, pack_gguf,
                                       unpack_gguf)

gguf = pytest.importorskip("gguf")


def blocks_of(qtype: str, w: np.ndarray) -> np.ndarray:
    return gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType[qtype])


def random_matrix(qtype: str, rows: int, cols: int, seed: int) -> GGUFMatrix:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 2.0, (rows, 1)).astype(np.float32)
    return GGUFMatrix("w", qtype, blocks_of(qtype, w), cols)


@pytest.mark.parametrize("qtype", GGUF_KEPT)
def test_pack_unpack_round_trip_and_llama_cpp_dequantization(qtype):
    t = random_matrix(qtype, 7, 96, 1)
    data = pack_gguf(t)
    assert len(data) == 7 * 3 * GGUF_BLOCK_BYTES[qtype]
    back = unpack_gguf("w", qtype, data, 7, 96)
    assert np.array_equal(back.data, t.data)
    ours = dequantize_gguf(qtype, back.data, 96)
    theirs = gguf.quants.dequantize(t.data, gguf.GGMLQuantizationType[qtype]).reshape(7, 96)
    assert ours.dtype == np.float32 and np.array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))
    d, m, q = t.fields()
    for r in range(7):  # the embedding twin row by row
        row = exact.dequant_row_gguf(qtype, d[r], None if m is None else m[r], q[r])
        assert np.array_equal(row.view(np.uint32), ours[r].view(np.uint32))


def test_size_checks():
    with pytest.raises(ValueError, match="not 2 rows"):
        unpack_gguf("w", "Q4_1", b"\0" * 39, 2, 32)
    with pytest.raises(ValueError, match="blocks of 20 B"):
        GGUFMatrix("w", "Q4_1", np.zeros((2, 18), np.uint8), 32)
    with pytest.raises(ValueError, match="not a kept GGUF format"):
        GGUFMatrix("w", "Q5_0", np.zeros((2, 22), np.uint8), 32)


def test_twin_is_close_to_the_float_product():
    t = random_matrix("Q4_1", 16, 256, 3)
    x = np.random.default_rng(4).standard_normal(256).astype(np.float32)
    xq, xs = exact.quantize_groups_i8(x, 32)
    d, m, q = t.fields()
    got = exact.matvec_gguf("Q4_1", d, m, q, xq, xs)
    want = t.dequantized().astype(np.float64) @ x.astype(np.float64)
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()


# ---------------------------------------------------------------- quantize step
def tiny_gguf(tmp_path, qtype, **kw):
    from gguf_models import hf_to_gguf
    from tinymodels import make_hf_model

    d = make_hf_model(tmp_path / "m", "llama", seed=1, **kw)
    return hf_to_gguf(d, tmp_path / f"m-{qtype}.gguf", qtype)


def test_gguf_blocks_are_kept_and_others_fall_back(tmp_path):
    from tinyllm_gen.compile import CompileOptions, quantize
    from tinyllm_gen.errors import UserError
    from tinyllm_gen.frontends import load_model

    m = load_model(tiny_gguf(tmp_path, "Q4_1"))
    qg = quantize(m, CompileOptions())  # auto: gguf
    assert qg.method == "gguf" and qg.kernels == "portable" and not qg.q4
    assert set(qg.gguf) == set(m.blocks) and all(t.qtype == "Q4_1" for t in qg.gguf.values())
    for name, t in qg.gguf.items():
        assert t.data.tobytes() == m.blocks[name].data.tobytes()
    assert set(qg.vectors) == {n for n, w in m.graph.weights.items() if w.ndim == 1}
    rtn = quantize(m, CompileOptions(weight_quant="rtn"))
    assert rtn.method == "rtn" and not rtn.gguf and len(rtn.q4) == len(qg.gguf)
    with pytest.raises(UserError, match="--group-size 32"):
        quantize(m, CompileOptions(weight_quant="gguf", group_size=64))
    tiled = quantize(m, CompileOptions(kernels="cortex-m7"))  # the same blocks, moved into 4-row tiles
    assert tiled.kernels == "cortex-m7" and {t.qtype for t in tiled.gguf.values()} == {"Q4_1"}
    assert quantize(m, CompileOptions(kernels="cortex-m7", weight_quant="rtn")).kernels == "cortex-m7"


def test_kquant_and_f32_matrices_fall_back_to_rtn(tmp_path):
    from tinyllm_gen.compile import CompileOptions, quantize
    from tinyllm_gen.errors import UserError
    from tinyllm_gen.frontends import load_model

    m = load_model(tiny_gguf(tmp_path, "Q4_K", dim=256, hidden=256, heads=4, kv_heads=2))
    qg = quantize(m, CompileOptions())
    assert qg.method == "rtn" and not qg.gguf  # nothing to keep: auto is rtn
    qg = quantize(m, CompileOptions(weight_quant="gguf"))
    assert not qg.gguf and len(qg.q4) == len(m.blocks)
    with pytest.raises(UserError, match="not a GGUF file"):
        from tinymodels import make_hf_model
        quantize(load_model(make_hf_model(tmp_path / "hf", seed=2)), CompileOptions(weight_quant="gguf"))


# ----------------------------------------------------- the real SmolLM2-135M GGUF
def canonical_names(n_layers: int) -> dict[str, str]:
    """GGUF tensor name -> our weight name (the llama mapping of frontends/gguf.py)."""
    names = {"token_embd.weight": "tok_embeddings", "output_norm.weight": "norm"}
    per = {"attn_norm": "attention_norm", "ffn_norm": "ffn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
           "attn_output": "wo", "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down"}
    for i in range(n_layers):
        for g, c in per.items():
            names[f"blk.{i}.{g}.weight"] = f"layers.{i}.{c}"
    return names


@pytest.mark.slow
def test_every_smollm2_tensor_from_our_blob_equals_gguf_dequantized():
    from tinyllm_gen.lower.blob import build_blob, gguf_blob_kind
    from tinyllm_gen.compile import CompileOptions, quantize
    from tinyllm_gen.frontends import load_model
    from tinyllm_gen.frontends.gguf import _unpermute_rows
    from tinyllm_gen.reference.executor import rope_tables

    path = smollm2_path()
    m = load_model(path)
    c = m.graph.config
    qg = quantize(m, CompileOptions())
    blob = build_blob(qg, *rope_tables(c.head_dim, c.rope_theta, 8))
    reader = gguf.GGUFReader(str(path))
    names = canonical_names(c.n_layers)
    assert len(reader.tensors) == 272
    kinds = {}
    for t in reader.tensors:
        name = names[t.name]
        want = np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), np.float32)
        shape = tuple(int(s) for s in reversed(list(t.shape)))
        want = want.reshape(shape)
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):  # our rows are Hugging Face order
            heads = c.n_heads if "attn_q" in t.name else c.n_kv_heads
            want = want[_unpermute_rows(shape[0], heads)]
        qtype = t.tensor_type.name
        kinds[qtype] = kinds.get(qtype, 0) + 1
        if qtype == "F32":
            e = blob.entry(name, "f32")
            got = np.frombuffer(blob.data[e.offset:e.offset + e.nbytes], "<f4").reshape(shape)
        else:
            e = blob.entry(name, gguf_blob_kind(qtype))
            mat = unpack_gguf(name, qtype, blob.data[e.offset:e.offset + e.nbytes], shape[0], shape[1])
            got = mat.dequantized()
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32)), t.name
    assert kinds == {"Q8_0": 1, "Q4_1": 210, "F32": 61}


# ------------------------------------------------- whole-sequence evaluator (eval)
@pytest.mark.parametrize("case,kv", [("llama-q4_1-embd-q8_0", 8), ("llama-q4_0", 4), ("qwen2-q8_0-untied", 8)])
def test_sequence_evaluator_is_bit_identical_on_gguf_blocks(tmp_path, monkeypatch, case, kv):
    """`eval` scores the logits the firmware computes: SeqQuantKernels ==
    QuantKernels step by step, bit for bit, on kept GGUF blocks (row chunks
    smaller than the matrices, as for SmolLM2's classifier)."""
    from dataclasses import replace

    from tinyllm_gen.reference import sequence as reference_seq

    monkeypatch.setattr(reference_seq, "SEQ_ROW_CHUNK", 40)

    from gguf_firmware import gguf_case
    from tinyllm_gen.compile import CompileOptions, quantize
    from tinyllm_gen.frontends import load_model
    from tinyllm_gen.reference.executor import Executor, QuantKernels
    from tinyllm_gen.reference.sequence import SeqQuantKernels, run_sequence

    m = load_model(gguf_case(tmp_path, case))
    qg = replace(quantize(m, CompileOptions()), kv_bits=kv)
    assert qg.gguf
    tokens = m.tokenizer.encode("Once upon a time there was a cat. The cat liked to play.")[:24]
    seq, _ = run_sequence(m.graph, SeqQuantKernels(qg, 64), tokens)
    ex = Executor(m.graph, QuantKernels(qg, 64))
    ex.reset()
    ref = np.stack([ex.step(t, p) for p, t in enumerate(tokens)])
    assert seq.dtype == np.float32 and np.array_equal(seq.view(np.uint32), ref.view(np.uint32))


def test_eval_scores_kept_gguf_blocks_by_default(tmp_path):
    import json

    from click.testing import CliRunner

    from gguf_firmware import gguf_case
    from tinyllm_gen.cli import cli

    path = gguf_case(tmp_path, "llama-q4_1-embd-q8_0")
    data = tmp_path / "text.txt"
    data.write_text("Once upon a time there was a cat.\n\nThe cat liked to play with a red ball.\n")
    r = CliRunner().invoke(cli, ["eval", str(path), "--data", str(data), "--kv-bits", "8", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert list(doc["configs"]) == ["gguf-g32-kv8"]
    both = CliRunner().invoke(cli, ["eval", str(path), "--data", str(data), "--kv-bits", "8", "--group-size", "64",
                                    "--weight-quant", "gguf", "--weight-quant", "rtn", "--json"])
    assert both.exit_code == 0, both.output
    assert list(json.loads(both.output[both.output.index("{"):])["configs"]) == ["rtn-g64-kv8"]  # gguf is g32 only
