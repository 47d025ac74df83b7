"""GGUF frontend: a llama.cpp model file -> Graph (+ tokenizer from its metadata).

Read with `gguf.GGUFReader` (llama.cpp's own reader, memory-mapped: tensors
are numpy views into the file until they are dequantized).  Three
architectures, by their GGUF names: `llama`, `qwen2`, `phi3`.  The metadata
keys live under `{arch}.` (embedding_length, block_count, ...); a key this
frontend does not know under that prefix could change the math (RoPE scaling,
experts, sliding windows), so it is refused by name, as are tensor types and
tensors we do not map.

Layout facts (checked in llama.cpp's convert_hf_to_gguf.py):

* GGUF lists a tensor's dimensions fastest first, so `[576, 49152]` is numpy
  `(49152, 576)`: rows are output features, as in Hugging Face.
* For `llama` the converter permutes the rows of Q and K within each head
  (`LlamaModel.permute`: rows (head, half, i) -> (head, i, half), pairing
  dimensions i and i + head_dim/2 next to each other for ggml's interleaved
  RoPE).  `_unpermute_rows` inverts it, back to the rotate-half layout of
  `ir.py`.  `qwen2` and `phi3` are written unpermuted (their converters use
  NEOX-style RoPE in ggml and leave the rows alone).
* `phi3` stores q/k/v fused in `attn_qkv` (rows q, k, v) and gate/up fused in
  `ffn_up` (first half gate), as in Phi-3's own checkpoints.
* A missing `output.weight` means the classifier is the embedding (tied).

Quantized tensors keep their raw llama.cpp blocks (`QuantBlocks`) beside the
float32 weights on the imported model, in canonical row order, so a later
stage can keep llama.cpp's formats losslessly instead of requantizing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import gguf
import numpy as np

from ..errors import UserError, check_regular_file
from .derived import check_freq_factors
from .limits import check_finite, check_model_size, check_range
from ..ir import ModelConfig, build_decoder_graph, expected_weight_shapes
from ..verify import verify_graph
from .gguf_tokenizer import tokenizer_from_gguf
from .hf import ImportedModel
from .tokenizer import Tokenizer

GGUF_MAGIC = b"GGUF"
ARCHS = ("llama", "qwen2", "phi3")
# Tensor types we dequantize (gguf.quants has a numpy implementation of each).
FLOAT_TYPES = ("F32", "F16", "BF16")
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
SUPPORTED_TYPES = FLOAT_TYPES + QUANT_TYPES

# `{arch}.` keys this frontend reads or knows to be inert.  Anything else
# under the prefix is refused: it names something the shared graph lacks.
_KNOWN_KEYS = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
    "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned", "attention.sliding_window", "expert_count", "expert_used_count",
}


def is_gguf(path: Path) -> bool:
    """A `.gguf` name, or any regular file that starts with the GGUF magic."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return True
    if not path.is_file():  # never open a FIFO to sniff it
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


@dataclass(frozen=True, eq=False)
class QuantBlocks:
    """One tensor's llama.cpp blocks exactly as stored, rows in canonical
    (Hugging Face) order.  `shape` is the float tensor's numpy shape (rows,
    cols); `data` is uint8 (rows, bytes per row): each row is cols /
    block_size blocks of `qtype` (layouts: ggml-common.h, e.g. Q4_1 = fp16 d,
    fp16 m, 16 bytes; byte j holds element j low, j + 16 high)."""

    qtype: str
    shape: tuple[int, int]
    data: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class GGUFModel(ImportedModel):
    """An `ImportedModel` from a GGUF file: also the raw quantized blocks
    (canonical name -> QuantBlocks) and the file's metadata scalars."""

    blocks: Mapping[str, QuantBlocks] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- reading


def _plain_reader(gguf):
    """gguf.GGUFReader reading through a plain ndarray view of its memmap:
    the same bytes, fields and tensors, but each of the ~250,000 small reads
    of a real model's metadata (the tokenizer's 49,152 tokens and 48,900
    merges) is an ndarray slice instead of a memmap slice, whose Python-level
    __getitem__ / __array_finalize__ made the reader 3x slower (SmolLM2:
    3.0 s -> 0.9 s of CPU)."""

    class PlainReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, mapped):
            self._mapped = mapped  # keeps the mapping open
            self._plain = np.asarray(mapped)

    return PlainReader


