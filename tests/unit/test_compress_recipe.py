"""scripts/distill_smollm2.py's equal-compute arithmetic (issue 16's experiment), on small inputs."""
import copy

import pytest

torch = pytest.importorskip("torch")

from tinyllm_gen.compress.prune_vocab import VocabPlan, slice_vocab  # noqa: E402
from tinyllm_gen.compress.torch_io import n_params  # noqa: E402
from recipe_script import load_recipe  # noqa: E402

recipe = load_recipe


def test_the_teacher_compute_counts_the_vocabulary_pruned_teacher():
    """The baseline's budget uses the parameters of the teacher whose logits were cached."""
    import transformers as tf

    cfg = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
               num_key_value_heads=2, head_dim=16, vocab_size=500, tie_word_embeddings=True, bos_token_id=0,
               eos_token_id=3)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg))
    pruned = copy.deepcopy(model)
    slice_vocab(pruned, VocabPlan(tuple(range(0, 500, 3)), 500, 0, 0, 0, 1.0))
    assert recipe()._vocab_pruned_params(cfg, 167) == n_params(pruned) < n_params(model)


def test_equal_compute_steps_reach_the_budget_and_no_more():
    r = recipe()
    per_step = [100, 120, 90, 110, 100, 95]
    steps = r.equal_compute_steps(per_step, 1000, 6.0 * 1000 * 400)
    assert steps == 4 and 6.0 * 1000 * sum(per_step[:3]) < 6.0 * 1000 * 400 <= 6.0 * 1000 * sum(per_step[:4])
    with pytest.raises(ValueError):
        r.equal_compute_steps(per_step, 1000, 1e12)
