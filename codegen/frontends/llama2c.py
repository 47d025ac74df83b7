"""llama2.c frontend: `.bin` checkpoints written by llama2.c's export.py.

Three layouts (format facts from llama2.c's export.py / run.c / runq.c):

* v0 (legacy): 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
  vocab_size, seq_len); a negative vocab_size means an untied classifier.
  fp32: tok_embeddings, then per kind for all layers attention_norm, wq, wk,
  wv, wo, ffn_norm, w1, w2, w3; final norm; the RoPE freq_cis real and imag
  tables (seq_len * head_size/2 each, unused: we compute our own, and
  `inspect` names them as ignored, saying whether they agree); output.
* v1: uint32 magic "ak42", int32 version=1, the 7 params, uint8
  shared_classifier, zero-padded to 256 bytes.  fp32: attention_norm (all
  layers), ffn_norm (all), norm, tok_embeddings, wq.., wk.., wv.., wo..,
  w1.., w2.., w3.., then output if not shared.
* v2: as v1 with version=2 and an int32 group_size after the flag.  fp32
  norms as in v1; then for each Q8_0 tensor in the order tok_embeddings,
  wq.., wk.., wv.., wo.., w1.., w2.., w3.., [output]: its int8 values
  immediately followed by its float32 group scales (export.py's
  version2_export writes serialize_int8(q) then serialize_fp32(s) per
  tensor; runq.c's init_quantized_tensors reads them the same way).  We
  dequantize (int8 * scale) to float32.

llama2.c's RoPE rotates interleaved pairs (2i, 2i+1) while our graph uses the
Hugging Face rotate-half pairs (i, i + hd/2), so wq/wk rows are permuted per
head: llama2.c row 2i -> i, row 2i+1 -> i + hd/2.  Attention scores are
invariant under the same permutation of q and k, so nothing else changes.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..errors import UserError, check_regular_file
from ..ir import ModelConfig, build_decoder_graph
from ..verify import verify_graph
from .derived import rope_table_note
from .hf import ImportedModel
from .limits import LIMITS, check_finite, check_model_size, check_range, check_tokenizer_vocab
from .tokenizer import Tokenizer

MAGIC = 0x616B3432  # "ak42" read as a little-endian uint32
HEADER_V1 = 256
PARAM_NAMES = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
_LIMIT_OF = {"seq_len": "max_seq"}


def load_llama2c(checkpoint: Path, tokenizer: Path | None = None) -> ImportedModel:
    checkpoint = Path(checkpoint)
    size = check_regular_file(checkpoint, "checkpoint")
    try:
        with open(checkpoint, "rb") as f:
            head = f.read(HEADER_V1)
            version, p, shared, group, offset = _parse_header(checkpoint, head, size)
            config = _config(checkpoint, p, shared)
            sizes = _tensor_sizes(config)
            if version == 2:
                for kind, _ in _order(2, config):
                    if _numel(sizes[kind]) % group:
                        raise UserError(f"{checkpoint}: {kind} has {_numel(sizes[kind])} values, not a multiple "
                                        f"of the header's Q8_0 group_size {group}; corrupt header")
            expected = offset + _payload_bytes(version, config, sizes, group)
            if size != expected:  # checked before the file is read
                what = "truncated" if size < expected else "has trailing data"
                dims = ", ".join(f"{k}={p[k]}" for k in PARAM_NAMES)
                raise UserError(f"{checkpoint}: file is {size} bytes but its llama2.c v{version} header "
                                f"({dims}) implies {expected}: {what}; re-export the checkpoint")
            f.seek(0)
            data = f.read()
    except OSError as e:
        raise UserError(f"{checkpoint}: cannot read checkpoint ({e.strerror or e})") from None
    if len(data) != expected:
        raise UserError(f"{checkpoint}: the file changed while it was read; try again")

    reader = _fp32_reader if version in (0, 1) else _q80_reader
    tables: list[np.ndarray] = []  # v0's freq_cis real and imag
    raw = reader(version, data, offset, config, sizes, group, checkpoint.name, tables)
    weights = _canonical(raw, config)
    graph = verify_graph(build_decoder_graph(config, weights))
    # run.c skips them too: named as ignored, with whether they agree with the RoPE we compute
    ignored = (rope_table_note("freq_cis_real, freq_cis_imag", *tables, config),) if tables else ()

    tok = None
    if tokenizer is not None:
        tok = Tokenizer.from_path(Path(tokenizer), config.vocab_size, 1, 2)
        check_tokenizer_vocab(tokenizer, tok.vocab_size, config.vocab_size)
    return ImportedModel(graph=graph, tokenizer=tok, source=f"llama2c-v{version}:{checkpoint}", ignored=ignored)


def _config(checkpoint: Path, p: dict, shared: bool) -> ModelConfig:
    config = ModelConfig(
        arch="llama", dim=p["dim"], hidden_dim=p["hidden_dim"], n_layers=p["n_layers"],
        n_heads=p["n_heads"], n_kv_heads=p["n_kv_heads"], head_dim=p["dim"] // p["n_heads"],
        vocab_size=p["vocab_size"], max_seq=p["seq_len"], rope_theta=10000.0, norm_eps=1e-5,
        tied_embeddings=shared, qkv_bias=False, bos_id=1, eos_ids=(2,),
    )
    check_model_size(checkpoint, config.n_params())
    return config


# ------------------------------------------------------------------ header


def _parse_header(path: Path, data: bytes, size: int):
    """-> (version, params, shared_classifier, group_size, first weight byte).
    `data` is the file's first bytes (up to 256), `size` its length."""
    if size < 28 or len(data) < 28:
        raise UserError(f"{path}: {size} bytes is too short for a llama2.c checkpoint header")
    (magic,) = struct.unpack_from("<I", data, 0)
    group = 0
    if magic == MAGIC:
        if size < HEADER_V1 or len(data) < HEADER_V1:
            raise UserError(f"{path}: truncated llama2.c header ({size} of {HEADER_V1} bytes)")
        (version,) = struct.unpack_from("<i", data, 4)
        if version not in (1, 2):
            raise UserError(f"{path}: llama2.c checkpoint version {version} is not supported "
                            "(supported: 0, 1, 2); re-export with export.py --version 1 or 2")
        values = struct.unpack_from("<7i", data, 8)
        flag = data[36]
        if flag not in (0, 1):
            raise UserError(f"{path}: shared_classifier flag is {flag}, expected 0 or 1; corrupt header")
        shared = bool(flag)
        if version == 2:
            (group,) = struct.unpack_from("<i", data, 37)
            if group <= 0:
                raise UserError(f"{path}: Q8_0 group_size {group} is not positive; corrupt header")
            if group > LIMITS["dim"]:
                raise UserError(f"{path}: Q8_0 group_size {group:,} is beyond any dim tinyllm-gen accepts; "
                                "corrupt header")
        offset = HEADER_V1
    else:
        version = 0
        values = struct.unpack_from("<7i", data, 0)
        shared = values[5] > 0  # v0: the sign of vocab_size is the shared-classifier flag
        values = values[:5] + (abs(values[5]),) + values[6:]
        offset = 28
    p = dict(zip(PARAM_NAMES, values))
    hint = " (or not a llama2.c checkpoint: bad magic)" if version == 0 else ""
    for k in PARAM_NAMES:
        if p[k] <= 0:
            raise UserError(f"{path}: header field {k} is {p[k]}, must be positive{hint}")
        try:
            check_range(path, f"header field {k}", p[k], _LIMIT_OF.get(k, k))
        except UserError as e:
            raise UserError(f"{e}{hint}") from None
    if p["dim"] % p["n_heads"] or (p["dim"] // p["n_heads"]) % 2:
        raise UserError(f"{path}: dim {p['dim']} does not split into {p['n_heads']} heads of even size; corrupt header")
    if p["n_heads"] % p["n_kv_heads"]:
        raise UserError(f"{path}: n_heads {p['n_heads']} is not a multiple of n_kv_heads {p['n_kv_heads']}; "
                        "corrupt header")
    return version, p, shared, group, offset


def _tensor_sizes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Per-layer shapes in llama2.c naming (w1 = gate, w2 = down, w3 = up)."""
    return {
        "tok_embeddings": (c.vocab_size, c.dim),
        "attention_norm": (c.dim,), "ffn_norm": (c.dim,), "norm": (c.dim,),
        "wq": (c.q_dim, c.dim), "wk": (c.kv_dim, c.dim), "wv": (c.kv_dim, c.dim), "wo": (c.dim, c.q_dim),
        "w1": (c.hidden_dim, c.dim), "w2": (c.dim, c.hidden_dim), "w3": (c.hidden_dim, c.dim),
        "output": (c.vocab_size, c.dim),
        "freq_cis": (c.max_seq, c.head_dim // 2),
    }


_LAYER_MATS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


def _order(version: int, c: ModelConfig) -> list[tuple[str, int | None]]:
    """(kind, layer) in file order; layer None for whole-model tensors."""
    L = range(c.n_layers)
    per = lambda kind: [(kind, i) for i in L]  # noqa: E731
    if version == 0:
        order = [("tok_embeddings", None), *per("attention_norm"), *per("wq"), *per("wk"), *per("wv"),
                 *per("wo"), *per("ffn_norm"), *per("w1"), *per("w2"), *per("w3"), ("norm", None),
                 ("freq_cis", None), ("freq_cis", None)]
    elif version == 1:
        order = [*per("attention_norm"), *per("ffn_norm"), ("norm", None), ("tok_embeddings", None)]
        for kind in _LAYER_MATS:
            order += per(kind)
    else:  # v2: the quantized part only; norms come first in fp32
        order = [("tok_embeddings", None)]
        for kind in _LAYER_MATS:
            order += per(kind)
    if not c.tied_embeddings:
        order.append(("output", None))
    return order


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _payload_bytes(version: int, c: ModelConfig, sizes, group: int) -> int:
    if version in (0, 1):
        return 4 * sum(_numel(sizes[k]) for k, _ in _order(version, c))
    norms = 4 * (2 * c.n_layers + 1) * c.dim
    q = sum(_numel(sizes[k]) for k, _ in _order(2, c))
    # scales: one float32 per group of each tensor
    return norms + q + 4 * sum(_numel(sizes[k]) // group for k, _ in _order(2, c))


# ----------------------------------------------------------------- weights


def _label(kind: str, layer: int | None) -> str:
    return kind if layer is None else f"layers.{layer}.{kind}"


def _fp32_reader(version, data, offset, c, sizes, group, where, tables):
    out: dict[tuple[str, int | None], np.ndarray] = {}
    for key in _order(version, c):
        n = _numel(sizes[key[0]])
        arr = np.frombuffer(data, dtype="<f4", count=n, offset=offset)
        offset += 4 * n
        if key[0] == "freq_cis":  # llama2.c's own RoPE tables: we build ours from theta
            tables.append(arr.reshape(sizes["freq_cis"]))
        else:
            out[key] = arr.reshape(sizes[key[0]]).astype(np.float32)
            check_finite(where, _label(*key), out[key])
    return out


def _q80_reader(version, data, offset, c, sizes, group, where, tables):
    out: dict[tuple[str, int | None], np.ndarray] = {}
    for kind in ("attention_norm", "ffn_norm"):
        for i in range(c.n_layers):
            out[(kind, i)] = np.frombuffer(data, "<f4", c.dim, offset).astype(np.float32)
            check_finite(where, _label(kind, i), out[(kind, i)])
            offset += 4 * c.dim
    out[("norm", None)] = np.frombuffer(data, "<f4", c.dim, offset).astype(np.float32)
    check_finite(where, "norm", out[("norm", None)])
    offset += 4 * c.dim
    # export.py's version2_export (and runq.c's reader): each tensor's int8
    # values immediately followed by that tensor's float32 group scales.
    for kind, layer in _order(2, c):  # divisibility by group was checked with the header
        n = _numel(sizes[kind])
        q = np.frombuffer(data, np.int8, n, offset)
        offset += n
        scale = np.frombuffer(data, "<f4", n // group, offset)
        offset += 4 * (n // group)
        check_finite(where, _label(kind, layer) + " Q8_0 scales", scale)
        with np.errstate(over="ignore"):
            deq = q.reshape(n // group, group).astype(np.float32) * scale[:, None]
        out[(kind, layer)] = deq.reshape(sizes[kind]).astype(np.float32)
        check_finite(where, _label(kind, layer), out[(kind, layer)])
    return out


def interleaved_to_rotate_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of each head: llama2.c (2i, 2i+1) pairs -> HF (i, i + hd/2)."""
    rows, cols = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def _canonical(raw, c: ModelConfig) -> dict[str, np.ndarray]:
    names = {"w1": "w_gate", "w2": "w_down", "w3": "w_up"}
    w: dict[str, np.ndarray] = {}
    for (kind, layer), arr in raw.items():
        if layer is None:
            w[kind] = arr
            continue
        if kind == "wq":
            arr = interleaved_to_rotate_half(arr, c.n_heads)
        elif kind == "wk":
            arr = interleaved_to_rotate_half(arr, c.n_kv_heads)
        w[f"layers.{layer}.{names.get(kind, kind)}"] = arr
    return w
