"""The tokenizer a GGUF file describes in its metadata, rebuilt as a
`tokenizers.Tokenizer` (then wrapped in our `Tokenizer`).

Two models, by `tokenizer.ggml.model`:

* `gpt2`: byte-level BPE.  `tokens` are already spelled in GPT-2's
  byte-to-unicode alphabet, `merges` are "left right" strings in rank order.
  How text is split before BPE is named by `tokenizer.ggml.pre`; the regexes
  below are llama.cpp's for each name (llama-vocab.cpp, `llm_tokenizer_bpe`):
  they are applied in order, each splitting the pieces of the previous one
  and keeping its matches as pieces of their own ("isolated"), then the bytes
  are mapped to the alphabet (ByteLevel without its own regex).
* `llama`: SentencePiece BPE.  `tokens` + `scores` + `token_type`, no merges:
  the merges are the vocabulary's own pairs, best score first (as
  transformers' GGUF converter and SentencePiece do), with byte fallback
  through the `<0xNN>` tokens, `\u2581` for spaces and a prefix space when
  `tokenizer.ggml.add_space_prefix` (default true) says so.

Tokens of type CONTROL (3) become special added tokens (matched whole in text,
printed as nothing); USER_DEFINED (4) plain added tokens.  BOS/EOS ids,
`add_bos_token` and `tokenizer.chat_template` come from the metadata.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from ..errors import UserError
from ..ir import ModelConfig
from .tokenizer import _GPT2_U2B, Tokenizer, _sentencepiece_bytes



class GGUFMetadata(Protocol):
    """What the tokenizer reads of a GGUF file (frontends/gguf.GGUFFile)."""

    path: Path

    def has(self, key: str) -> bool: ...

    def value(self, key: str, default: Any = None) -> Any: ...

CONTROL, USER_DEFINED = 3, 4

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> llama.cpp's regexes, applied in order.
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "default": (_GPT2_SPLIT,),
    "gpt2": (_GPT2_SPLIT,),
    "gpt-2": (_GPT2_SPLIT,),
    "mpt": (_GPT2_SPLIT,),
    "olmo": (_GPT2_SPLIT,),
    "smollm": (r"\p{N}", _GPT2_SPLIT),  # SmolLM: every digit alone, then GPT-2's split
    "starcoder": (r"\p{N}", _GPT2_SPLIT),
    "refact": (r"\p{N}", _GPT2_SPLIT),
    "llama-bpe": (_LLAMA3_SPLIT,),
    "llama3": (_LLAMA3_SPLIT,),
    "smaug-bpe": (_LLAMA3_SPLIT,),
    "qwen2": (_QWEN2_SPLIT,),
    "deepseek-r1-qwen": (_QWEN2_SPLIT,),
}


def tokenizer_from_gguf(f: GGUFMetadata, config: ModelConfig) -> Tokenizer | None:
    """The tokenizer the file's metadata describes (None when it has none);
    any inconsistency (a merge of unknown tokens, wrong value types) is one
    line naming the file: the `tokenizers` library raises plain Exceptions."""
    where = f.path.name
    try:
        return _tokenizer_from_gguf(f, config)
    except UserError as e:
        raise e if str(e).startswith(where) else UserError(f"{where}: {e}") from None
    except Exception as e:  # noqa: BLE001 (tokenizers and bad metadata types raise anything)
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise UserError(f"{where}: the tokenizer in its metadata is inconsistent ({msg}); "
                        "the file is corrupt or was written by an incompatible converter") from None


def _tokenizer_from_gguf(f: GGUFMetadata, config: ModelConfig) -> Tokenizer | None:
    model = f.value("tokenizer.ggml.model")
    if model is None or not f.has("tokenizer.ggml.tokens"):
        return None
    where = f.path.name
    tokens = f.value("tokenizer.ggml.tokens")
    types = f.value("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise UserError(f"{where}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    if model == "gpt2":
        pre = f.value("tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            raise UserError(f"{where}: unsupported tokenizer.ggml.pre {pre!r}: supported are "
                            f"{', '.join(sorted(PRE_TOKENIZERS))}")
        merges = f.value("tokenizer.ggml.merges")
        if merges is None:
            raise UserError(f"{where}: gpt2 tokenizer without tokenizer.ggml.merges")
        hf = build_bpe(tokens, types, merges, PRE_TOKENIZERS[pre])
        byte_level = True
    elif model == "llama":
        scores = f.value("tokenizer.ggml.scores")
        if scores is None or len(scores) != len(tokens):
            raise UserError(f"{where}: llama (SentencePiece) tokenizer needs tokenizer.ggml.scores for every token")
        hf = build_sentencepiece(tokens, types, scores, bool(f.value("tokenizer.ggml.add_space_prefix", True)),
                                 f.value("tokenizer.ggml.unknown_token_id", 0))
        byte_level = False
    else:
        raise UserError(f"{where}: unsupported tokenizer.ggml.model {model!r}: supported are gpt2, llama")
    # llama.cpp adds BOS to a SentencePiece vocabulary unless the file says otherwise.
    add_bos = f.value("tokenizer.ggml.add_bos_token", model == "llama")
    if f.value("tokenizer.ggml.add_eos_token", False):
        raise UserError(f"{where}: tokenizer.ggml.add_eos_token=true (EOS appended to prompts) is not supported")
    template = f.value("tokenizer.chat_template")
    eos = config.eos_ids[0] if config.eos_ids else None
    return wrap(hf, tokens, types, byte_level, config.bos_id, eos, bool(add_bos),
                template if isinstance(template, str) else None, f"gguf:{f.path}")


def build_bpe(tokens: list[str], types: list[int], merges: list[str], splits: tuple[str, ...]):
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    pairs = []
    for m in merges:
        left, sep, right = m.partition(" ")
        if not sep:
            raise UserError(f"tokenizer.ggml.merges entry {m!r} is not 'left right'")
        pairs.append((left, right))
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    _add_special(tok, tokens, types)
    return tok


def build_sentencepiece(tokens: list[str], types: list[int], scores: list[float], add_space_prefix: bool,
                        unk_id: int | None):
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    # merges: every split of a token into two vocabulary tokens, ranked by the
    # merged token's score (best first), ties by the pieces' lengths then ids.
    cands = []
    for t, i in vocab.items():
        if types[i] in (CONTROL, USER_DEFINED):
            continue
        local = []
        for k in range(1, len(t)):
            left, right = t[:k], t[k:]
            if left in vocab and right in vocab:
                local.append((vocab[left], vocab[right], left, right))
        local.sort()
        cands.extend((float(scores[i]), len(l_), len(r_), l_, r_) for _, _, l_, r_ in local)
    # stable sort on (score, len left, len right) descending, as transformers' generate_merges
    cands.sort(key=lambda c: (c[0], c[1], c[2]), reverse=True)
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[(c[3], c[4]) for c in cands], unk_token=unk,
                                 fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                 prepend_scheme="first" if add_space_prefix else "never",
                                                 split=False)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    _add_special(tok, tokens, types)
    return tok


def _add_special(tok, tokens: list[str], types: list[int]) -> None:
    special = [AddedToken(t, normalized=False, special=True) for t, ty in zip(tokens, types) if ty == CONTROL]
    if special:
        tok.add_special_tokens(special)
    user = [AddedToken(t, normalized=False, special=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED]
    if user:
        tok.add_tokens(user)


def wrap(hf, tokens: list[str], types: list[int], byte_level: bool, bos: int | None, eos: int | None,
         add_bos: bool, chat_template: str | None, source: str) -> Tokenizer:
    """Our Tokenizer around a built `tokenizers.Tokenizer`: token bytes for
    the firmware (CONTROL tokens print nothing), encode without specials
    (BOS is `Tokenizer.encode`'s), decode skipping specials."""
    pieces = []
    for t, ty in zip(tokens, types):
        if ty == CONTROL:
            pieces.append(b"")
        elif ty == USER_DEFINED:
            pieces.append(t.encode("utf-8"))
        elif byte_level:
            pieces.append(bytes(_GPT2_U2B[ch] for ch in t) if all(ch in _GPT2_U2B for ch in t)
                          else t.encode("utf-8"))
        else:
            pieces.append(_sentencepiece_bytes(t.encode("utf-8")))

    def encode(text: str) -> list[int]:
        return list(hf.encode(text, add_special_tokens=False).ids)

    def decode(ids: list[int]) -> str:
        return hf.decode(ids, skip_special_tokens=True)

    return Tokenizer(token_bytes=tuple(pieces), bos_id=bos, eos_id=eos, encode=encode, decode=decode,
                     source=source, add_bos=add_bos, chat_template=chat_template, hf_json=hf.to_str())
