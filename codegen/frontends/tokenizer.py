"""Tokenizers: text <-> ids on the host, and id -> raw bytes for the firmware.

Two sources are supported:

* Hugging Face `tokenizer.json`, run by the `tokenizers` package (encode and
  decode are that library's, so host text matches what transformers does).
* llama2.c `tokenizer.bin` (int32 max_token_length, then per token: float32
  score, int32 length, the token's bytes), with llama2.c's own encoder
  re-implemented below so prompts tokenize exactly as `run.c` would.

`token_bytes(id)` is what the firmware prints for a token, so it must be the
raw bytes the token stands for, independent of its neighbours: byte-level
BPE strings are mapped back through GPT-2's byte<->unicode table, and
SentencePiece-style pieces get '\u2581' -> ' ' and '<0xNN>' -> that byte.
Special tokens (BOS/EOS/pad...) print nothing.
"""
from __future__ import annotations

import heapq
import re
import struct
from pathlib import Path
from typing import Callable, Iterable

from tokenizers import Tokenizer as HFTokenizer

from ..errors import UserError, check_regular_file, first_line, parse_json, read_json, read_regular_bytes, \
    read_regular_text

MAX_TOKENIZER_BYTES = 256 * 1024 * 1024  # whole files are read: far above any real tokenizer
MAX_VOCAB = 1 << 20  # as frontends/limits.py: the largest vocabulary accepted

