"""Host tier, the 8:4 KV cache (--kv-bits 8:4: int8 K, int4 V): generated
firmware built with the host gcc against the quantized reference, token for
token, greedy and top-p.  head_dim 16 and 8 keep one value group per head
(pass 1 finds the value scales' maximum), 48 has two groups of 24 (pass 2
finds each group's).  The kernels themselves (tllm_attention_k8v4,
tllm_kv_shift_k8v4) are in the kernel registry (tests/host/test_kernel_twins.py);
the rolling context over the 8:4 cache is in test_rolling_host.py."""
import pytest

from firmware_harness import GREEDY, KV4_CASES, TOP_P, assert_identical, build_case, need
from tinyllm_gen.build.out import read_manifest

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-k8v4")


@pytest.mark.parametrize("shape,group", KV4_CASES)
def test_host_build_with_k8v4_kv_matches_reference(root, shape, group):
    need("cmake")
    built = build_case(root, shape, group, "host", kv_bits="8:4")
    options = read_manifest(built.out)["options"]
    assert options["kv_bits"] == "8:4" and "kv_rotate" not in options  # int8 keys: nothing to rotate
    step = "\n".join(p.read_text() for p in built.out.rglob("tllm_model*.c"))
    assert "tllm_attention_k8v4(" in step and "tllm_attention_i8(" not in step and "tllm_attention_kv4" not in step
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