class GGUFFile:
    """The parsed file: metadata values and tensors by name."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.gguf = gguf
        if not self.path.is_file():
            raise UserError(f"{self.path}: no such file")
        with open(self.path, "rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise UserError(f"{self.path}: not a GGUF file (no GGUF magic at the start)")
        try:
            self.reader = _plain_reader(gguf)(str(self.path), "r")
        except Exception as e:  # the reader raises ValueError, struct errors, IndexError... on a bad file
            raise UserError(f"{self.path}: not a readable GGUF file ({_one_line(e)}); "
                            "it is truncated or corrupt, re-download it") from None
        self.tensors = {t.name: t for t in self.reader.tensors}
        size = self.path.stat().st_size
        for t in self.reader.tensors:  # the reader's memmaps may be short without complaint
            if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
                raise UserError(f"{self.path}: tensor {t.name} runs past the end of the file; "
                                "the file is truncated, re-download it")

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    def value(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception as e:
            raise UserError(f"{self.path}: metadata {key} is unreadable ({_one_line(e)})") from None

    def keys(self) -> list[str]:
        return list(self.reader.fields)


def load_gguf(path: Path, tokenizer: Path | None = None) -> GGUFModel:
    check_regular_file(Path(path), "GGUF model")  # a FIFO or device is refused before it is opened
    f = GGUFFile(Path(path))
    config = parse_metadata(f)
    weights, blocks = _map_tensors(f, config)
    graph = verify_graph(build_decoder_graph(config, weights))
    if tokenizer is not None:
        eos = config.eos_ids[0] if config.eos_ids else None
        tok = Tokenizer.from_path(Path(tokenizer), config.vocab_size, config.bos_id, eos)
    else:
        tok = tokenizer_from_gguf(f, config)
    meta = {k: v for k in f.keys() if not k.startswith("tokenizer.ggml.") and not k.startswith("GGUF.")
            for v in [f.value(k)] if isinstance(v, (int, float, str, bool))}
    return GGUFModel(graph=graph, tokenizer=tok, source=f"gguf:{f.path} ({config.arch})",
                     blocks=blocks, metadata=meta)


# --------------------------------------------------------------- metadata


def parse_metadata(f: GGUFFile) -> ModelConfig:
    where = f.path.name
    arch = f.value("general.architecture")
    if arch is None:
        raise UserError(f"{where}: no general.architecture key; not a model GGUF")
    if arch not in ARCHS:
        raise UserError(f"{where}: unsupported GGUF architecture {arch!r}: supported are {', '.join(ARCHS)}")
    p = arch + "."
    for key in f.keys():
        if key.startswith(p) and key[len(p):] not in _KNOWN_KEYS:
            raise UserError(f"{where}: unsupported GGUF key {key} (not expressible in the {arch} graph)")

    def num(key: str, kind=int, default=None, positive=True):
        v = f.value(p + key)
        if v is None:
            if default is None:
                raise UserError(f"{where}: GGUF key {p + key} is missing")
            return default
        if isinstance(v, list):
            raise UserError(f"{where}: GGUF key {p + key} varies per layer ({len(v)} values); not supported")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (positive and not v > 0):
            raise UserError(f"{where}: GGUF key {p + key} must be a positive number, got {v!r}")
        return kind(v)

    dim = num("embedding_length")
    hidden = num("feed_forward_length")
    n_layers = num("block_count")
    n_heads = num("attention.head_count")
    n_kv = num("attention.head_count_kv", default=n_heads)
    context = num("context_length")
    eps = num("attention.layer_norm_rms_epsilon", float)
    theta = num("rope.freq_base", float, default=10000.0)
    if n_heads % n_kv:
        raise UserError(f"{where}: head_count {n_heads} is not a multiple of head_count_kv {n_kv}")
    if f.has(p + "attention.key_length"):
        head_dim = num("attention.key_length")
    elif dim % n_heads:
        raise UserError(f"{where}: embedding_length {dim} is not divisible by head_count {n_heads}")
    else:
        head_dim = dim // n_heads
    if num("attention.value_length", default=head_dim) != head_dim:
        raise UserError(f"{where}: {p}attention.value_length differs from key_length; not supported")
    if head_dim % 2:
        raise UserError(f"{where}: head dimension {head_dim} is odd; RoPE needs an even head dimension")
    rot = num("rope.dimension_count", default=head_dim)
    if rot != head_dim:
        raise UserError(f"{where}: {p}rope.dimension_count {rot} < head dimension {head_dim} "
                        "(partial rotary) is not supported")
    scaling = f.value(p + "rope.scaling.type")
    factor = f.value(p + "rope.scaling.factor", 1.0)
    if (scaling not in (None, "none") and factor != 1.0) or scaling not in (None, "none", "linear"):
        raise UserError(f"{where}: {p}rope.scaling.type {scaling!r} (RoPE scaling) is not supported")
    if num("expert_count", default=0, positive=False):
        raise UserError(f"{where}: {p}expert_count > 0 (mixture of experts) is not supported")
    window = f.value(p + "attention.sliding_window")
    if window is not None and 0 < window < context:
        if arch != "phi3":  # as the HF frontend: Phi-3's window never slides below its length
            raise UserError(f"{where}: {p}attention.sliding_window {window} < context_length {context}; "
                            "sliding-window attention is not supported")
        context = int(window)

    emb = f.tensors.get("token_embd.weight")
    if emb is None:
        raise UserError(f"{where}: tensor token_embd.weight is missing")
    vocab = int(emb.shape[1]) if len(emb.shape) == 2 else 0
    stated = f.value(p + "vocab_size")
    n_tokens = f.reader.fields["tokenizer.ggml.tokens"].data if f.has("tokenizer.ggml.tokens") else None
    if stated is not None and stated != vocab:
        raise UserError(f"{where}: {p}vocab_size {stated} but token_embd.weight has {vocab} rows")
    if n_tokens is not None and len(n_tokens) > vocab:
        raise UserError(f"{where}: {len(n_tokens)} tokenizer tokens but token_embd.weight has {vocab} rows")

    def token_id(key):
        v = f.value(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab:
            raise UserError(f"{where}: {key} {v!r} is outside the vocabulary ({vocab})")
        return v

    bos, eos = token_id("tokenizer.ggml.bos_token_id"), token_id("tokenizer.ggml.eos_token_id")
    eos_ids = (eos,) if eos is not None else ()
    eot = token_id("tokenizer.ggml.eot_token_id")
    if eot is not None and eot not in eos_ids:
        eos_ids += (eot,)
    for key, value in (("dim", dim), ("hidden_dim", hidden), ("n_layers", n_layers), ("n_heads", n_heads),
                       ("n_kv_heads", n_kv), ("head_dim", head_dim), ("vocab_size", vocab), ("max_seq", context)):
        check_range(where, key, value)  # before anything is sized from them
    config = ModelConfig(
        arch=arch, dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim, vocab_size=vocab, max_seq=context, rope_theta=theta, norm_eps=eps,
        tied_embeddings="output.weight" not in f.tensors, qkv_bias=arch == "qwen2",
        bos_id=bos, eos_ids=eos_ids,
    )
    check_model_size(where, config.n_params())
    return config


# ---------------------------------------------------------------- tensors


# llama.cpp's RoPE frequency factors (Llama 3.1's rope_freqs, Phi-3's longrope pair).
_ROPE_FACTORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def _unpermute_rows(n_rows: int, n_heads: int) -> np.ndarray:
    """Row index map undoing llama.cpp's Q/K permutation: HF row (h, half, i)
    is GGUF row (h, i, half).  `rows_hf = rows_gguf[index]`."""
    hd = n_rows // n_heads
    return np.arange(n_rows).reshape(n_heads, hd // 2, 2).swapaxes(1, 2).reshape(-1)


class _Tensors:
    def __init__(self, f: GGUFFile):
        self.f = f
        self.used: set[str] = set()
        self.blocks: dict[str, QuantBlocks] = {}

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def take(self, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None, str]:
        """(float32 array of `shape`, raw uint8 rows or None, type name)."""
        t = self.f.tensors.get(name)
        if t is None:
            raise UserError(f"{self.f.path.name}: tensor {name} is missing")
        qtype = t.tensor_type.name
        np_shape = tuple(int(d) for d in reversed(list(t.shape)))
        if np_shape != tuple(shape):
            raise UserError(f"{self.f.path.name}: tensor {name} has shape {np_shape}, expected {tuple(shape)} "
                            "from the metadata")
        if qtype not in SUPPORTED_TYPES:
            raise UserError(f"{self.f.path.name}: tensor {name} has type {qtype}; supported are "
                            f"{', '.join(SUPPORTED_TYPES)}")
        self.used.add(name)
        data = t.data
        if qtype == "F32":
            return np.array(data, dtype=np.float32).reshape(shape), None, qtype
        if qtype == "F16":
            return np.asarray(data).astype(np.float32).reshape(shape), None, qtype
        arr = self.f.gguf.quants.dequantize(np.asarray(data), t.tensor_type)
        arr = np.ascontiguousarray(arr, dtype=np.float32).reshape(shape)
        return arr, (None if qtype == "BF16" else np.asarray(data).reshape(shape[0], -1)), qtype

    def put(self, out: dict, canonical: str, name: str, shape, rows: np.ndarray | slice | None = None):
        """Map tensor `name` (or the rows `rows` of it) onto `canonical`."""
        arr, raw, qtype = self.take(name, shape if rows is None else self._full_shape(name))
        if rows is not None:
            arr = np.ascontiguousarray(arr[rows])
            raw = None if raw is None else np.ascontiguousarray(raw[rows])
        if arr.shape != tuple(shape):
            raise UserError(f"{self.f.path.name}: tensor {name} gives {arr.shape} for {canonical}, "
                            f"expected {tuple(shape)}")
        out[canonical] = arr
        if raw is not None:
            self.blocks[canonical] = QuantBlocks(qtype, (int(arr.shape[0]), int(arr.shape[1])), raw)

    def _full_shape(self, name):
        t = self.f.tensors.get(name)
        if t is None:
            raise UserError(f"{self.f.path.name}: tensor {name} is missing")
        return tuple(int(d) for d in reversed(list(t.shape)))


def _map_tensors(f: GGUFFile, c: ModelConfig) -> tuple[dict[str, np.ndarray], dict[str, QuantBlocks]]:
    ts = _Tensors(f)
    shapes = expected_weight_shapes(c)
    w: dict[str, np.ndarray] = {}
    ts.put(w, "tok_embeddings", "token_embd.weight", shapes["tok_embeddings"])
    ts.put(w, "norm", "output_norm.weight", shapes["norm"])
    if not c.tied_embeddings:
        ts.put(w, "output", "output.weight", shapes["output"])
    permute = c.arch == "llama"
    q_rows = _unpermute_rows(c.q_dim, c.n_heads) if permute else None
    k_rows = _unpermute_rows(c.kv_dim, c.n_kv_heads) if permute else None
    for i in range(c.n_layers):
        b, p = f"blk.{i}.", f"layers.{i}."
        ts.put(w, p + "attention_norm", b + "attn_norm.weight", (c.dim,))
        ts.put(w, p + "ffn_norm", b + "ffn_norm.weight", (c.dim,))
        ts.put(w, p + "wo", b + "attn_output.weight", (c.dim, c.q_dim))
        ts.put(w, p + "w_down", b + "ffn_down.weight", (c.dim, c.hidden_dim))
        if ts.has(b + "attn_qkv.weight"):  # phi3: fused rows q, k, v
            qkv = b + "attn_qkv.weight"
            ts.put(w, p + "wq", qkv, (c.q_dim, c.dim), slice(0, c.q_dim))
            ts.put(w, p + "wk", qkv, (c.kv_dim, c.dim), slice(c.q_dim, c.q_dim + c.kv_dim))
            ts.put(w, p + "wv", qkv, (c.kv_dim, c.dim), slice(c.q_dim + c.kv_dim, c.q_dim + 2 * c.kv_dim))
        else:
            ts.put(w, p + "wq", b + "attn_q.weight", (c.q_dim, c.dim), q_rows)
            ts.put(w, p + "wk", b + "attn_k.weight", (c.kv_dim, c.dim), k_rows)
            ts.put(w, p + "wv", b + "attn_v.weight", (c.kv_dim, c.dim))
        if c.qkv_bias:
            ts.put(w, p + "bq", b + "attn_q.bias", (c.q_dim,))
            ts.put(w, p + "bk", b + "attn_k.bias", (c.kv_dim,))
            ts.put(w, p + "bv", b + "attn_v.bias", (c.kv_dim,))
        if ts.has(b + "ffn_gate.weight"):
            ts.put(w, p + "w_gate", b + "ffn_gate.weight", (c.hidden_dim, c.dim))
            ts.put(w, p + "w_up", b + "ffn_up.weight", (c.hidden_dim, c.dim))
        else:  # phi3: ffn_up holds gate (first half) and up
            up = b + "ffn_up.weight"
            ts.put(w, p + "w_gate", up, (c.hidden_dim, c.dim), slice(0, c.hidden_dim))
            ts.put(w, p + "w_up", up, (c.hidden_dim, c.dim), slice(c.hidden_dim, 2 * c.hidden_dim))
    for name, arr in w.items():
        check_finite(f.path.name, name, arr)
    for name in _ROPE_FACTORS:  # not weights: checked against the compiler's plain RoPE (derived.py)
        if ts.has(name):
            check_freq_factors(f.path.name, name, ts.take(name, (c.head_dim // 2,))[0], c)
    for name in f.tensors:
        if name not in ts.used:
            raise UserError(f"{f.path.name}: tensor {name} is not used by the {c.arch} graph "
                            "(unsupported layer, bias or architecture variant)")
    return w, ts.blocks


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__
