"""The centred int4 KV cache (--kv-center, quant/kv_center.py): why it is
exact, that it lowers the int4 error where keys share a common part, what
calibration computes, and what compile, the blob and the manifest make of it.
The C kernels against the twins are in the kernel registry
(tllm_attention_kv4_hadamard and tllm_kv_shift_kv4_hadamard, -centred cases)."""
import dataclasses
import json

import numpy as np
import pytest

from tinyllm_gen.cli import main
from tinyllm_gen.compile import CompileOptions, compile_path, quantize
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.lower.blob import read_blob
from tinyllm_gen.quant.kv import kv_centering
from tinyllm_gen.quant.kv_center import KV_CALIBRATION_TEXT, center_name, context_windows, kv_centers
from tinyllm_gen.reference import exact
from tinyllm_gen.reference.sequence import SeqFloatKernels, run_sequence

from tinymodels import make_hf_model

F32 = np.float32


def softmax_attention(q, k, v):
    s = q @ k.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def test_centring_leaves_the_attention_unchanged_in_exact_arithmetic():
    """softmax(q.(k - c)) (v - c_v) + c_v == softmax(q.k) v: q.c is common to all scores of a query,
    and the weights sum to 1."""
    r = np.random.default_rng(1)
    q, k, v = r.standard_normal((3, 16)), r.standard_normal((9, 16)) + 5.0, r.standard_normal((9, 16)) - 2.0
    c, cv = r.standard_normal(16) * 4.0, r.standard_normal(16)
    np.testing.assert_allclose(softmax_attention(q, k - c, v - cv) + cv, softmax_attention(q, k, v),
                               rtol=0, atol=1e-12)


def int4_attention_error(centred: bool, seed: int = 3) -> float:
    """The int4 rotated cache's output error against float64 attention, keys and values with a
    large common part (as trained models' are), the centres their means."""
    r = np.random.default_rng(seed)
    nh = nkv = 1
    hd, T, g = 64, 40, 32
    common = np.zeros(hd)
    common[[3, 17]] = (12.0, -9.0)  # a few channels of the same sign at every position
    k = (common + r.standard_normal((T, hd))).astype(F32)
    v = (r.standard_normal(hd) * 3.0 + r.standard_normal((T, hd))).astype(F32)
    q = r.standard_normal(hd).astype(F32)
    want = softmax_attention(q[None].astype(np.float64) / 8.0, k.astype(np.float64), v.astype(np.float64))[0]
    kr, qr = exact.hadamard_heads(k, nkv, hd), exact.hadamard_heads(q, nh, hd)
    ck = exact.hadamard_heads(k.mean(axis=0).astype(F32), nkv, hd) if centred else np.zeros(hd, F32)
    cv = v.mean(axis=0).astype(F32) if centred else np.zeros(hd, F32)
    kq, ks = exact.quantize_rows_i4_clip(exact.centered(kr, ck).reshape(T, 1, hd), g)
    quantize_values = exact.quantize_rows_i4_clip if centred else exact.quantize_rows_i4
    vq, vs = quantize_values(exact.centered(v, cv).reshape(T, 1, hd), g)
    scale = exact.rotated_attention_scale(F32(1 / 8), hd)
    got = exact.attention_kv4(qr.reshape(1, hd), kq, ks, vq, vs, scale, g)
    if centred:
        got = exact.uncentered_output(got, cv, nh, nkv, hd)
    return float(np.sqrt(np.mean((got - want) ** 2)))


def test_centring_lowers_the_int4_error_where_keys_share_a_common_part():
    for seed in (3, 4, 5):
        plain, centred = int4_attention_error(False, seed), int4_attention_error(True, seed)
        assert centred < 0.6 * plain, (seed, plain, centred)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = make_hf_model(tmp_path_factory.mktemp("kvcenter") / "m", arch="llama", dim=64, hidden=96, layers=2, heads=4,
                      kv_heads=2, vocab=300, context=64, tied=True, seed=5)
    return d, load_model(d)


def test_centres_are_the_rotated_mean_key_and_the_mean_value(model):
    _, m = model
    docs = [m.tokenizer.encode("The cat sat on the mat. It was warm."), m.tokenizer.encode("A dog ran by.")]
    got = kv_centers(m.graph, docs, 64)
    seen: dict = {}

    class Keep(SeqFloatKernels):
        def attention(self, node, q, k, v):
            seen.setdefault(node.attrs["layer"], []).append((k, v))
            return super().attention(node, q, k, v)

    kern = Keep(m.graph, 64)
    windows = context_windows(docs, 64)
    assert windows == docs  # each document from position 0
    for w in windows:
        run_sequence(m.graph, kern, w, need_logits=False)
    hd = m.graph.config.head_dim
    for layer, parts in seen.items():
        k = np.concatenate([p[0] for p in parts]).astype(np.float64).mean(axis=0)
        v = np.concatenate([p[1] for p in parts]).astype(np.float64).mean(axis=0)
        k_rot = exact.hadamard_heads(k.astype(F32), m.graph.config.n_kv_heads, hd).astype(np.float64)
        np.testing.assert_allclose(got.k[layer], k_rot, rtol=2 ** -8, atol=1e-6)  # 8 significant bits kept
        np.testing.assert_allclose(got.v[layer], v, rtol=2 ** -8, atol=1e-6)
        m_bits = np.frexp(got.k[layer].astype(np.float64))[0] * 256
        assert np.array_equal(m_bits, np.round(m_bits))  # rounded to bfloat16's precision: stable bytes


