"""Calibrated INT4: AWQ scaling preserves the float function, clipping beats RTN on its
own objective, and `eval` reports what the README promises."""
import json

import numpy as np
import pytest

from tinyllm_gen.cli import main
from tinyllm_gen.frontends import load_model
from tinyllm_gen.quant.awq import apply_awq
from tinyllm_gen.quant.calibrated import linear_inputs, quantize_calibrated
from tinyllm_gen.quant.clip import quantize_q4_clip
from tinyllm_gen.quant.rtn import quantize_q4_rtn
from tinyllm_gen.reference.sequence import SeqFloatKernels, run_sequence

from tinymodels import make_hf_model

TEXT = "Once upon a time there was a little cat. The cat liked to play in the sun."


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = make_hf_model(tmp_path_factory.mktemp("calq") / "m", arch="qwen2", dim=48, hidden=80, layers=2, heads=6,
                      kv_heads=2, vocab=280, context=64, tied=False, seed=31)
    return d, load_model(d)


def test_awq_scaled_graph_is_the_same_function(model):
    _, m = model
    docs = [m.tokenizer.encode(TEXT)]
    scaled, col_scale, alphas = apply_awq(m.graph, linear_inputs(m.graph, docs), 32)
    assert any(a > 0 for a in alphas.values())  # something was scaled
    assert "output" in col_scale  # untied classifier: folded into the final norm
    ids = m.tokenizer.encode("One day the cat saw a big red ball.")
    a, _ = run_sequence(m.graph, SeqFloatKernels(m.graph, 64), ids)
    b, _ = run_sequence(scaled, SeqFloatKernels(scaled, 64), ids)
    np.testing.assert_allclose(a, b, atol=2e-4, rtol=1e-4)


def test_clip_beats_rtn_on_weighted_error():
    rng = np.random.default_rng(0)
    w = rng.standard_t(3, size=(40, 100)).astype(np.float32)  # heavy tails: outliers waste RTN's grid
    h = rng.uniform(0.1, 3.0, 100)
    for g in (32, 64, 128):
        e_rtn = ((w - quantize_q4_rtn("w", w, g).dequantized()) ** 2 * h).sum()
        t = quantize_q4_clip("w", w, g, h)
        assert t.q.dtype == np.int8 and np.abs(t.q).max() <= 7 and t.scales.shape == (40, -(-100 // g))
        assert ((w - t.dequantized()) ** 2 * h).sum() < 0.9 * e_rtn


def test_calibrated_graph_keeps_the_formats(model):
    _, m = model
    qg = quantize_calibrated(m.graph, [m.tokenizer.encode(TEXT)], "awq", 64, 4)
    assert qg.method == "awq" and qg.kv_bits == 4 and qg.group_size == 64
    assert set(qg.q4) == {k for k, v in m.graph.weights.items() if v.ndim == 2}
    assert all(t.scales.dtype == np.float32 and t.group_size == 64 for t in qg.q4.values())


def test_eval_json(model, tmp_path, capsys):
    d, _ = model
    data = tmp_path / "held.txt"
    data.write_text("Once upon a time there was a cat.\n\nThe dog ran to the park. The end.\n")
    with pytest.raises(SystemExit) as e:
        main(["eval", str(d), "--data", str(data), "--json", "--weight-quant", "rtn", "--weight-quant", "awq",
              "--group-size", "32", "--group-size", "128"])
    assert e.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["fp32"]["ppl"] > 1 and r["documents"] == 2
    # --kv-rotate and --kv-center auto: the int4 rows are Hadamard-rotated (head_dim 8) and centred, as
    # compile's default builds them
    assert set(r["configs"]) == {f"{w}-g{g}-kv{k}" for w in ("rtn", "awq") for g in (32, 128)
                                 for k in ("8", "4-hadamard-centred")}
    assert {c["kv_rotate"] for c in r["configs"].values() if c["kv_bits"] == 4} == {"hadamard"}
    assert {c["kv_center"] for c in r["configs"].values()} == {"calibrated", "off"}
    for c in r["configs"].values():
        assert c["ppl"] > 1 and 0 <= c["top1_agreement"] <= 1
        assert c["ppl_delta_pct"] == pytest.approx(100 * (c["ppl"] / r["fp32"]["ppl"] - 1))


def test_eval_and_compile_user_errors(model, tmp_path, capsys):
    d, _ = model
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(SystemExit) as e:
        main(["eval", str(d), "--data", str(empty)])
    assert e.value.code == 2 and "no text to evaluate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["compile", str(d), "-o", str(tmp_path / "o"), "--quant", "per-channel", "--weight-quant", "awq"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "--weight-quant awq applies to --quant group only" in err and "\n" not in err