_BYTE_PIECE = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
_SP_SPACE = "\u2581"  # SentencePiece's visible space


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand
    for themselves, every other byte b is chr(256 + n) for the n-th such byte
    in increasing order.  (Facts of the format, written out here.)"""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: dict[str, int] = {}
    n = 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table


_GPT2_U2B = _gpt2_unicode_to_byte()


def _sentencepiece_bytes(piece: bytes) -> bytes:
    """'<0xNN>' byte-fallback pieces are one raw byte; '\u2581' is a space."""
    m = _BYTE_PIECE.fullmatch(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    return piece.replace(_SP_SPACE.encode("utf-8"), b" ")


class Tokenizer:
    """Immutable after construction (attributes are read-only properties).

    Build with `from_hf_json` or `from_llama2c`, not directly."""

    __slots__ = ("_vocab_size", "_bos", "_eos", "_bytes", "_encode", "_decode", "_source",
                 "_add_bos", "_chat_template", "_hf_json")

    def __init__(
        self,
        *,
        token_bytes: tuple[bytes, ...],
        bos_id: int | None,
        eos_id: int | None,
        encode: Callable[[str], list[int]],
        decode: Callable[[list[int]], str],
        source: str,
        add_bos: bool = True,
        chat_template: str | None = None,
        hf_json: str | None = None,
    ):
        object.__setattr__(self, "_vocab_size", len(token_bytes))
        object.__setattr__(self, "_bos", bos_id)
        object.__setattr__(self, "_eos", eos_id)
        object.__setattr__(self, "_bytes", token_bytes)
        object.__setattr__(self, "_encode", encode)
        object.__setattr__(self, "_decode", decode)
        object.__setattr__(self, "_source", source)
        # add_bos: whether a prompt starts with BOS (GGUF tokenizer.ggml.add_bos_token,
        # tokenizer_config.json add_bos_token); chat_template: the model's Jinja chat
        # template, if any; hf_json: a tokenizer.json built in memory (GGUF), for emit.
        object.__setattr__(self, "_add_bos", bool(add_bos))
        object.__setattr__(self, "_chat_template", chat_template)
        object.__setattr__(self, "_hf_json", hf_json)

    def __setattr__(self, name, value):  # "frozen": tokenizers are shared between stages
        raise AttributeError("Tokenizer is immutable")

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def bos_id(self) -> int | None:
        return self._bos

    @property
    def eos_id(self) -> int | None:
        return self._eos

    @property
    def source(self) -> str:
        return self._source

    @property
    def add_bos(self) -> bool:
        return self._add_bos

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    @property
    def hf_json(self) -> str | None:
        return self._hf_json

    def __repr__(self) -> str:
        return f"Tokenizer({self._source}, vocab_size={self._vocab_size})"

    def encode(self, text: str, bos: bool | None = None) -> list[int]:
        """`bos=None` follows the model (`add_bos`); True/False force it."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: invalid UTF-8 bytes on the command line
            raise UserError(f"the text is not valid UTF-8 (undecodable byte or lone surrogate at character "
                            f"{e.start}); pass UTF-8 text") from None
        ids = self._encode(text)
        if bos is None:
            bos = self._add_bos
        if bos and self._bos is not None:
            ids = [self._bos] + ids
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._decode([int(i) for i in ids])

    def token_bytes(self, id: int) -> bytes:
        if not 0 <= id < self._vocab_size:
            raise IndexError(f"token id {id} outside the tokenizer's vocabulary (size {self._vocab_size})")
        return self._bytes[id]

    @classmethod
    def from_path(cls, path: Path, vocab_size: int | None = None, bos_id: int | None = None,
                  eos_id: int | None = None) -> "Tokenizer":
        """A user-given --tokenizer: `*.json` is Hugging Face, anything else llama2.c."""
        path = Path(path)
        try:
            exists = path.exists()
        except OSError as e:  # a name too long for the OS, a symlink loop
            raise UserError(f"{str(path)[:200]}: cannot open the tokenizer ({e.strerror or e})") from None
        if not exists:
            raise UserError(f"{path}: tokenizer file not found; pass a tokenizer.json or a llama2.c tokenizer.bin")
        check_regular_file(path, "tokenizer")
        if path.suffix == ".json":
            return cls.from_hf_json(path, bos_id, eos_id, vocab_size)
        return cls.from_llama2c(path, vocab_size)

    # ------------------------------------------------------------------ HF

    @classmethod
    def from_hf_json(cls, path: Path, bos_id: int | None = None, eos_id: int | None = None,
                     vocab_size: int | None = None) -> "Tokenizer":
        """Load a Hugging Face tokenizer.json.

        BOS/EOS: the explicit arguments (the model's config.json) win, then
        tokenizer_config.json next to the file, else None.  With `vocab_size`
        (the model's), a tokenizer whose ids reach past it is refused before
        its pieces are built."""
        path = Path(path)
        text = read_regular_text(path, "tokenizer", MAX_TOKENIZER_BYTES)
        spec = parse_json(text, path, "tokenizer")
        if not isinstance(spec, dict):
            raise UserError(f"{path}: cannot read tokenizer (expected a JSON object); "
                            "re-save it with tokenizer.save_pretrained()")
        try:
            tok = HFTokenizer.from_str(text)
        except BaseException as e:  # tokenizers' plain Exception, or a Rust panic (a BaseException)
            _reraise_unless_library_error(e)
            raise UserError(f"{path}: cannot read tokenizer ({_one_line(e)}); "
                            "re-save it with tokenizer.save_pretrained()") from None
        ids = tok.get_vocab(with_added_tokens=True).values()
        n_ids = max(ids, default=-1) + 1
        limit = MAX_VOCAB if vocab_size is None else vocab_size
        if n_ids > limit:
            raise UserError(f"{path}: the tokenizer has token ids up to {n_ids - 1:,} but the model's vocab_size is "
                            f"{limit:,}; use the tokenizer the model was trained with")

        if bos_id is None or eos_id is None:
            named = _tokenizer_config_ids(path.parent / "tokenizer_config.json", tok)
            bos_id = named[0] if bos_id is None else bos_id
            eos_id = named[1] if eos_id is None else eos_id
        add_bos, chat_template = _tokenizer_config_chat(path.parent / "tokenizer_config.json")

        byte_level = _uses_byte_level(spec)
        added = tok.get_added_tokens_decoder()  # id -> AddedToken
        pieces = []
        for i in range(max(n_ids, tok.get_vocab_size(with_added_tokens=True))):
            s = tok.id_to_token(i)
            if s is None or (i in added and added[i].special):
                pieces.append(b"")
            elif i in added:  # added tokens are stored as plain text, not byte-mapped
                pieces.append(s.encode("utf-8"))
            elif byte_level:
                if all(ch in _GPT2_U2B for ch in s):
                    pieces.append(bytes(_GPT2_U2B[ch] for ch in s))
                else:
                    pieces.append(s.encode("utf-8"))
            else:
                pieces.append(_sentencepiece_bytes(s.encode("utf-8")))

        def encode(text: str) -> list[int]:
            # BOS is ours to add (Tokenizer.encode), so no post-processor specials.
            try:
                return list(tok.encode(text, add_special_tokens=False).ids)
            except BaseException as e:
                _reraise_unless_library_error(e)
                raise UserError(f"{path}: the tokenizer cannot encode the text ({_one_line(e)})") from None

        def decode(ids: list[int]) -> str:
            try:
                return tok.decode(ids, skip_special_tokens=True)
            except BaseException as e:
                _reraise_unless_library_error(e)
                raise UserError(f"{path}: the tokenizer cannot decode ids ({_one_line(e)})") from None

        return cls(token_bytes=tuple(pieces), bos_id=bos_id, eos_id=eos_id,
                   encode=encode, decode=decode, source=f"hf:{path}",
                   add_bos=add_bos, chat_template=chat_template)

    # ------------------------------------------------------------- llama2.c

    @classmethod
    def from_llama2c(cls, path: Path, vocab_size: int | None = None) -> "Tokenizer":
        """Parse llama2.c's tokenizer.bin.  The file does not store its own
        vocabulary size (run.c takes it from the checkpoint), so without
        `vocab_size` we read entries until the end of the file."""
        path = Path(path)
        data = read_regular_bytes(path, "tokenizer", MAX_TOKENIZER_BYTES)
        if len(data) < 4:
            raise UserError(f"{path}: too short for a llama2.c tokenizer.bin (no max_token_length header)")
        (max_len,) = struct.unpack_from("<i", data, 0)
        if max_len <= 0:
            raise UserError(f"{path}: max_token_length {max_len} is not positive; not a llama2.c tokenizer.bin")
        pieces: list[bytes] = []
        scores: list[float] = []
        off = 4
        while off < len(data) and (vocab_size is None or len(pieces) < vocab_size):
            if off + 8 > len(data):
                raise UserError(f"{path}: truncated in the entry of token {len(pieces)}; re-export the tokenizer")
            score, n = struct.unpack_from("<fi", data, off)
            off += 8
            if n < 0 or off + n > len(data):
                raise UserError(f"{path}: token {len(pieces)} has length {n} past the end of the file; "
                                "the file is truncated or corrupt")
            pieces.append(data[off:off + n])
            scores.append(score)
            off += n
        if vocab_size is not None and len(pieces) < vocab_size:
            raise UserError(f"{path}: holds {len(pieces)} tokens but the checkpoint's vocab_size is "
                            f"{vocab_size}; use the tokenizer exported for this model")
        if len(pieces) < _Llama2cCodec.BYTE_OFFSET + 256:  # <unk>, <s>, </s>, then the 256 byte pieces
            raise UserError(f"{path}: only {len(pieces)} tokens, fewer than the 259 of a llama2.c tokenizer.bin "
                            "(<unk>, <s>, </s> and 256 byte-fallback pieces); use the tokenizer exported "
                            "with this model")
        return _Llama2cCodec(pieces, scores).tokenizer(f"llama2c:{path}")


