"""The per-channel scheme's integer arithmetic against CMSIS-NN's definition,
written out scalar by scalar (arm_nn_requantize, double rounding)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.per_channel import quantize_multiplier


def requantize_scalar(val: int, mult: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    v = val * (1 << left)
    prod = v * mult + (1 << 30)
    high = prod >> 31
    mask = (1 << right) - 1
    rem = high & mask
    res = high >> right
    threshold = (mask >> 1) + (1 if res < 0 else 0)
    return res + (1 if rem > threshold else 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**20), 2**20), st.floats(1e-6, 0.99), st.integers(0, 3))
def test_vectorised_requantize_matches_scalar_definition(acc, real, extra_left):
    m, s = quantize_multiplier(real)
    s += extra_left if abs(acc) < 2**20 else 0
    got = int(exact.cmsis_requantize(np.array([acc]), np.array([m]), np.array([s]))[0])
    assert got == requantize_scalar(acc, m, s)


def test_requantize_rounding_follows_cmsis_nn():
    # x 0.5 as multiplier 2^30, shift 0: the doubling high multiply rounds half up
    m, s = quantize_multiplier(0.5)
    got = exact.cmsis_requantize(np.array([1, 3, -1, -3, 5]), np.full(5, m), np.full(5, s))
    assert got.tolist() == [1, 2, 0, -1, 3]
    # x 0.25 as 2^30 with shift -1: then the power-of-two divide rounds half away from zero
    m, s = quantize_multiplier(0.25)
    got = exact.cmsis_requantize(np.array([2, 6, -2, -6]), np.full(4, m), np.full(4, s))
    assert got.tolist() == [1, 2, -1, -2]


def test_quantize_multiplier_represents_the_scale():
    for real in (1e-4, 0.3, 0.5, 0.999999, 1.7, 12.0):
        m, s = quantize_multiplier(real)
        assert 2**30 <= m < 2**31
        assert abs(m * 2.0 ** (s - 31) / real - 1) < 1e-9
