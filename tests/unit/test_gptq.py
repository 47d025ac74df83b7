"""GPTQ-style INT4 rounding (quant/gptq.py): on the grid every Q4Tensor uses,
never worse than clip when inputs are uncorrelated, well below it when they
are, and wired into quantize_calibrated / `eval` / `compile`."""
import json

import numpy as np
import pytest

from tinyllm_gen.cli import main
from tinyllm_gen.frontends import load_model
from tinyllm_gen.quant.calibrated import linear_inputs, quantize_calibrated
from tinyllm_gen.quant.clip import quantize_q4_clip
from tinyllm_gen.quant.gptq import damped, inverse_cholesky_upper, output_error, quantize_q4_gptq
from tinyllm_gen.quant.rtn import quantize_q4_rtn
from tinyllm_gen.quant.verify import verify_quantized

from tinymodels import make_hf_model

TEXT = "Once upon a time there was a little cat. The cat liked to play in the sun."


def _correlated_inputs(rng, tokens: int, cols: int) -> np.ndarray:
    """Activations with a few strong shared directions, as real hidden states have."""
    basis = rng.normal(size=(6, cols))
    return rng.normal(size=(tokens, 6)) @ basis * 3.0 + rng.normal(size=(tokens, cols)) * 0.3


def test_inverse_cholesky_factor_reproduces_the_inverse():
    rng = np.random.default_rng(1)
    x = _correlated_inputs(rng, 200, 40)
    h = damped(x.T @ x / len(x))
    u = inverse_cholesky_upper(h)
    assert np.allclose(np.triu(u), u)
    assert np.allclose(u.T @ u @ h, np.eye(40), atol=1e-8)


def test_diagonal_second_moment_is_clip_scales_with_nearest_rounding():
    rng = np.random.default_rng(2)
    w = rng.normal(size=(24, 70)).astype(np.float32)  # 70 = two groups of 32 and a short one of 6
    h = np.diag(rng.uniform(0.1, 4.0, 70))
    g = quantize_q4_gptq("w", w, 32, h)
    c = quantize_q4_clip("w", w, 32, np.diag(damped(h)))
    assert np.array_equal(g.scales, c.scales)  # nothing spread: every group sees the original weights
    assert output_error(w, g, h) <= output_error(w, c, h)
    assert g.q.dtype == np.int8 and np.abs(g.q).max() <= 7 and g.scales.dtype == np.float32
    assert (g.scales >= 0).all()


@pytest.mark.parametrize("group", [32, 64, 128])
def test_correlated_inputs_get_a_much_smaller_output_error(group):
    rng = np.random.default_rng(3)
    cols = 256
    x = _correlated_inputs(rng, 600, cols)
    h = x.T @ x / len(x)
    w = rng.normal(size=(48, cols)).astype(np.float32)
    g = quantize_q4_gptq("w", w, group, h)
    errs = {"gptq": output_error(w, g, h), "clip": output_error(w, quantize_q4_clip("w", w, group, np.diag(h)), h),
            "rtn": output_error(w, quantize_q4_rtn("w", w, group), h)}
    assert errs["gptq"] < 0.5 * errs["clip"] < 0.5 * errs["rtn"], errs
    again = quantize_q4_gptq("w", w, group, h)
    assert np.array_equal(again.q, g.q) and np.array_equal(again.scales.view(np.uint32), g.scales.view(np.uint32))


def test_unexercised_columns_and_a_wrong_moment_shape():
    w = np.ones((4, 40), np.float32)
    h = np.zeros((40, 40))
    h[:8, :8] = np.eye(8)  # columns 8..39 never see an input
    g = quantize_q4_gptq("w", w, 32, h)
    assert np.isfinite(g.scales).all() and np.array_equal(g.dequantized(), w)
    with pytest.raises(ValueError, match=r"w: second moment is \(8, 8\), expected \(40, 40\)"):
        quantize_q4_gptq("w", w, 32, np.eye(8))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = make_hf_model(tmp_path_factory.mktemp("gptq") / "m", arch="llama", dim=48, hidden=96, layers=2, heads=6,
                      kv_heads=2, vocab=280, context=64, tied=True, seed=5)
    return d, load_model(d)


def test_every_matrix_of_a_model_is_rounded_against_its_inputs(model):
    _, m = model
    docs = [m.tokenizer.encode(TEXT)]
    qg = quantize_calibrated(m.graph, docs, "gptq", 32, 8)
    clip = quantize_calibrated(m.graph, docs, "clip", 32, 8)
    verify_quantized(qg)
    assert qg.method == "gptq" and set(qg.q4) == set(clip.q4)
    acts = linear_inputs(m.graph, docs)
    x = acts["l0.hn"]
    h = x.T @ x / len(x)
    w = m.graph.weights["layers.0.w_gate"]
    assert output_error(w, qg.q4["layers.0.w_gate"], h) < output_error(w, clip.q4["layers.0.w_gate"], h)
    # the tied table is also looked up as an embedding: it is rounded, not left to clip
    assert not np.array_equal(qg.q4["tok_embeddings"].q, clip.q4["tok_embeddings"].q)


def test_eval_and_compile_accept_gptq(model, tmp_path, capsys):
    d, _ = model
    data = tmp_path / "held.txt"
    data.write_text(TEXT + "\n\nThe dog ran to the park and played with a ball.\n")
    with pytest.raises(SystemExit) as e:
        main(["eval", str(d), "--data", str(data), "--json", "--weight-quant", "gptq", "--group-size", "32",
              "--kv-bits", "8"])
    assert e.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["configs"]) == {"gptq-g32-kv8"}
    with pytest.raises(SystemExit) as e:
        main(["compile", str(d), "-o", str(tmp_path / "o"), "--board", "host", "--weight-quant", "gptq"])
    assert e.value.code == 0
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["options"]["quant"] == "gptq"
