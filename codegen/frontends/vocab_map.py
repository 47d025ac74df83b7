"""How a draft model's token ids map onto its target's (speculative decoding
with a draft model, reference/draft.py).

A draft proposes tokens the target verifies, and reads the target's
context, so both directions are needed:

* shared vocabulary: the same number of ids and the same token behind
  every id: both maps are the identity;
* a vocabulary-pruned student (`compress --prune-vocab`): its tokenizer is
  the teacher's with a subset of the tokens, renumbered (the kept old ids
  ascending; the student records no id table, its tokenizer.json names the
  tokens), so a draft id maps to the target id of the same token, and a
  target token the student lacks is read as the student's token for its
  first character (every byte-level base token is kept, so one exists; the
  guesses after it are merely worse, never wrong: the target verifies them).

A token is identified by its name in the tokenizer file together with the
bytes it prints (two specials print nothing; a byte-level and a
sentencepiece file may spell different bytes alike).  Anything else is
refused in one line naming both models."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from ..errors import UserError
from .tokenizer import Tokenizer


@dataclass(frozen=True)
class VocabMap:
    to_draft: np.ndarray  # target id -> the draft id it is read as
    to_target: np.ndarray  # draft id -> target id
    shared: bool  # the identity both ways


def token_keys(tok: Tokenizer, n_ids: int) -> list:
    """Per model id, (name in the tokenizer file, bytes printed); None past the tokenizer's ids."""
    names = _names(tok)
    return [(names[i], tok.token_bytes(i)) if i < tok.vocab_size and names[i] is not None else None
            for i in range(n_ids)]


def _names(tok: Tokenizer) -> list:
    text = tok.hf_json
    if text is None and tok.source.startswith("hf:"):
        text = Path(tok.source[3:]).read_text(encoding="utf-8")
    if text is None:  # llama2.c: a piece is its bytes
        return [tok.token_bytes(i) for i in range(tok.vocab_size)]
    hf = HFTokenizer.from_str(text)
    return [hf.id_to_token(i) for i in range(tok.vocab_size)]


def vocab_map(target: Tokenizer, target_ids: int, draft: Tokenizer, draft_ids: int, target_name: str,
              draft_name: str) -> VocabMap:
    """The maps between a target with `target_ids` ids and a draft with
    `draft_ids` (their models' vocab_size), or a UserError (module text)."""
    t_keys, d_keys = token_keys(target, target_ids), token_keys(draft, draft_ids)
    if t_keys == d_keys:
        same = np.arange(target_ids, dtype=np.int64)
        return VocabMap(same, same.copy(), True)
    fix = ("use a draft that shares the target's tokenizer, or a compress --prune-vocab student of the target")
    where = {key: i for i, key in enumerate(t_keys) if key is not None}
    to_target = np.zeros(draft_ids, np.int64)
    for i, key in enumerate(d_keys):
        if key is None or key not in where:
            what = (f"draft id {i} has no token in its tokenizer" if key is None else
                    f"the draft's token {i} {key[0]!r} is not one of the target's")
            raise UserError(f"--speculate draft:{draft_name}: its vocabulary ({draft_ids} ids) is not {target_name}'s "
                            f"({target_ids} ids) nor a subset of it ({what}); {fix}")
        to_target[i] = where[key]
    of_draft = {key: i for i, key in enumerate(d_keys)}
    firsts = {key[0]: i for i, key in enumerate(d_keys) if isinstance(key[0], str) and len(key[0]) == 1}
    to_draft = np.zeros(target_ids, np.int64)
    for i, key in enumerate(t_keys):
        if key in of_draft:
            to_draft[i] = of_draft[key]
        elif key is not None and isinstance(key[0], str) and key[0][:1] in firsts:
            to_draft[i] = firsts[key[0][:1]]
        else:
            raise UserError(f"--speculate draft:{draft_name}: {target_name}'s token {i} "
                            f"{key[0] if key else None!r} has neither itself nor its first character in the "
                            f"draft's vocabulary, so the draft cannot read it; {fix}")
    return VocabMap(to_draft, to_target, False)
