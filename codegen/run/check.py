"""`tinyllm-gen run OUT --check`: the firmware's tokens against the
reference's for the same request.

The reference is rebuilt from the tree itself (lower/blob.read_blob: the
weights blob and its table in the manifest, the architecture from the
manifest's config), so it is the reference of exactly what the firmware
runs, whatever happened to the model file since.  A `--speculate draft:`
tree's draft model is rebuilt the same way, from OUT/draft/'s manifest and
its blob (draft/weights.bin, or its part of OUT/weights.bin on a board whose
weights are external), so that a sampled request's tokens are checked
against the reference drafting with it."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from ..build.out import read_manifest
from ..context import context_roll
from ..errors import UserError
from ..quant.kv import parse_kv_bits
from ..frontends.tokenizer import Tokenizer
from ..frontends.vocab_map import VocabMap
from ..ir import ModelConfig
from ..lower.blob import BlobEntry, read_blob
from ..lower.speculate import built_k
from ..quant.formats import QuantizedGraph
from ..reference.draft import DraftModel
from ..reference.executor import Executor, QuantKernels
from ..reference.sampler import SamplingOptions, top_k_of
from ..reference.speculative import generate_speculative


def tree_reference(out: Path) -> tuple[QuantizedGraph, dict]:
    """The QuantizedGraph an OUT tree's firmware runs, and its manifest."""
    m = read_manifest(out)
    if "config" not in m or "blob_entries" not in m:
        raise UserError(f"{out}: the manifest has no blob table (compiled by an older tinyllm-gen): recompile it "
                        "to check it")
    return _blob_reference(m, (Path(out) / "weights.bin").read_bytes()), m


def _blob_reference(m: dict, blob: bytes) -> QuantizedGraph:
    """The QuantizedGraph of a manifest's blob table over `blob`."""
    opts = m["options"]
    if opts.get("quant") == "per-channel":
        raise UserError("--check rebuilds the reference from the weights blob for the group-wise schemes; a "
                        "per-channel build is checked against `tinyllm-gen reference MODEL --quant per-channel`")
    doc = dict(m["config"])
    config = ModelConfig(**{**doc, "eos_ids": tuple(doc["eos_ids"])})
    entries = [BlobEntry(*e) for e in m["blob_entries"]]
    qg = read_blob(blob, entries, config, int(opts["group_size"]), parse_kv_bits(opts["kv_bits"]), opts["kernels"])
    return dataclasses.replace(qg, kv_rotate=opts.get("kv_rotate", "off"))  # int4 trees name their rotation


def tree_id_tables(table_c: str, draft_vocab: int) -> VocabMap:
    """The id tables a pruned draft's table file holds (templates/tllm_draft_table.c.j2: TO_DRAFT, TO_TARGET),
    as the firmware maps with them; the identity where it has none (the target's own vocabulary)."""
    found = {name: np.array([int(v) for v in body.replace(",", " ").split()], np.int64)
             for name, body in re.findall(r"static const uint16_t (TO_DRAFT|TO_TARGET)\[\d+\] = \{(.*?)\};",
                                          table_c, re.S)}
    if not found:
        ids = np.arange(draft_vocab)
        return VocabMap(ids, ids, True)
    if set(found) != {"TO_DRAFT", "TO_TARGET"} or len(found["TO_TARGET"]) != draft_vocab:
        raise UserError("the draft's id tables in draft/tllm_draft_table.c are not whole: recompile the tree")
    return VocabMap(found["TO_DRAFT"], found["TO_TARGET"], False)


def tree_draft(out: Path, m: dict, seq: int) -> DraftModel | None:
    """The draft model of a `--speculate draft:` tree (None for any other tree), as the reference drafts
    with it: its blob and table from OUT/draft/, its ids mapped by the id tables of its table file (a
    vocabulary-pruned student's; the identity for a draft with the target's vocabulary)."""
    d = m.get("draft")
    if d is None:
        return None
    where = Path(out) / str(d.get("dir", "draft"))
    own = where / "weights.bin"
    if own.is_file():
        blob = own.read_bytes()
    else:  # after the target's in OUT/weights.bin
        offset, size = int(d["weights_offset"]), int(d["weights_bytes"])
        blob = (Path(out) / "weights.bin").read_bytes()[offset:offset + size]
    qg = _blob_reference(read_manifest(where), blob)
    vocab = tree_id_tables((where / "tllm_draft_table.c").read_text(), qg.config.vocab_size)
    return DraftModel(Executor(qg.graph, QuantKernels(qg, seq)), vocab, len(vocab.to_draft))


def check_tokens(out: Path, tokenizer: Tokenizer, prompt_ids: Sequence[int], max_new_tokens: int,
                 sampling: SamplingOptions, got: Sequence[int]) -> str | None:
    """None when the firmware's ids are the reference's; else one line naming the first difference."""
    qg, m = tree_reference(out)
    seq = int(m["max_seq"])
    opts = m["options"]  # a speculative build's sampled tokens are the speculative reference's (its k)
    want = generate_speculative(Executor(qg.graph, QuantKernels(qg, seq)), list(prompt_ids), max_new_tokens, seq,
                                qg.config.eos_ids, sampling, top_k=top_k_of(opts.get("sampler", "full")),
                                k=built_k(opts), roll=context_roll(opts.get("context_policy", "stop"), seq),
                                draft=tree_draft(out, m, seq)).generated_ids
    if list(got) == list(want):
        return None
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))

    def at(ids):
        return f"{ids[i]} {tokenizer.decode([ids[i]])!r}" if i < len(ids) else "nothing (it stopped)"

    return (f"--check: token {i} differs: the firmware gave {at(got)}, the reference {at(want)} "
            f"(the first {i} of {len(want)} agree)")
