"""Hadamard rotation of the int4 KV cache (--kv-rotate, quant/kv.py): the
twin's properties, the option's resolution, and what lowering and the
manifest make of it.  The C kernels against the twins are in the kernel
registry (tllm_hadamard_heads, tllm_attention_kv4_hadamard)."""
import dataclasses

import numpy as np
import pytest

from tinyllm_gen.compile import CompileOptions, compile_path, quantize
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.kernels import Attention
from tinyllm_gen.lower.records import source_of
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.quant.kv import kv_rotation, kv_rotation_note
from tinyllm_gen.reference import exact

from tinymodels import make_hf_model

F32 = np.float32


def sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@pytest.mark.parametrize("hd", [1, 2, 4, 8, 16, 32, 64, 128, 256])
def test_rotation_twice_is_head_dim_times_identity(hd):
    """Small integers: every sum is exact in float32, so H(Hx) == hd * x bit for bit."""
    x = np.random.default_rng(hd).integers(-50, 51, 3 * hd).astype(F32)
    twice = exact.hadamard_heads(exact.hadamard_heads(x, 3, hd), 3, hd)
    assert np.array_equal(twice, x * F32(hd))


def test_rotation_is_the_sylvester_hadamard_matrix_per_head():
    x = np.random.default_rng(1).integers(-9, 10, (5, 2 * 16)).astype(F32)
    got = exact.hadamard_heads(x, 2, 16)
    want = (x.reshape(5, 2, 16).astype(np.float64) @ sylvester(16).T).reshape(5, 32)
    assert np.array_equal(got.astype(np.float64), want)


def test_rotated_scores_equal_the_plain_ones_in_float64():
    """(Hq).(Hk) / hd == q.k: exactly for dyadic inputs (no rounding in the
    float32 butterflies), to float32 rounding for any."""
    r = np.random.default_rng(2)
    q, k = (r.integers(-64, 65, (4, 64)) / 8).astype(F32), (r.integers(-64, 65, (7, 64)) / 4).astype(F32)
    qr = exact.hadamard_heads(q, 1, 64).astype(np.float64)
    kr = exact.hadamard_heads(k, 1, 64).astype(np.float64)
    assert np.array_equal(qr @ kr.T / 64, q.astype(np.float64) @ k.astype(np.float64).T)
    q, k = r.standard_normal((4, 64)).astype(F32), r.standard_normal((7, 64)).astype(F32)
    qr = exact.hadamard_heads(q, 1, 64).astype(np.float64)
    kr = exact.hadamard_heads(k, 1, 64).astype(np.float64)
    np.testing.assert_allclose(qr @ kr.T / 64, q.astype(np.float64) @ k.astype(np.float64).T, rtol=0, atol=1e-5)


def test_rotated_scale_is_exact():
    for hd in (8, 16, 64, 128):
        s = exact.attention_scale(hd)
        assert exact.rotated_attention_scale(s, hd) * F32(hd) == s


def _float_attention(q, k, v, scale):
    s = q.astype(np.float64) @ k.astype(np.float64).T * float(scale)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def test_rotation_shrinks_int4_attention_error_with_outlier_channels():
    """Keys with a few large channels (what real models' K looks like after
    RoPE): one outlier sets its group's scale and flattens the rest to 0.
    Rotated, the same cache gives attention much closer to float."""
    r = np.random.default_rng(3)
    hd, T = 64, 48
    k = r.standard_normal((T, 1, hd)).astype(F32)
    k[:, 0, [3, 40]] *= F32(25.0)
    v = r.standard_normal((T, 1, hd)).astype(F32)
    q = r.standard_normal((2, hd)).astype(F32) * F32(2.0)
    scale, g = exact.attention_scale(hd), 32
    want = _float_attention(q, k[:, 0], v[:, 0], scale)
    errors = {}
    for rotate in (False, True):
        qq, kk, sc = q, k, scale
        if rotate:
            qq, kk = exact.hadamard_heads(q, 1, hd), exact.hadamard_heads(k, 1, hd)
            sc = exact.rotated_attention_scale(scale, hd)
        kq, ks = exact.quantize_rows_i4(kk, g)
        vq, vs = exact.quantize_rows_i4(v, g)
        got = exact.attention_kv4(qq, kq, ks, vq, vs, sc, g).reshape(2, hd)
        errors[rotate] = float(np.abs(got - want).max())
    assert errors[True] < 0.5 * errors[False], errors


