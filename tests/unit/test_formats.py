"""Each weight layout has its pair of functions (issue 11.6): the q4x4 stream
unpacks to the Q4Tensor it was packed from, for any shape and group size,
and its size is what the size function (and the C descriptor) says."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.quant.formats import Q4Tensor, pack_q4, pack_q4x4, q4x4_bytes_of, unpack_q4, unpack_q4x4


@st.composite
def q4_tensors(draw):
    rows = draw(st.integers(1, 13))
    cols = draw(st.integers(1, 150))
    group = draw(st.sampled_from([32, 64, 128]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    q = rng.integers(-7, 8, (rows, cols)).astype(np.int8)
    scales = rng.standard_normal((rows, -(-cols // group))).astype(np.float32)
    return Q4Tensor("w", q, scales, group)


@settings(max_examples=200, deadline=None)
@given(q4_tensors())
def test_q4x4_round_trip(t):
    data = pack_q4x4(t)
    assert len(data) == q4x4_bytes_of(t.rows, t.cols, t.group_size)
    back = unpack_q4x4(data, t.rows, t.cols, t.group_size)
    assert np.array_equal(back.q, t.q)
    assert np.array_equal(back.scales.view(np.uint32), t.scales.view(np.uint32))


@settings(max_examples=100, deadline=None)
@given(q4_tensors())
def test_q4_packed_round_trip(t):
    assert np.array_equal(unpack_q4(pack_q4(t.q), t.rows, t.cols), t.q)


def test_truncated_stream_is_refused():
    t = Q4Tensor("w", np.zeros((4, 40), np.int8), np.ones((4, 2), np.float32), 32)
    data = pack_q4x4(t)
    try:
        unpack_q4x4(data[:-4], 4, 40, 32)
    except ValueError as e:
        assert "expected" in str(e)
    else:
        raise AssertionError("a short stream unpacked")
