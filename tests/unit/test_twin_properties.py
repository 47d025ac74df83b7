"""Properties of numpy twins that need no C: the registry
(tests/host/test_kernel_twins.py) shows the C equals these twins bit for
bit, so what holds here holds for the firmware.  Moved from the host files
whose C harnesses the registry replaced (test_attention_i8_host.py,
test_batched_kernels.py)."""
import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.rtn import quantize_q4_rtn


def test_exp2_nonpos_accuracy_and_weight_bound():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        -np.linspace(0, 70, 200_001, dtype=np.float32),
        -rng.exponential(1.0, 50_000).astype(np.float32),
        np.float32([-0.0, -0.5, -1.5, -2.5, -63.5, -64.0, -1e-30, -np.float32(1e30)]),
    ]).astype(np.float32)
    got = exact.exp2_nonpos(x)
    y = np.maximum(x.astype(np.float64), -64.0)
    assert np.max(np.abs(got / np.exp2(y) - 1)) < 3e-6
    assert got.max() == 1.0 and exact.exp2_nonpos(np.float32([0.0]))[0] == 1.0  # weights never exceed W


def test_attention_weight_limit_narrows_past_516_keys():
    """n_keys * 32767 * 127 overflows int32 from 517 keys on: W shrinks."""
    assert exact.attention_weight_limit(516) == 32767 and exact.attention_weight_limit(517) == 32706
    assert exact.attention_weight_limit(4096) == 4128


def test_attention_i8_is_softmax_attention():
    """The integer weights stay within 1e-3 of float attention over the same
    int8 cache: quantizing the weights costs far less than quantizing K/V."""
    nh, nkv, hd, T = 4, 2, 16, 64
    rng = np.random.default_rng(11)
    kq = rng.integers(-127, 128, (T, nkv, hd)).astype(np.int8)
    vq = rng.integers(-127, 128, (T, nkv, hd)).astype(np.int8)
    ksc = rng.uniform(0.005, 0.03, (T, nkv)).astype(np.float32)
    vsc = rng.uniform(0.005, 0.03, (T, nkv)).astype(np.float32)
    q = (rng.standard_normal((nh, hd)) * 2).astype(np.float32)
    scale = np.float32(0.25)
    got = exact.attention_i8(q, kq, ksc, vq, vsc, scale).reshape(nh, hd)
    q8, qsc = exact.quantize_rows_i8(q)
    kv_of = np.arange(nh) // (nh // nkv)
    for h in range(nh):
        kf = kq[:, kv_of[h]].astype(np.float64) * ksc[:, kv_of[h], None]
        vf = vq[:, kv_of[h]].astype(np.float64) * vsc[:, kv_of[h], None]
        s = (kf @ (q8[h].astype(np.float64) * qsc[h])) * float(scale)
        p = np.exp(s - s.max())
        want = (p / p.sum()) @ vf
        assert np.max(np.abs(got[h] - want)) < 1e-3 * np.max(np.abs(vf))


def test_attention_i8_zero_value_head_gives_exact_zeros():
    rng = np.random.default_rng(2)
    kq, ks = exact.quantize_rows_i8(rng.standard_normal((9, 2, 16)).astype(np.float32))
    v = rng.standard_normal((9, 2, 16)).astype(np.float32)
    v[:, 0] = 0.0
    vq, vs = exact.quantize_rows_i8(v)
    out = exact.attention_i8(rng.standard_normal((4, 16)).astype(np.float32), kq, ks, vq, vs, np.float32(0.25))
    assert (out[:2 * 16] == 0).all()  # heads 0 and 1 read kv head 0


def test_numpy_matmat_twin_is_p_matvecs():
    rng = np.random.default_rng(3)
    t = quantize_q4_rtn("w", rng.standard_normal((5, 70)).astype(np.float32), 32)
    xs = [exact.quantize_groups_i8(rng.standard_normal(70).astype(np.float32), 32) for _ in range(3)]
    got = exact.matmat_q4(t.q, t.scales, 32, np.stack([a for a, _ in xs]), np.stack([s for _, s in xs]))
    for p, (a, s) in enumerate(xs):
        assert got[p].view(np.uint32).tolist() == exact.matvec_q4(t.q, t.scales, 32, a, s).view(np.uint32).tolist()


def _k8v4_cache(rng, T, nkv, hd, group):
    k = (rng.standard_normal((T, nkv, hd)) * 2).astype(np.float32)
    v = (rng.standard_normal((T, nkv, hd)) * 2).astype(np.float32)
    kq, ks = exact.quantize_rows_i8(k)
    vq, vs = exact.quantize_rows_i4(v, group)
    return kq, ks, vq, vs


def test_attention_k8v4_with_one_value_group_is_int8_attention_over_the_int4_values():
    """One value scale per row is the int8 cache's layout, and the kernels' float work is the same,
    so the 8:4 twin gives attention_i8's bits over the same (int4-valued) cache."""
    rng = np.random.default_rng(5)
    for nh, nkv, hd, T in [(8, 4, 8, 1), (8, 4, 8, 37), (4, 2, 16, 600)]:
        kq, ks, vq, vs = _k8v4_cache(rng, T, nkv, hd, hd)
        q = (rng.standard_normal((nh, hd)) * 3).astype(np.float32)
        scale = exact.attention_scale(hd)
        got = exact.attention_k8v4(q, kq, ks, vq, vs, scale, hd)
        want = exact.attention_i8(q, kq, ks, vq, vs[..., 0], scale)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (nh, nkv, hd, T)


def test_attention_k8v4_is_softmax_attention():
    """Within 1e-3 of float attention over the same 8:4 cache (two value groups per head)."""
    nh, nkv, hd, g, T = 4, 2, 64, 32, 48
    rng = np.random.default_rng(13)
    kq, ks, vq, vs = _k8v4_cache(rng, T, nkv, hd, g)
    q = (rng.standard_normal((nh, hd)) * 2).astype(np.float32)
    scale = exact.attention_scale(hd)
    got = exact.attention_k8v4(q, kq, ks, vq, vs, scale, g).reshape(nh, hd)
    q8, qsc = exact.quantize_rows_i8(q)
    kv_of = np.arange(nh) // (nh // nkv)
    for h in range(nh):
        kf = kq[:, kv_of[h]].astype(np.float64) * ks[:, kv_of[h], None]
        vf = vq[:, kv_of[h]].astype(np.float64) * np.repeat(vs[:, kv_of[h]], g, axis=-1)
        s = (kf @ (q8[h].astype(np.float64) * qsc[h])) * float(scale)
        p = np.exp(s - s.max())
        want = (p / p.sum()) @ vf
        assert np.max(np.abs(got[h] - want)) < 1e-3 * np.max(np.abs(vf))