@pytest.mark.parametrize("mode,bits,hd,want", [
    ("auto", 4, 64, "hadamard"), ("auto", 4, 48, "off"), ("auto", 8, 64, "off"), ("off", 4, 64, "off"),
    ("hadamard", 4, 8, "hadamard"), ("off", 8, 48, "off")])
def test_kv_rotation_resolves(mode, bits, hd, want):
    assert kv_rotation(mode, bits, hd) == want


@pytest.mark.parametrize("mode,bits,hd,words", [
    ("hadamard", 4, 48, ("power-of-two head_dim", "48", "--kv-rotate off")),
    ("hadamard", 8, 64, ("int8 KV", "--kv-bits 4")),
    ("sideways", 4, 64, ("not known", "auto, hadamard, off"))])
def test_kv_rotation_refuses_in_one_line(mode, bits, hd, words):
    with pytest.raises(UserError) as e:
        kv_rotation(mode, bits, hd)
    text = str(e.value)
    assert "\n" not in text and all(w in text for w in words)


def test_auto_says_why_it_left_the_cache_unrotated():
    assert "head_dim 48 is not a power of two" in kv_rotation_note("auto", 4, 48)
    assert kv_rotation_note("auto", 4, 64) == "" and kv_rotation_note("off", 4, 48) == ""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = make_hf_model(tmp_path_factory.mktemp("kvrot") / "m", arch="llama", dim=64, hidden=96, layers=2, heads=4,
                      kv_heads=2, vocab=300, context=64, tied=True, seed=5)
    return d, load_model(d)


@pytest.mark.parametrize("bits,mode,fn", [(4, "auto", "tllm_attention_kv4_hadamard"),
                                          (4, "off", "tllm_attention_kv4"), (8, "auto", "tllm_attention_i8")])
def test_lowering_calls_the_rotated_kernel_when_asked(model, bits, mode, fn):
    _, m = model
    qg = quantize(m, CompileOptions(kv_bits=bits, kv_rotate=mode))
    att = [c.args for c in lower_step(source_of(qg)).calls if isinstance(c.args, Attention)]
    assert att and {a.c_call().fn for a in att} == {fn}


def test_manifest_and_report_name_the_rotation(model):
    d, _ = model
    for mode, want in (("auto", "hadamard"), ("off", "off")):
        c = compile_path(d, CompileOptions(kv_bits=4, kv_rotate=mode))
        manifest = c.tree.files["manifest.json"].decode()
        assert f'"kv_rotate": "{want}"' in manifest
        assert c.plan.kv_rotate == want
    c8 = compile_path(d, CompileOptions(kv_bits=8))
    assert b"kv_rotate" not in c8.tree.files["manifest.json"]  # int8 trees keep their manifests


def test_reference_differs_with_and_without_rotation(model):
    """The option reaches the reference: the rotated cache rounds other values."""
    from tinyllm_gen.reference.executor import Executor, QuantKernels

    _, m = model
    qg = quantize(m, CompileOptions(kv_bits=4, kv_rotate="off"))
    logits = {}
    for rot in ("off", "hadamard"):
        ex = Executor(m.graph, QuantKernels(dataclasses.replace(qg, kv_rotate=rot), 16))
        ex.reset()
        logits[rot] = np.stack([ex.step(t, p) for p, t in enumerate([1, 5, 9, 14, 2, 7])])
    assert not np.array_equal(logits["off"], logits["hadamard"])


def test_plan_says_auto_left_a_non_power_of_two_head_unrotated(tmp_path):
    from tinyllm_gen.compile import plan_model

    d = make_hf_model(tmp_path / "hd48", arch="llama", dim=96, hidden=96, layers=2, heads=2, kv_heads=1, vocab=300,
                      context=64, tied=True, seed=6)
    doc, text = plan_model(d, None, CompileOptions(kv_bits=4), "full", "group", "off", None, 1, False)
    assert doc["kv_rotate"] == "off" and "head_dim 48 is not a power of two" in doc["kv_rotate_note"]
    assert "--kv-rotate auto: no Hadamard rotation" in text and "int4 unrotated" in text
    doc, text = plan_model(tmp_path / "hd48", None, CompileOptions(kv_bits=8), "full", "group", "off", None, 1, False)
    assert "kv_rotate" not in doc and "kv-rotate" not in text
    with pytest.raises(UserError, match="power-of-two head_dim"):
        plan_model(d, None, CompileOptions(kv_bits=4, kv_rotate="hadamard"), "full", "group", "off", None, 1, False)
