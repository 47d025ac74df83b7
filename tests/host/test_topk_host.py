"""Host tier: `--sampler topk:K` builds (no logits vector: the classifier's
chunks feed a running K-entry set, firmware/tllm_topk.h) give the
reference's sampled tokens bit for bit (reference.generate(top_k=K),
sampler.py), for every classifier layout: q4 (portable), q4x4 (the M7
kernels' C twin), q4x4 over the weight stream, and a GGUF Q8_0 tied
classifier; K larger than a 64-row chunk and vocabularies that are not a
multiple of it (300, 320)."""
import pytest

from firmware_harness import need, prompt_for
from gguf_firmware import gguf_case
from topk_firmware import SAMPLINGS, build_topk, check_all, model, reference
from tinyllm_gen.reference.sampler import SamplingOptions

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("topk-host")


@pytest.mark.parametrize("kernels,k", [("portable", 100), ("cortex-m7", 5)])
def test_topk_host_matches_reference(root, kernels, k):
    need("cmake")
    path = model(root, "llama-tied-gqa")  # vocab 300: four 64-row chunks and one of 44
    out = build_topk(root, path, f"llama-{kernels}", k, kernels=kernels)
    src = (out / "src" / "tllm_model.c").read_text()
    layout = "q4x4" if kernels == "cortex-m7" else "q4"
    assert f"tllm_topk_{layout}(&W_TOK_EMBEDDINGS" in src and "tllm_sample(" not in src
    header = (out / "src" / "tllm_model.h").read_text()
    assert "TLLM_OFF_SAMPLE_IDX" not in header and f"#define TLLM_TOP_K {k} " in header
    check_all(out, path, k)


def test_topk_streamed_host(root):
    need("cmake")
    path = model(root, "qwen2-bias-untied")  # vocab 320, untied classifier, chunks of 1 KiB
    out = build_topk(root, path, "qwen2-stream", 70, kernels="cortex-m7", stream="all", stream_chunk=1024)
    assert "tllm_stream_topk_q4x4(&weight_stream" in (out / "src" / "tllm_model.c").read_text()
    check_all(out, path, 70, SAMPLINGS[1:3])


def test_topk_gguf_q8_0_classifier_host(root):
    need("cmake")
    path = gguf_case(root, "llama-q4_1-embd-q8_0")  # SmolLM2's mix: the tied Q8_0 embedding is the classifier
    out = build_topk(root, path, "gguf", 9)
    assert "tllm_topk_q80(" in (out / "src" / "tllm_model.c").read_text()
    check_all(out, path, 9, SAMPLINGS[:3])


def test_small_k_samples_differently_from_the_full_sampler(root):
    """The comparison above has teeth: with K = 3 a hot temperature samples
    only among three tokens, which the full sampler does not."""
    path = model(root, "llama-tied-gqa")
    ids = prompt_for(path)
    hot = SamplingOptions(1.5, 1.0, 7)
    k3 = reference(path, ids, hot, 3)
    assert k3 != reference(path, ids, hot, 0)
    assert reference(path, ids, SamplingOptions(), 3) == reference(path, ids, SamplingOptions(), 0)  # greedy: equal
