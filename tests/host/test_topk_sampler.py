"""The top-K sampler's twin (codegen/sampler.py top_k_ids, Sampler(top_k=K))
against the rules its docstring states.  The C kernels (tllm_topk_push,
tllm_sample_topk, the tllm_topk.h classifier loops) are checked against this
twin bit for bit by the kernel registry (tests/kernel_registry/entries_topk.py:
ties within and across chunks, -0.0 beside +0.0, K above a chunk and above
the vocabulary, short last chunks, temperature 0, top_p < 1 and = 1,
several RNG states), on the host and on the Cortex-M7."""
import numpy as np
import pytest

from tinyllm_gen.reference.sampler import Sampler, SamplingOptions, top_k_ids

pytestmark = pytest.mark.host


def test_tie_rule_lower_id_first_and_kept():
    x = np.array([1.0, 3.0, 3.0, 0.0, -0.0, 0.0, 3.0, 2.0, -1.0], np.float32)
    assert top_k_ids(x, 9).tolist() == [1, 2, 6, 7, 0, 3, 4, 5, 8]  # -0.0 == 0.0: by id
    assert top_k_ids(x, 2).tolist() == [1, 2]  # of three equal maxima the two lowest ids
    assert top_k_ids(x, 20).tolist() == top_k_ids(x, 9).tolist()  # K above the vocabulary: all of it


@pytest.mark.parametrize("k", [1, 8, 40, 400])
def test_greedy_top_k_is_the_argmax_of_the_other_builds(k):
    """Temperature 0 picks the first candidate: the lowest id among the
    maxima, so a topk:K build's greedy tokens equal the full build's."""
    rng = np.random.default_rng(k)
    x = rng.integers(-3, 4, 300).astype(np.float32) * np.float32(0.75)  # many equal maxima
    assert Sampler(SamplingOptions(), top_k=k).sample(x) == int(np.argmax(x)) == Sampler(SamplingOptions()).sample(x)


def test_k_one_samples_the_argmax_at_any_temperature():
    x = (np.random.default_rng(3).standard_normal(1000) * 3).astype(np.float32)
    s = Sampler(SamplingOptions(1.3, 0.9, 99), top_k=1)
    assert [s.sample(x) for _ in range(6)] == [int(np.argmax(x))] * 6
