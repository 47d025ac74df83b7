"""Host tier: tiny GGUF models with their Q4_0 / Q4_1 / Q8_0 blocks kept as
they are, generated C built with host gcc == QuantKernels, token for token
(greedy and top-p; greedy-only builds stream the classifier through
tllm_argmax_q*)."""
import pytest

from firmware_harness import GREEDY, TOP_P, need
from gguf_firmware import GGUF_CASES, assert_gguf_identical, build_gguf

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf-host")


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_host_build_of_kept_gguf_blocks_matches_reference(root, case):
    need("cmake")
    path, out = build_gguf(root, case, "host")
    assert_gguf_identical(path, out, GREEDY)
    assert_gguf_identical(path, out, TOP_P)


@pytest.mark.parametrize("case", ["llama-q4_1-embd-q8_0", "qwen2-q8_0-untied"])
def test_host_greedy_build_streams_the_gguf_classifier(root, case):
    need("cmake")
    path, out = build_gguf(root, case, "host", sampler="greedy")
    assert "tllm_argmax_q" in (out / "src" / "tllm_model.c").read_text()
    assert_gguf_identical(path, out, GREEDY)