def test_centres_are_remembered_per_model_and_text_and_never_stale(model):
    """A second call on the same float model and text returns the remembered centres (read-only); a
    changed weight, another text or another context computes them again."""
    _, m = model
    docs = [m.tokenizer.encode("The cat sat on the mat. It was warm.")]
    first = kv_centers(m.graph, docs, 64)
    assert kv_centers(m.graph, docs, 64) is first
    assert not first.k[0].flags.writeable and not first.v[0].flags.writeable
    name = "layers.0.wk"
    w = m.graph.weights[name].copy()
    w[0, 0] += 1.0
    changed = dataclasses.replace(m.graph, weights={**m.graph.weights, name: w})
    other = kv_centers(changed, docs, 64)
    assert other is not first and not np.array_equal(other.k[0], first.k[0])
    assert kv_centers(m.graph, [m.tokenizer.encode("A dog ran by the old red barn.")], 64) is not first
    assert kv_centers(m.graph, docs, 8) is not first  # other windows


def test_windows_are_the_documents_cut_at_the_context():
    """Each document from position 0, cut every max_seq tokens (a key's common part turns with its
    position); a tail shorter than WINDOW_MIN is dropped, a short document is kept whole."""
    docs = [list(range(1, 21)), [1, 6, 7], list(range(30, 48))]
    assert context_windows(docs, 9) == [docs[0][:9], docs[0][9:18], [1, 6, 7], docs[2][:9], docs[2][9:18]]
    assert context_windows(docs, 100) == docs


def test_compile_centres_the_rotated_int4_cache_by_default(model):
    d, m = model
    c = compile_path(d, CompileOptions(kv_bits=4, max_seq=32))
    manifest = json.loads(c.tree.files["manifest.json"])
    assert manifest["options"]["kv_center"] == "calibrated"
    names = {e.name for e in c.program.blob.entries}
    assert {center_name(i, w) for i in range(2) for w in ("kv_k_center", "kv_v_center")} <= names
    back = read_blob(c.program.blob.data, c.program.blob.entries, m.graph.config, 32, 4, c.qgraph.kernels)
    for a, b in zip(back.kv_centers.k + back.kv_centers.v, c.qgraph.kv_centers.k + c.qgraph.kv_centers.v):
        assert np.array_equal(a, b)  # the tree's reference (run --check) centres as the build does
    model_c = c.tree.files["src/tllm_model.c"].decode()
    assert "V_LAYERS_1_KV_K_CENTER, V_LAYERS_1_KV_V_CENTER" in model_c
    off = compile_path(d, CompileOptions(kv_bits=4, max_seq=32, kv_center="off"))
    assert "kv_center" not in json.loads(off.tree.files["manifest.json"])["options"]
    assert not any("center" in e.name for e in off.program.blob.entries)
    assert len(c.program.blob.data) > len(off.program.blob.data)


def test_centring_reaches_the_reference(model):
    """The centred cache rounds other values: different logits from the same weights."""
    from tinyllm_gen.reference.executor import Executor, QuantKernels

    _, m = model
    qg = quantize(m, CompileOptions(kv_bits=4))
    assert qg.kv_centers is not None
    logits = {}
    for name, g in (("centred", qg), ("plain", dataclasses.replace(qg, kv_centers=None))):
        ex = Executor(m.graph, QuantKernels(g, 16))
        ex.reset()
        logits[name] = np.stack([ex.step(t, p) for p, t in enumerate([1, 5, 9, 14, 2, 7])])
    assert not np.array_equal(logits["centred"], logits["plain"])


def test_centring_option_resolution():
    assert kv_centering("auto", 4, "hadamard") and not kv_centering("auto", 4, "off")
    assert not kv_centering("auto", 8, "off") and not kv_centering("off", 4, "hadamard")
    assert kv_centering("calibrated", 4, "hadamard")
    with pytest.raises(UserError, match="--kv-center calibrated centres the Hadamard-rotated int4 cache"):
        kv_centering("calibrated", 8, "off")
    with pytest.raises(UserError, match="--kv-center sideways is not known"):
        kv_centering("sideways", 4, "hadamard")


def test_compile_refuses_centring_an_int8_cache_in_one_line(model, tmp_path, capsys):
    d, _ = model
    with pytest.raises(SystemExit) as e:
        main(["compile", str(d), "-o", str(tmp_path / "out"), "--kv-center", "calibrated"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--kv-bits 4" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_built_in_sample_is_everyday_english():
    text = KV_CALIBRATION_TEXT.read_text(encoding="utf-8")
    assert len(text.split()) > 1500 and text.count("\n\n") >= 20
