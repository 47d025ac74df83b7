"""The registry's wire format (tests/kernel_registry/spec.py): what the
generic harness reads and writes, and the checks that catch a declaration
and a case (or a twin) that disagree."""
import numpy as np
import pytest

from kernel_registry import BY_NAME
from kernel_registry.spec import bits, decode, encode, expected, output_bytes


def test_encode_lays_out_scalars_counts_and_elements_in_declaration_order():
    k = BY_NAME["tllm_quantize_i8"]  # x[n] in, n, group, q[n] out, scales[cdiv(n, group)] out
    v = dict(x=np.float32([1.0, -2.0, 0.5]), n=3, group=2)
    data = encode(k, v)
    assert data == (np.uint32(3).tobytes() + np.float32([1.0, -2.0, 0.5]).tobytes() + np.int32(3).tobytes()
                    + np.int32(2).tobytes() + np.uint32(3).tobytes() + np.uint32(2).tobytes())
    assert output_bytes(k, v) == 3 + 2 * 4


def test_a_case_whose_array_disagrees_with_its_length_is_refused():
    k = BY_NAME["tllm_add"]
    with pytest.raises(AssertionError, match="b has 3 elements, its length n says 4"):
        encode(k, dict(a=np.ones(4, np.float32), b=np.ones(3, np.float32), n=4))


def test_decode_refuses_output_of_the_wrong_size():
    k = BY_NAME["tllm_add"]
    v = dict(a=np.ones(4, np.float32), b=np.ones(4, np.float32), n=4)
    assert decode(k, v, bytes(16))["a"].tolist() == [0.0] * 4
    with pytest.raises(AssertionError, match="harness wrote 17 bytes, the declaration reads 16"):
        decode(k, v, bytes(17))


def test_a_twin_that_computes_in_float64_is_refused():
    k = BY_NAME["tllm_add"]
    bad = type(k)(**{**k.__dict__, "twin": lambda v: {"a": np.asarray(v["a"], np.float64) + v["b"]}})
    with pytest.raises(AssertionError, match="twin output a is float64, not float32"):
        expected(bad, dict(a=np.ones(4, np.float32), b=np.ones(4, np.float32), n=4))


def test_bits_tell_signed_zeros_apart():
    assert bits(np.float32([0.0]))[0] != bits(np.float32([-0.0]))[0]
