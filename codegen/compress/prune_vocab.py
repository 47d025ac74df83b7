"""Vocabulary pruning: keep the tokens a domain uses, rebuild a consistent
byte-level BPE tokenizer, slice the embedding and classifier.

What is kept (old ids, ascending; the new id of a token is its rank there):
- every added token (the specials: BOS, EOS, chat markers), so prompts and
  templates still work;
- every byte-level base token (one character of the GPT-2 byte alphabet), so
  ANY text still encodes: a word whose merges are gone falls back to bytes;
- the tokens the domain text uses, most frequent first, each together with
  its *merge closure* (the inputs of every merge that produces it,
  recursively), until the size limit.

Why the closure: BPE builds a token by merging smaller ones, and the
intermediate tokens never appear in the encoded text.  Keeping a used token
without them would make it unreachable and change the text's tokenization.
With the closure, a merge is kept iff its inputs and its result are kept,
the kept merges keep their relative ranks, and a word whose original
encoding only used kept merges encodes to the same tokens (the lowest-ranked
applicable merge at every step is still the same one).  So the domain text's
tokenization is unchanged whenever every token it uses was kept, and the
pruned model's logits on it are the teacher's on the kept ids, bit for bit
(`check_kept_logits`, tests/unit/test_compress_vocab.py).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from tokenizers import pre_tokenizers

from ..errors import UserError
from ..frontends.tokenizer import _uses_byte_level


@dataclass(frozen=True)
class VocabPlan:
    kept: tuple  # old ids, ascending; new id = index
    vocab_before: int
    mandatory: int  # added tokens + byte-level base tokens: kept whatever the limit
    used: int  # distinct ids the domain text uses
    used_kept: int  # ... of which kept
    coverage: float  # fraction of the domain's token occurrences whose token was kept

    def old_to_new(self) -> dict:
        return {old: new for new, old in enumerate(self.kept)}


@dataclass(frozen=True)
class VocabCheck:
    docs: int  # documents checked
    docs_same_tokens: int  # ... whose tokenization the pruning left unchanged (only those are compared)
    positions: int  # positions compared
    max_abs_diff: float  # largest |pruned - teacher| over kept ids; 0.0 = bit-identical
    bit_identical: bool


def _merge_pair(m) -> tuple:
    """tokenizers writes merges as "a b" (older files) or ["a", "b"] (newer)."""
    if isinstance(m, str):
        a, b = m.split(" ", 1)
        return a, b
    return m[0], m[1]


def _check_byte_level_bpe(spec: dict) -> None:
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not _uses_byte_level(spec):
        raise UserError("--prune-vocab needs a byte-level BPE tokenizer.json (GPT-2 style): with another "
                        "tokenizer some text would no longer encode; run compress without --prune-vocab")
    if model.get("byte_fallback") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise UserError("--prune-vocab: the tokenizer's BPE uses byte_fallback or subword affixes, which the "
                        "merge closure does not model; run compress without --prune-vocab")


def _byte_alphabet() -> set:
    return set(pre_tokenizers.ByteLevel.alphabet())


def plan_vocab(spec: dict, counts: Counter, size: int) -> VocabPlan:
    """Which old ids survive a limit of `size` tokens (see the module text)."""
    _check_byte_level_bpe(spec)
    vocab: dict = spec["model"]["vocab"]
    added = {t["id"] for t in spec.get("added_tokens", [])}
    n_before = max([*vocab.values(), *added]) + 1
    alphabet = _byte_alphabet()
    mandatory = added | {i for s, i in vocab.items() if len(s) == 1 and s in alphabet}
    if size < len(mandatory):
        raise UserError(f"--prune-vocab {size} is below the {len(mandatory)} tokens every text needs (the "
                        f"{len(added)} added/special tokens and the byte-level base tokens); use at least "
                        f"{len(mandatory)}")
    id_to_token = {i: s for s, i in vocab.items()}
    producers: dict = {}  # token -> the input pairs of every merge that yields it
    for m in spec["model"]["merges"]:
        a, b = _merge_pair(m)
        producers.setdefault(a + b, []).append((a, b))

    def closure(i: int) -> set:
        out, todo = set(), [i]
        while todo:
            j = todo.pop()
            if j in out:
                continue
            out.add(j)
            for a, b in producers.get(id_to_token.get(j, ""), ()):
                todo += [vocab[a], vocab[b]]
        return out

    kept = set(mandatory)
    used = [i for i, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if 0 <= i < n_before]
    for i in used:  # most frequent first; a token whose closure does not fit is skipped, smaller ones still may
        if i in kept:
            continue
        need = closure(i) - kept
        if len(kept) + len(need) <= size:
            kept |= need
    total = sum(counts.values())
    covered = sum(c for i, c in counts.items() if i in kept)
    return VocabPlan(tuple(sorted(kept)), n_before, len(mandatory), len(used), sum(1 for i in used if i in kept),
                     covered / total if total else 1.0)


def count_tokens(seqs: Iterable[Sequence[int]]) -> Counter:
    c: Counter = Counter()
    for s in seqs:
        c.update(int(i) for i in s)
    return c


def pruned_tokenizer_spec(spec: dict, plan: VocabPlan) -> dict:
    """tokenizer.json of the pruned vocabulary: vocab and added tokens renumbered,
    merges kept iff inputs and result survive (relative ranks unchanged)."""
    new = json.loads(json.dumps(spec))  # deep copy that stays plain JSON
    remap = plan.old_to_new()
    model = new["model"]
    model["vocab"] = {s: remap[i] for s, i in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if i in remap}
    kept_tokens = model["vocab"]
    model["merges"] = [m for m in model["merges"]
                       if all(t in kept_tokens for t in (*_merge_pair(m), "".join(_merge_pair(m))))]
    new["added_tokens"] = [dict(t, id=remap[t["id"]]) for t in new.get("added_tokens", [])]
    new["post_processor"] = _remap_post_processor(new.get("post_processor"), remap)
    return new


def _remap_post_processor(node, remap: dict):
    if node is None or node.get("type") == "ByteLevel":
        return node
    if node.get("type") == "Sequence":
        return dict(node, processors=[_remap_post_processor(p, remap) for p in node["processors"]])
    if node.get("type") == "TemplateProcessing":
        specials = {k: dict(v, ids=[remap[i] for i in v["ids"]]) for k, v in node.get("special_tokens", {}).items()}
        return dict(node, special_tokens=specials)
    raise UserError(f"--prune-vocab: the tokenizer's {node.get('type')} post-processor names token ids that "
                    "pruning would have to renumber; run compress without --prune-vocab")


def pruned_tokenizer_config(text: str, plan: VocabPlan) -> str:
    """tokenizer_config.json names tokens by string, except added_tokens_decoder (keyed by id)."""
    cfg = json.loads(text)
    dec = cfg.get("added_tokens_decoder")
    if isinstance(dec, dict):
        remap = plan.old_to_new()
        cfg["added_tokens_decoder"] = {str(remap[int(k)]): v for k, v in dec.items() if int(k) in remap}
    return json.dumps(cfg, indent=2) + "\n"


def slice_vocab(model, plan: VocabPlan) -> None:
    """Keeps the rows of `plan.kept` in the embedding and the classifier (tied
    or not) of a transformers causal LM, in place; remaps BOS/EOS/PAD."""
    import torch

    rows = torch.tensor(plan.kept, dtype=torch.long)
    emb = model.model.embed_tokens
    tied = model.lm_head.weight is emb.weight
    with torch.no_grad():
        emb.weight = torch.nn.Parameter(emb.weight.data[rows].clone())
        emb.num_embeddings = len(rows)
        if tied:
            model.lm_head.weight = emb.weight
        else:
            model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.data[rows].clone())
            if model.lm_head.bias is not None:
                model.lm_head.bias = torch.nn.Parameter(model.lm_head.bias.data[rows].clone())
        model.lm_head.out_features = len(rows)
    cfg = model.config
    remap = plan.old_to_new()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = getattr(cfg, key, None)
        if v is None:
            continue
        ids = v if isinstance(v, list) else [v]
        missing = [i for i in ids if i not in remap]
        if missing:  # only when the id is a plain token, not an added one
            raise UserError(f"--prune-vocab: {key} {missing[0]} is not an added token and was pruned; add it to "
                            "the tokenizer's added_tokens or run compress without --prune-vocab")
        new = [remap[i] for i in ids]
        setattr(cfg, key, new if isinstance(v, list) else new[0])
    cfg.vocab_size = len(rows)
    gen = getattr(model, "generation_config", None)
    if gen is not None:  # save_pretrained validates it against the config
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            setattr(gen, key, getattr(cfg, key, None))


def check_kept_logits(teacher, pruned, old_seqs: Sequence[Sequence[int]], new_seqs: Sequence[Sequence[int]],
                      plan: VocabPlan) -> VocabCheck:
    """The pruned model against the teacher on the kept ids, for the documents
    whose tokenization did not change (old ids mapped = new ids)."""
    import torch

    remap = plan.old_to_new()
    kept = torch.tensor(plan.kept, dtype=torch.long)
    same = [(o, n) for o, n in zip(old_seqs, new_seqs) if [remap.get(i, -1) for i in o] == list(n)]
    worst, positions, identical = 0.0, 0, True
    # One thread: with several, how the classifier's product is split among them depends on its row
    # count, and the two classifiers differ in rows, so the same sums could round differently.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for old, new in same:  # one document per forward: no padding, nothing to mask
                t = teacher(input_ids=torch.tensor([list(old)])).logits[0][:, kept]
                p = pruned(input_ids=torch.tensor([list(new)])).logits[0]
                identical = identical and torch.equal(t.view(torch.int32), p.view(torch.int32))  # bit patterns
                worst = max(worst, float((t - p).abs().max()))
                positions += len(new)
    finally:
        torch.set_num_threads(threads)
    return VocabCheck(len(old_seqs), len(same), positions, worst, identical and positions > 0)
