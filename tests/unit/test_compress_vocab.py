"""Vocabulary pruning (codegen/compress/prune_vocab.py) on a tiny byte-level BPE model."""
import copy
import json

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402

from tinyllm_gen.compress.prune_vocab import (check_kept_logits, count_tokens, plan_vocab,  # noqa: E402
                                              pruned_tokenizer_config, pruned_tokenizer_spec, slice_vocab)
from tinyllm_gen.compress.torch_io import load_torch_model  # noqa: E402
from tinyllm_gen.errors import UserError  # noqa: E402

from tinymodels import make_hf_model, make_tokenizer  # noqa: E402

# A narrow domain: a few words of the tokenizer's training text, so most merges go.
DOMAIN = ["The cat saw a big red ball.", "She was very happy.", "The cat was happy. The end.",
          "One day the cat saw the sun.", "The red ball was big."]
END = "<|end|>"  # a special appended after the merges: EOS has to be renumbered


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A tiny Llama whose tokenizer is 2 specials + 256 bytes + 72 merges + <|end|> (= EOS, id 330)."""
    root = tmp_path_factory.mktemp("vocab")
    d = make_hf_model(root / "teacher", dim=32, hidden=48, layers=2, heads=4, kv_heads=2, vocab=331, context=64,
                      tied=False, seed=3, eos=330)
    tok = HFTokenizer.from_file(str(make_tokenizer(root / "tok", 330)))
    tok.add_special_tokens([END])
    assert tok.token_to_id(END) == 330
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": END, "added_tokens_decoder": {
        "0": {"content": "<s>"}, "1": {"content": "</s>"}, "330": {"content": END}}}))
    return d


def spec_of(d):
    return json.loads((d / "tokenizer.json").read_text())


def encode(spec, text):
    return HFTokenizer.from_str(json.dumps(spec)).encode(text, add_special_tokens=False).ids


def domain_seqs(spec, docs=DOMAIN):
    return [[0] + encode(spec, d) + [spec_eos(spec)] for d in docs]


def spec_eos(spec):
    return next(t["id"] for t in spec["added_tokens"] if t["content"] == END)


def test_plan_keeps_specials_bytes_and_every_merge_input(teacher_dir):
    spec = spec_of(teacher_dir)
    counts = count_tokens(domain_seqs(spec))
    plan = plan_vocab(spec, counts, 10_000)  # no limit: exactly what the text uses, with its closure
    kept = set(plan.kept)
    vocab = spec["model"]["vocab"]
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    assert {0, 1, 330} <= kept and all(vocab[c] in kept for c in alphabet)
    assert set(counts) <= kept and plan.coverage == 1.0 and plan.used_kept == plan.used == len(counts)
    for a, b in spec["model"]["merges"]:  # closure: a kept merged token can still be built
        if vocab[a + b] in kept:
            assert vocab[a] in kept and vocab[b] in kept
    assert 259 < len(kept) < 331 - 20, len(kept)  # the narrow domain drops most merges
    small = plan_vocab(spec, counts, 262)
    assert len(small.kept) <= 262 and small.coverage < 1.0 and small.mandatory == 259
    with pytest.raises(UserError, match=r"--prune-vocab 200 is below the 259 tokens every text needs"):
        plan_vocab(spec, counts, 200)


def test_pruned_tokenizer_encodes_the_domain_as_before(teacher_dir):
    spec = spec_of(teacher_dir)
    plan = plan_vocab(spec, count_tokens(domain_seqs(spec)), 10_000)
    new = pruned_tokenizer_spec(spec, plan)
    remap = plan.old_to_new()
    assert spec_eos(new) == remap[330] == len(plan.kept) - 1  # EOS renumbered, still last
    for d in DOMAIN:
        assert encode(new, d) == [remap[i] for i in encode(spec, d)]
    cfg = json.loads(pruned_tokenizer_config((teacher_dir / "tokenizer_config.json").read_text(), plan))
    assert cfg["added_tokens_decoder"][str(remap[330])] == {"content": END} and "330" not in cfg["added_tokens_decoder"]


@pytest.mark.parametrize("tied", [False, True])
def test_pruned_model_scores_the_domain_as_the_teacher_on_kept_ids(teacher_dir, tied):
    spec = spec_of(teacher_dir)
    teacher = load_torch_model(teacher_dir)
    if tied:
        teacher.lm_head.weight = teacher.model.embed_tokens.weight
        teacher.config.tie_word_embeddings = True
    plan = plan_vocab(spec, count_tokens(domain_seqs(spec)), 10_000)
    pruned = copy.deepcopy(teacher)
    slice_vocab(pruned, plan)
    assert pruned.config.vocab_size == len(plan.kept) and pruned.config.eos_token_id == len(plan.kept) - 1
    assert (pruned.lm_head.weight is pruned.model.embed_tokens.weight) == tied
    new_seqs = domain_seqs(pruned_tokenizer_spec(spec, plan))
    check = check_kept_logits(teacher, pruned, domain_seqs(spec), new_seqs, plan)
    assert check.bit_identical and check.docs_same_tokens == check.docs == len(DOMAIN), check
    # A changed tokenization is not compared: the check only counts documents that kept their tokens.
    small = plan_vocab(spec, count_tokens(domain_seqs(spec)), 262)
    narrow = copy.deepcopy(teacher)
    slice_vocab(narrow, small)
    assert check_kept_logits(teacher, narrow, domain_seqs(spec), domain_seqs(pruned_tokenizer_spec(spec, small)),
                             small).docs_same_tokens < len(DOMAIN)


def test_check_sees_a_wrong_slice(teacher_dir):
    """The bit-exact check can fail: a pruned model with one kept row changed."""
    spec = spec_of(teacher_dir)
    teacher = load_torch_model(teacher_dir)
    plan = plan_vocab(spec, count_tokens(domain_seqs(spec)), 10_000)
    pruned = copy.deepcopy(teacher)
    slice_vocab(pruned, plan)
    with torch.no_grad():
        pruned.lm_head.weight[5] *= 1.0 + 2 ** -20
    check = check_kept_logits(teacher, pruned, domain_seqs(spec), domain_seqs(pruned_tokenizer_spec(spec, plan)), plan)
    assert not check.bit_identical


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_still_encodes_and_round_trips(teacher_dir, text):
    spec = spec_of(teacher_dir)
    for size in (10_000, 259 + 1):  # the domain's closure, and almost nothing beyond the bytes
        plan = plan_vocab(spec, count_tokens(domain_seqs(spec)), size)
        tok = HFTokenizer.from_str(json.dumps(pruned_tokenizer_spec(spec, plan)))
        ids = tok.encode(text, add_special_tokens=False).ids
        assert all(0 <= i < len(plan.kept) for i in ids)
        assert tok.decode(ids, skip_special_tokens=False) == text


def test_refuses_a_tokenizer_it_cannot_keep_complete(teacher_dir):
    spec = spec_of(teacher_dir)
    spec["pre_tokenizer"], spec["decoder"] = {"type": "Whitespace"}, None
    with pytest.raises(UserError, match="needs a byte-level BPE tokenizer.json"):
        plan_vocab(spec, count_tokens([[0]]), 1000)


@pytest.mark.slow
def test_smollm2_tokenizer_pruned_to_the_story_domain():
    """The real SmolLM2 tokenizer (49,152 tokens, 48,900 merges, 17 specials): pruned to what 200
    generated stories use, the stories encode as before, and text from outside the domain still
    encodes and round-trips."""
    import random
    import sys
    from pathlib import Path

    from gguf_models import smollm2_path
    from tinyllm_gen.frontends import load_model

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import make_corpus

    spec = json.loads(load_model(smollm2_path()).tokenizer.hf_json)
    stories = make_corpus.split_stories(make_corpus.generate(random.Random("vocab-test"), make_corpus.World(1234),
                                                             30_000))
    old = [encode(spec, s) for s in stories]
    plan = plan_vocab(spec, count_tokens(old), 49_152)
    assert plan.coverage == 1.0 and 256 + 17 < len(plan.kept) < 2000 and plan.vocab_before == 49_152
    new_spec = pruned_tokenizer_spec(spec, plan)
    remap = plan.old_to_new()
    assert all(encode(new_spec, s) == [remap[i] for i in o] for s, o in zip(stories, old))
    tok = HFTokenizer.from_str(json.dumps(new_spec))
    for text in ("Zürich 2026: ∑ x² ≠ 0 — naïve café!", "東京タワー 🚀", "def f(x):\n\treturn x ** 2  # ok",
                 "<|im_start|>user\nHi<|im_end|>"):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text and max(ids) < len(plan.kept)
