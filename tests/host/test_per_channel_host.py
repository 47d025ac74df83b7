"""Host tier: the --quant per-channel scheme (CMSIS-NN arithmetic) built with
the host gcc runs tinyllm-gen's C twin of CMSIS-NN: == the reference."""
import pytest

from firmware_harness import GREEDY, TOP_P, assert_identical, build_case, need

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("per-channel-host")


@pytest.mark.parametrize("shape", ["llama-tied-gqa", "qwen2-bias-untied"])
def test_per_channel_twin_matches_reference(root, shape):
    need("cmake")
    built = build_case(root, shape, 32, "host", quant="per-channel")
    assert_identical(built, 32, GREEDY)
    assert_identical(built, 32, TOP_P)