class _Llama2cCodec:
    """llama2.c's encoder: dummy-prefix space token, one lookup per UTF-8
    code point with byte fallback (token id = byte + 3), then repeatedly merge
    the adjacent pair whose concatenation is in the vocabulary with the best
    score (leftmost on ties) until no pair merges."""

    BOS, EOS = 1, 2  # fixed by llama2.c's Llama-2 SentencePiece export
    BYTE_OFFSET = 3  # <unk>, <s>, </s> precede the 256 <0xNN> pieces

    def __init__(self, pieces: list[bytes], scores: list[float]):
        self.pieces = pieces
        self.scores = scores
        self.lookup: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            self.lookup.setdefault(p, i)  # duplicates: the lowest id wins

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        if text:
            if b" " not in self.lookup:
                raise UserError("llama2.c tokenizer has no ' ' token for the dummy prefix; "
                                "use the tokenizer exported with this model")
            ids.append(self.lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8", "replace")
            tid = self.lookup.get(b)
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(x + self.BYTE_OFFSET for x in b)
        return self._merge(ids)

    def _merge(self, ids: list[int]) -> list[int]:
        """run.c's merge loop: while some adjacent pair concatenates to a
        token scoring above -1e10, merge the best-scoring pair (leftmost on
        ties).  The same choices as rescanning after every merge, in
        O(n log n) instead of O(n^2) (a 100 KB prompt took minutes): a
        linked list of the current tokens and a heap of candidate pairs
        keyed (-score, left token's original index), whose order is the
        current left-to-right order; pairs whose tokens changed are skipped
        when popped."""
        n = len(ids)
        if n < 2:
            return ids
        tok = list(ids)
        nxt = list(range(1, n + 1))  # n: the end
        prv = list(range(-1, n - 1))
        version = [0] * n
        alive = [True] * n
        heap: list[tuple[float, int, int, int, int]] = []

        def push(i: int) -> None:
            j = nxt[i]
            if j >= n:
                return
            tid = self.lookup.get(self.pieces[tok[i]] + self.pieces[tok[j]])
            if tid is not None and self.scores[tid] > -1e10:  # run.c's starting best; NaN never wins
                heapq.heappush(heap, (-self.scores[tid], i, version[i], version[j], tid))

        for i in range(n - 1):
            push(i)
        while heap:
            _, i, vi, vj, tid = heapq.heappop(heap)
            j = nxt[i] if alive[i] else n
            if j >= n or version[i] != vi or version[j] != vj:
                continue  # stale: one of the two tokens was merged since
            tok[i] = tid
            version[i] += 1
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            if prv[i] >= 0:
                push(prv[i])
            push(i)
        out, i = [], 0
        while i < n:
            out.append(tok[i])
            i = nxt[i]
        return out

    def token_bytes(self, i: int) -> bytes:
        if i in (self.BOS, self.EOS):
            return b""
        p = self.pieces[i]
        if i == 0 and p == b"<unk>":
            return b""
        return _sentencepiece_bytes(p)

    def decode(self, ids: list[int]) -> str:
        # SentencePiece drops the dummy-prefix space at the start of the text
        # (run.c: after BOS), so decode(encode(s)) == s.
        out = bytearray()
        at_start = True
        for i in ids:
            b = self.token_bytes(i) if 0 <= i < len(self.pieces) else b""
            if i == self.BOS:
                at_start = True
                continue
            if not b:  # EOS, <unk>: print nothing and do not consume the prefix
                continue
            if at_start and b.startswith(b" "):
                b = b[1:]
            at_start = False
            out += b
        return out.decode("utf-8", "replace")

    def tokenizer(self, source: str) -> Tokenizer:
        n = len(self.pieces)
        return Tokenizer(
            token_bytes=tuple(self.token_bytes(i) for i in range(n)),
            bos_id=self.BOS if n > self.BOS else None,
            eos_id=self.EOS if n > self.EOS else None,
            encode=self.encode,
            decode=self.decode,
            source=source,
        )


_one_line = first_line


def _reraise_unless_library_error(e: BaseException) -> None:
    """tokenizers raises plain Exceptions for bad input and, from Rust, a
    pyo3 PanicException (a BaseException); anything else that is not an
    Exception (KeyboardInterrupt, SystemExit, a test's timeout) goes on."""
    if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
        raise e


def _uses_byte_level(spec: dict) -> bool:
    """GPT-2 style byte-level BPE announces itself by a ByteLevel decoder or
    pre-tokenizer (possibly inside a Sequence)."""

    def has(node) -> bool:
        if not isinstance(node, dict):
            return False
        if node.get("type") == "ByteLevel":
            return True
        subs = node.get("decoders") or node.get("pretokenizers") or []
        return any(has(s) for s in subs)

    return has(spec.get("decoder")) or has(spec.get("pre_tokenizer"))


def _tokenizer_config_ids(path: Path, tok) -> tuple[int | None, int | None]:
    """bos_token / eos_token from tokenizer_config.json (a string or an
    AddedToken dict), mapped to ids."""
    if not path.exists():
        return None, None
    try:
        cfg = read_json(path, "tokenizer_config.json", MAX_TOKENIZER_BYTES)
    except UserError:  # optional: a broken one is ignored, a FIFO never opened
        return None, None
    if not isinstance(cfg, dict):
        return None, None

    def tid(key):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return tok.token_to_id(v) if isinstance(v, str) else None

    return tid("bos_token"), tid("eos_token")


def _tokenizer_config_chat(path: Path) -> tuple[bool, str | None]:
    """add_bos_token (default True: BOS before every prompt, as before) and
    chat_template from tokenizer_config.json."""
    if not path.exists():
        return True, None
    try:
        cfg = read_json(path, "tokenizer_config.json", MAX_TOKENIZER_BYTES)
    except UserError:  # optional: a broken one is ignored, a FIFO never opened
        return True, None
    if not isinstance(cfg, dict):
        return True, None
    add_bos = cfg.get("add_bos_token", True)
    template = cfg.get("chat_template")
    return (add_bos if isinstance(add_bos, bool) else True), (template if isinstance(template, str) else None)
