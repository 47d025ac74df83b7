"""Host tier: tiny GGUF models with their Q4_0 / Q4_1 / Q8_0 blocks kept as
they are, generated C built with host gcc == QuantKernels, token for token
(greedy and top-p; greedy-only builds stream the classifier through
tllm_argmax_q*).  With the Cortex-M7 kernel set the blocks are moved into
4-row tiles (tllm_kernels_gguf_m7.c, its portable C on the host), the FFN's
gate and up fused into one tiled matrix, and, streamed, fed chunk by chunk
through the double buffer: the same tokens."""
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


@pytest.mark.parametrize("stream", ["off", "all"])
@pytest.mark.parametrize("case", ["llama-q4_1-embd-q8_0", "llama-q4_0", "qwen2-q8_0-untied"])
def test_host_build_of_tiled_gguf_blocks_matches_reference(root, case, stream):
    need("cmake")
    path, out = build_gguf(root, case, "host", kernels="cortex-m7", stream=stream, stream_chunk=1024)
    c = (out / "src" / "tllm_model.c").read_text()
    qtype = GGUF_CASES[case][2].replace("_", "").lower()  # Q4_1 -> q41
    assert f"_{qtype}x4" in c and "tllm_matvec_q4_1(" not in c  # the tiled kernels, not the row blocks
    assert "L->w_gate_up" in c and "tllm_silu_mul_pairs_x16" in c  # gate/up fused into one tiled matrix
    assert ("&weight_stream" in c) == (stream == "all")
    assert_gguf_identical(path, out, GREEDY)
    assert_gguf_identical(path, out, TOP_P)


@pytest.mark.parametrize("kernels", ["portable", "cortex-m7"])
def test_host_build_with_the_classifier_re_rounded_to_q4_0_matches_reference(root, kernels):
    """--classifier-quant q4: the tied Q8_0 table becomes Q4_0 blocks (embedding rows from the same bytes)."""
    need("cmake")
    path, out = build_gguf(root, "llama-q4_1-embd-q8_0", "host", kernels=kernels, classifier_quant="q4")
    c = (out / "src" / "tllm_model.c").read_text()
    assert "q80" not in c.replace("Q8_0", "") and "q8_0" not in c  # no Q8_0 kernel left: the table is Q4_0
    assert_gguf_identical(path, out, GREEDY, classifier_quant="q4", kernels=kernels)
    assert_gguf_identical(path, out, TOP_P, classifier_quant="q4", kernels=kernels)
