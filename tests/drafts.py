"""Draft models for speculative-decoding tests, built from a tiny target
(tinymodels.make_hf_model) and never downloaded: the target's first layers
alone (a depth-pruned student without distillation: its guesses agree with
the target's often but not always), an unrelated random model on the same
tokenizer, and a vocabulary-pruned student (compress --prune-vocab's own
functions: the tokens a short domain text uses, the specials and the bytes)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tinymodels import make_hf_model

DOMAIN = "Once upon a time there was a little cat. The cat liked to play in the sun."


def make_target(root: Path, vocab: int = 300, context: int = 64) -> Path:
    return make_hf_model(root / "target", dim=32, hidden=48, layers=2, heads=4, kv_heads=2, vocab=vocab,
                         context=context, seed=5)


def shallow_student(target: Path, out: Path, layers: int = 1) -> Path:
    """The target's first `layers` blocks, its embedding, final norm and classifier."""
    from tinyllm_gen.compress.torch_io import save_model_dir
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the dropped blocks' weights are "unexpected": that is the point
    model = AutoModelForCausalLM.from_pretrained(target, num_hidden_layers=layers).eval()
    return save_model_dir(model, target / "tokenizer.json", out)


def random_draft(root: Path, vocab: int = 300, context: int = 64) -> Path:
    """Another random model (other seed, one layer) on the same tokenizer (make_tokenizer is deterministic)."""
    return make_hf_model(root / "other", dim=32, hidden=48, layers=1, heads=4, kv_heads=2, vocab=vocab,
                         context=context, seed=11)


def vocab_pruned_student(target: Path, out: Path, size: int, ids: list[int] | None = None):
    """(directory, VocabPlan): the target with only `size` of its tokens, as compress --prune-vocab keeps them
    for the domain text DOMAIN, or for the token ids `ids` (say, the target's own output)."""
    from tinyllm_gen.compress.prune_vocab import count_tokens, plan_vocab, pruned_tokenizer_spec, slice_vocab
    from tinyllm_gen.compress.torch_io import load_torch_model, save_model_dir
    from tokenizers import Tokenizer as HFTokenizer

    spec = json.loads((target / "tokenizer.json").read_text())
    if ids is None:
        ids = HFTokenizer.from_file(str(target / "tokenizer.json")).encode(DOMAIN, add_special_tokens=False).ids
    plan = plan_vocab(spec, count_tokens([ids]), size)
    tok = out.parent / (out.name + "-tokenizer.json")
    tok.write_text(json.dumps(pruned_tokenizer_spec(spec, plan), ensure_ascii=False))
    model = load_torch_model(target)
    slice_vocab(model, plan)
    return save_model_dir(model, tok, out), plan


def renamed_token_draft(target: Path, out: Path) -> Path:
    """The target with one merge token renamed in its tokenizer: not the target's vocabulary, nor a subset."""
    shutil.copytree(target, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    name = max(vocab, key=vocab.get)  # the last merge's token: no other merge uses it
    vocab["zzzz-not-a-token"] = vocab.pop(name)
    spec["model"]["merges"] = [m for m in spec["model"]["merges"]
                               if "".join(m if isinstance(m, list) else m.split(" ")) != name]
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    return out


def target_and_student(root: Path) -> tuple[Path, Path]:
    """The tiny target and its one-block student, the pair the host tests link into one program."""
    target = make_target(root)
    return target, shallow_student(target, root / "student")


def draft_reference(target: Path, draft: Path, ids: list[int], max_new: int, seq: int, k: int, kv_bits=8,
                    sampling=None, top_k: int = 0, context_policy: str | None = None):
    """(the speculative reference drafting with `draft`, plain decoding) of a generation (greedy unless
    `sampling`; top_k: a topk:K build's sampler), both quantized as compile quantizes them by default (and
    kv_bits), with the rolling context `context_policy` where given: what a `--speculate draft:` tree must
    give."""
    from tinyllm_gen.compile import CompileOptions, load_draft, quantize
    from tinyllm_gen.frontends import load_model
    from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
    from tinyllm_gen.reference.sampler import SamplingOptions
    from tinyllm_gen.reference.speculative import generate_speculative

    m = load_model(target)
    opts = CompileOptions(kv_bits=kv_bits)
    ex = Executor(m.graph, QuantKernels(quantize(m, opts), seq))
    d = load_draft(draft, m, target, opts, seq)
    eos = m.graph.config.eos_ids
    sampling = sampling or SamplingOptions()
    if context_policy is not None:
        from tinyllm_gen.context import context_roll

        roll = context_roll(context_policy, seq)
        return (generate_speculative(ex, ids, max_new, seq, eos, sampling, top_k, k=k, draft=d, roll=roll),
                generate_speculative(ex, ids, max_new, seq, eos, sampling, top_k, roll=roll))
    return (generate_speculative(ex, ids, max_new, seq, eos, sampling, top_k, k=k, draft=d),
            generate(ex, ids, max_new, seq, eos, sampling, top_k))
