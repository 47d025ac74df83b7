"""Host tier, int4 KV cache: generated firmware with --kv-bits 4 built with
the host gcc against the quantized reference, token for token.  The kernels
themselves (tllm_quantize_i4, tllm_attention_kv4) are in the kernel registry
(tests/host/test_kernel_twins.py)."""
import pytest

from firmware_harness import GREEDY, KV4_CASES, TOP_P, assert_identical, build_case, need

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-kv4")


@pytest.mark.parametrize("shape,group", KV4_CASES)
def test_host_build_with_int4_kv_matches_reference(root, shape, group):
    need("cmake")
    built = build_case(root, shape, group, "host", kv_bits=4)
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
