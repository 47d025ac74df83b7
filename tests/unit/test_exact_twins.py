"""Properties of the bit-exact numpy twins (their C equality is tested in
tests/host/test_kernel_twins.py and end to end)."""
import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import pack_q4, unpack_q4
from tinyllm_gen.quant.rtn import quantize_q4_rtn
from tinyllm_gen.reference.sampler import Rng, Sampler, SamplingOptions


def test_expf_is_accurate_and_float32_only():
    x = np.linspace(-80, 80, 100001, dtype=np.float32)
    y = exact.expf(x)
    assert y.dtype == np.float32
    rel = np.abs(y.astype(np.float64) / np.exp(x.astype(np.float64)) - 1)
    assert rel.max() < 4e-7
    assert exact.expf(np.float32([-100.0]))[0] == 0.0
    assert np.isfinite(exact.expf(np.float32([1000.0]))).all()


def test_round_half_away_from_zero():
    v = np.float32([0.5, 1.5, -0.5, -1.5, 2.49999, -2.5])
    assert exact.round_half_away(v).tolist() == [1, 2, -1, -2, 2, -3]


def test_q4_pack_round_trip_and_nibble_order():
    q = np.array([[1, 2, 3, 4, -7]], np.int8)
    packed = pack_q4(q)
    assert packed == bytes([0x21, 0x43, 0x09])  # low nibble first; -7 = 0x9; odd tail padded
    assert (unpack_q4(packed, 1, 5) == q).all()
    rng = np.random.default_rng(0)
    q = rng.integers(-7, 8, size=(7, 33)).astype(np.int8)
    assert (unpack_q4(pack_q4(q), 7, 33) == q).all()


def test_rtn_error_is_bounded_by_half_a_step():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 100)).astype(np.float32)
    t = quantize_q4_rtn("w", w, 32)
    assert t.scales.shape == (16, 4)  # last group is short (100 = 3*32 + 4)
    step = np.repeat(t.scales, 32, axis=1)[:, :100]
    assert (np.abs(t.dequantized() - w) <= step / 2 + 1e-6).all()
    assert np.abs(t.q).max() == 7


def test_quantize_groups_matches_definition():
    x = np.float32([0.0, 1.0, -2.0, 0.25] + [0.0] * 4)
    q, s = exact.quantize_groups_i8(x, 4)
    assert s[0] == np.float32(2.0) / np.float32(127.0) and s[1] == 0
    assert q.tolist() == [0, 64, -127, 16, 0, 0, 0, 0]


def test_rng_is_xorshift64star():
    r = Rng(1)
    first = [r.next_u32() for _ in range(3)]
    # recomputed by hand from the xorshift64* definition
    s, out = 1, []
    for _ in range(3):
        s ^= s >> 12
        s ^= (s << 25) & (2**64 - 1)
        s ^= s >> 27
        out.append(((s * 0x2545F4914F6CDD1D) & (2**64 - 1)) >> 32)
    assert first == out


def test_top_p_stays_in_the_nucleus():
    logits = np.float32([5.0, 4.0, 0.0, -1.0, -2.0, 3.0])
    picks = set()
    for seed in range(1, 200):
        picks.add(Sampler(SamplingOptions(1.0, 0.7, seed)).sample(logits))
    assert picks <= {0, 1} and picks == {0, 1}
    assert Sampler(SamplingOptions(0.0)).sample(logits) == 0
