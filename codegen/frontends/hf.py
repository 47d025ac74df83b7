"""Hugging Face frontend: a `save_pretrained` directory -> Graph.

config.json is read as data (no transformers import: the core install has no
torch), the `*.safetensors` files with `safetensors` in numpy mode.  Every
supported architecture is the same decoder; only tensor names, fused
projections and biases differ, so each is a small name mapping onto the
canonical names of `ir.py`.  Anything that would change the math and that
the shared graph cannot express (RoPE scaling, sliding windows, partial
rotary, other activations, extra biases) is refused by name rather than
silently approximated.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safetensors import SafetensorError, safe_open

from ..errors import UserError, check_regular_file, first_line, read_json
from ..ir import Graph, ModelConfig, build_decoder_graph, expected_weight_shapes
from ..verify import verify_graph
from .derived import check_inv_freq
from .limits import check_finite, check_model_size, check_positive_number, check_range, check_tokenizer_vocab
from .tokenizer import Tokenizer

ARCHS = {"LlamaForCausalLM": "llama", "Phi3ForCausalLM": "phi3", "Qwen2ForCausalLM": "qwen2"}
# transformers' defaults for keys a config.json may omit.
_DEFAULTS = {
    "llama": {"rms_norm_eps": 1e-6, "max_position_embeddings": 2048},
    "phi3": {"rms_norm_eps": 1e-5, "max_position_embeddings": 4096},
    "qwen2": {"rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
}
_FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}


@dataclass(frozen=True)
class ImportedModel:
    graph: Graph
    tokenizer: Tokenizer | None
    source: str  # human-readable origin, for reports
    # Tensors the file carries that the compiled model does not use and that no
    # check tied to what it does use ("name: why"), for `inspect` (derived.py).
    ignored: tuple[str, ...] = ()


def load_hf(model_dir: Path, tokenizer: Path | None = None) -> ImportedModel:
    model_dir = Path(model_dir)
    cfg = _read_config(model_dir)
    config = parse_config(cfg, model_dir / "config.json", _generation_config(model_dir))
    store = _TensorStore(model_dir)
    weights = _MAPPERS[config.arch](store, config, cfg)
    ignored = store.check_all_used(config)
    graph = verify_graph(build_decoder_graph(config, weights))

    arch = cfg["architectures"][0]
    return ImportedModel(graph=graph, tokenizer=load_tokenizer(config, model_dir, tokenizer),
                         source=f"hf:{model_dir} ({arch})", ignored=ignored)


def load_tokenizer(config: ModelConfig, folder: Path, tokenizer: Path | None) -> Tokenizer | None:
    """An explicit tokenizer file, else the tokenizer.json beside the model,
    with the config's BOS/EOS ids; None when there is neither."""
    eos = config.eos_ids[0] if config.eos_ids else None
    if tokenizer is not None:
        tok = Tokenizer.from_path(Path(tokenizer), config.vocab_size, config.bos_id, eos)
        where = tokenizer
    elif (folder / "tokenizer.json").exists():
        where = folder / "tokenizer.json"
        tok = Tokenizer.from_hf_json(where, bos_id=config.bos_id, eos_id=eos, vocab_size=config.vocab_size)
    else:
        return None
    check_tokenizer_vocab(where, tok.vocab_size, config.vocab_size)
    return tok


# ----------------------------------------------------------------- config


def _read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.exists():
        raise UserError(f"{model_dir}: no config.json; pass a directory written by save_pretrained()")
    cfg = read_json(path, "config.json", 16 * 1024 * 1024)
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: expected a JSON object at top level")
    return cfg


def _generation_config(model_dir: Path) -> dict[str, Any]:
    """Newer transformers may keep bos/eos only in generation_config.json.
    It is optional: anything but a regular file of valid JSON is ignored
    (never opened when it is not a regular file)."""
    path = model_dir / "generation_config.json"
    if not path.exists():
        return {}
    try:
        g = read_json(path, "generation_config.json", 16 * 1024 * 1024)
    except UserError:
        return {}
    return g if isinstance(g, dict) else {}


def parse_config(cfg: dict[str, Any], where: Path, gen: dict[str, Any] | None = None) -> ModelConfig:
    """config.json -> ModelConfig, refusing what the shared graph cannot run."""
    gen = gen or {}
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise UserError(f"{where}: no 'architectures' entry; add e.g. \"architectures\": [\"LlamaForCausalLM\"]")
    arch_name = archs[0]
    if not isinstance(arch_name, str) or arch_name not in ARCHS:
        raise UserError(f"unsupported architecture {arch_name!r} in {where.name}: "
                        f"supported are {', '.join(ARCHS)}")
    arch = ARCHS[arch_name]
    defaults = _DEFAULTS[arch]

    def intval(key: str, limit: str, default: int | None = None) -> int:
        v = cfg.get(key, default)
        if v is None and default is not None:
            v = default
        return check_range(where, key, v, limit)

    dim = intval("hidden_size", "dim")
    hidden = intval("intermediate_size", "hidden_dim")
    n_layers = intval("num_hidden_layers", "n_layers")
    n_heads = intval("num_attention_heads", "n_heads")
    n_kv = intval("num_key_value_heads", "n_kv_heads", n_heads)
    vocab = intval("vocab_size", "vocab_size")
    max_seq = intval("max_position_embeddings", "max_seq", defaults["max_position_embeddings"])
    if cfg.get("head_dim") is not None:
        head_dim = intval("head_dim", "head_dim")
    elif dim % n_heads:
        raise UserError(f"{where}: hidden_size {dim} is not divisible by num_attention_heads {n_heads}")
    else:
        head_dim = dim // n_heads
    if n_heads % n_kv:
        raise UserError(f"{where}: num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    if head_dim % 2:
        raise UserError(f"{where}: head_dim {head_dim} is odd; RoPE needs an even head dimension")

    act = cfg.get("hidden_act", "silu")
    if not isinstance(act, str) or act != "silu":
        raise UserError(f"{where}: hidden_act {act!r} is not supported (only 'silu', the SwiGLU MLP)")

    theta = _rope_theta(cfg, where)
    max_seq = _usable_context(cfg, arch, max_seq, where)

    qkv_bias = arch == "qwen2"  # Qwen2 always has q/k/v biases and no others
    if cfg.get("attention_bias"):
        # Llama's attention_bias also puts a bias on o_proj, which the graph has no slot for.
        raise UserError(f"{where}: attention_bias=true (biases on q/k/v/o_proj) is not supported; "
                        "only Qwen2-style q/k/v biases are")
    if cfg.get("mlp_bias"):
        raise UserError(f"{where}: mlp_bias=true is not supported (the MLP projections must be bias-free)")

    eps = check_positive_number(where, "rms_norm_eps", cfg.get("rms_norm_eps", defaults["rms_norm_eps"]))
    tied = cfg.get("tie_word_embeddings", False)
    if tied is None:
        tied = False
    if not isinstance(tied, bool):
        raise UserError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")

    bos = _token_ids(cfg, gen, "bos_token_id", vocab, where)
    eos = _token_ids(cfg, gen, "eos_token_id", vocab, where)
    config = ModelConfig(
        arch=arch, dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim, vocab_size=vocab, max_seq=max_seq, rope_theta=float(theta), norm_eps=float(eps),
        tied_embeddings=tied, qkv_bias=qkv_bias,
        bos_id=bos[0] if bos else None, eos_ids=eos,
    )
    check_model_size(where, config.n_params())
    return config


def _rope_theta(cfg: dict[str, Any], where: Path) -> float:
    """transformers 4 writes rope_theta / rope_scaling / partial_rotary_factor
    at top level; transformers 5 writes a `rope_parameters` dict (or one per
    layer type).  Only plain RoPE over the full head is supported."""
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind != "default":
            raise UserError(f"{where}: rope_scaling {kind!r} is not supported (only plain RoPE); "
                            "use a model without RoPE scaling")
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params and "rope_type" not in params and "rope_theta" not in params \
            and all(isinstance(v, dict) for v in params.values()):
        variants = list(params.values())  # per layer type: must all be the same plain RoPE
        if any(v != variants[0] for v in variants):
            raise UserError(f"{where}: rope_parameters differ between layer types; not supported")
        params = variants[0]
    params = params if isinstance(params, dict) else {}
    kind = params.get("rope_type", "default")
    if kind != "default":
        raise UserError(f"{where}: rope_scaling {kind!r} (rope_parameters.rope_type) is not supported "
                        "(only plain RoPE); use a model without RoPE scaling")
    for src in (params, cfg):
        prf = src.get("partial_rotary_factor")
        if prf is not None and (not isinstance(prf, (int, float)) or isinstance(prf, bool)):
            raise UserError(f"{where}: partial_rotary_factor must be a number, got {prf!r}")
        if prf is not None and float(prf) != 1.0:
            raise UserError(f"{where}: partial_rotary_factor {prf} (partial rotary) is not supported; "
                            "RoPE must cover the whole head")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    return check_positive_number(where, "rope_theta", theta)


def _usable_context(cfg: dict[str, Any], arch: str, max_seq: int, where: Path) -> int:
    """The context we can run exactly.  A Phi-3 sliding window (Phi-3-mini-4k:
    2047 of 4096) never slides for positions below the window, where it is
    plain causal attention, so such a model is accepted with its context
    limited to the window; everything else that slides is refused."""
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        layer_types = []
    if not isinstance(layer_types, list):
        raise UserError(f"{where}: layer_types must be a list of layer kinds, got {layer_types!r:.80}")
    if any(t != "full_attention" for t in layer_types):
        bad = next(t for t in layer_types if t != "full_attention")
        raise UserError(f"{where}: layer_types contains {bad!r}; only full attention is supported")
    if arch == "qwen2":
        if cfg.get("use_sliding_window"):
            raise UserError(f"{where}: use_sliding_window=true (sliding-window attention) is not supported; "
                            "use a model trained with full attention")
        return max_seq
    sw = cfg.get("sliding_window")
    if sw is not None and (not isinstance(sw, int) or isinstance(sw, bool)):
        raise UserError(f"{where}: sliding_window must be an integer or null, got {sw!r:.80}")
    if arch == "phi3" and isinstance(sw, int) and 0 < sw < max_seq:
        return sw
    if sw is not None and sw < max_seq:
        raise UserError(f"{where}: sliding_window {sw} is smaller than max_position_embeddings {max_seq}; "
                        "sliding-window attention is not supported")
    return max_seq


def _token_ids(cfg, gen, key: str, vocab: int, where: Path) -> tuple[int, ...]:
    v = cfg.get(key)
    if v is None:
        v = gen.get(key)
    if v is None:
        return ()
    ids = tuple(v) if isinstance(v, list) else (v,)
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
            raise UserError(f"{where}: {key} {t!r} is outside the vocabulary (vocab_size {vocab}); fix config.json")
    return ids


_one_line = first_line


# ---------------------------------------------------------------- tensors


class _TensorStore:
    """All tensors of all `*.safetensors` files in a directory, as float32.

    Loaded eagerly: the models we target fit in flash, so they fit in RAM."""

    def __init__(self, model_dir: Path):
        self.dir = model_dir
        files = sorted(model_dir.glob("*.safetensors"))
        index = model_dir / "model.safetensors.index.json"
        self.index: dict[str, str] = {}
        if index.exists():
            doc = read_json(index, "shard index")
            wmap = doc.get("weight_map") if isinstance(doc, dict) else None
            if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
                raise UserError(f"{index}: unreadable shard index (no weight_map of file names); re-save the model")
            self.index = dict(wmap)
            for shard in sorted(set(self.index.values())):
                if "/" in shard or not (model_dir / shard).is_file():
                    raise UserError(f"{index.name}: shard {shard} is missing from {model_dir}; "
                                    "download all shards")
        if not files:
            raise UserError(f"{model_dir}: no *.safetensors weights (pytorch_model.bin is not supported); "
                            "re-save with save_pretrained(safe_serialization=True)")
        self.tensors: dict[str, np.ndarray] = {}
        self.file_of: dict[str, str] = {}
        self.dtype_of: dict[str, str] = {}
        for f in files:
            for name, arr in _read_safetensors(f, self.dtype_of).items():
                if name in self.tensors:
                    raise UserError(f"{f.name}: tensor {name} also appears in {self.file_of[name]}; "
                                    "remove the stale shard")
                self.tensors[name] = arr
                self.file_of[name] = f.name
        self.files = [f.name for f in files]
        self.used: set[str] = set()

    def where(self, name: str) -> str:
        """The file a tensor is (or should be) in, for messages."""
        if name in self.file_of:
            return self.file_of[name]
        if name in self.index:
            return self.index[name]
        return self.files[0] if len(self.files) == 1 else "model safetensors files"

    def has(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.tensors:
            raise UserError(f"{self.where(name)}: tensor {name} missing")
        arr = self.tensors[name]
        if tuple(arr.shape) != tuple(shape):
            raise UserError(f"{self.where(name)}: tensor {name} has shape {tuple(arr.shape)}, "
                            f"expected {tuple(shape)} from config.json")
        self.used.add(name)
        return arr

    def check_all_used(self, config: ModelConfig) -> tuple[str, ...]:
        """A tensor we do not map would change the model if it mattered (e.g.
        an o_proj bias), so leftovers are refused, except known-inert ones:
        RoPE inv_freq buffers, checked against the compiler's RoPE, and a
        tied model's stored lm_head.weight.  Returns the ignored ones."""
        ignored = []
        for name in sorted(self.tensors):
            if name in self.used:
                continue
            if name.endswith("rotary_emb.inv_freq"):
                check_inv_freq(self.file_of[name], name, self.tensors[name], config, self.dtype_of.get(name, "F32"))
                continue
            if name == "lm_head.weight" and config.tied_embeddings:
                # transformers ties it to embed_tokens regardless of its stored value, and so does the compiler
                if not np.array_equal(self.tensors[name], self.tensors.get("model.embed_tokens.weight")):
                    ignored.append(f"{name}: not used, config.json ties the classifier to model.embed_tokens.weight "
                                   "(as transformers does), and the stored one differs from it")
                continue
            raise UserError(f"{self.file_of[name]}: tensor {name} is not used by the "
                            f"{config.arch} graph (unsupported layer, bias or architecture variant)")
        return tuple(ignored)


def _read_safetensors(path: Path, dtypes: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Every tensor as float32 (`dtypes`, when given, gets each one's stored dtype)."""
    check_regular_file(path, "safetensors file")  # safe_open of a FIFO would block
    out: dict[str, np.ndarray] = {}
    try:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
            header = _safetensors_header(path)
            for name in names:
                dtype = header[name]["dtype"]
                if dtypes is not None:
                    dtypes[name] = dtype
                if dtype not in _FLOAT_DTYPES:
                    raise UserError(f"{path.name}: tensor {name} has dtype {dtype}; only F32/F16/BF16 "
                                    "checkpoints are supported (dequantize it first)")
                if dtype == "BF16":
                    arr = _read_bf16(path, header, name)
                else:
                    arr = f.get_tensor(name)
                with np.errstate(over="ignore"):  # an F64 beyond float32 becomes inf, refused below
                    out[name] = np.ascontiguousarray(arr, dtype=np.float32)
                check_finite(path.name, name, out[name])
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise UserError(f"{path}: not a valid safetensors file ({_one_line(e)}); "
                        "it is truncated or corrupt, re-download or re-save it") from None
    return out


def _safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header (u64 little-endian length, then JSON).  Offsets in it
    are relative to the end of the header; we record that as `_data_start`."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header["_data_start"] = 8 + n
    return header


def _read_bf16(path: Path, header: dict[str, Any], name: str) -> np.ndarray:
    """numpy has no bfloat16: bf16 is the top half of an IEEE float32, so
    widen the 16-bit patterns into the high half of uint32 and reinterpret."""
    info = header[name]
    start, end = info["data_offsets"]
    with open(path, "rb") as fh:
        fh.seek(header["_data_start"] + start)
        raw = np.frombuffer(fh.read(end - start), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])


# --------------------------------------------------------- name mappings


def _common(store: _TensorStore, c: ModelConfig) -> dict[str, np.ndarray]:
    """Embedding, norms, o_proj, down_proj and lm_head: named alike by all three."""
    shapes = expected_weight_shapes(c)
    w = {
        "tok_embeddings": store.take("model.embed_tokens.weight", shapes["tok_embeddings"]),
        "norm": store.take("model.norm.weight", shapes["norm"]),
    }
    if not c.tied_embeddings:
        w["output"] = store.take("lm_head.weight", shapes["output"])
    for i in range(c.n_layers):
        hf, p = f"model.layers.{i}.", f"layers.{i}."
        w[p + "attention_norm"] = store.take(hf + "input_layernorm.weight", (c.dim,))
        w[p + "ffn_norm"] = store.take(hf + "post_attention_layernorm.weight", (c.dim,))
        w[p + "wo"] = store.take(hf + "self_attn.o_proj.weight", (c.dim, c.q_dim))
        w[p + "w_down"] = store.take(hf + "mlp.down_proj.weight", (c.dim, c.hidden_dim))
    return w


def _map_llama_like(store: _TensorStore, c: ModelConfig, cfg: dict) -> dict[str, np.ndarray]:
    """Llama and Qwen2: separate q/k/v and gate/up projections."""
    w = _common(store, c)
    for i in range(c.n_layers):
        hf, p = f"model.layers.{i}.", f"layers.{i}."
        for proj, rows in (("q", c.q_dim), ("k", c.kv_dim), ("v", c.kv_dim)):
            w[p + "w" + proj] = store.take(f"{hf}self_attn.{proj}_proj.weight", (rows, c.dim))
            if c.qkv_bias:
                w[p + "b" + proj] = store.take(f"{hf}self_attn.{proj}_proj.bias", (rows,))
        w[p + "w_gate"] = store.take(hf + "mlp.gate_proj.weight", (c.hidden_dim, c.dim))
        w[p + "w_up"] = store.take(hf + "mlp.up_proj.weight", (c.hidden_dim, c.dim))
    return w


def _map_phi3(store: _TensorStore, c: ModelConfig, cfg: dict) -> dict[str, np.ndarray]:
    """Phi-3 fuses q/k/v (rows: q, then k, then v) and gate/up (first half gate)."""
    w = _common(store, c)
    for i in range(c.n_layers):
        hf, p = f"model.layers.{i}.", f"layers.{i}."
        qkv = store.take(hf + "self_attn.qkv_proj.weight", (c.q_dim + 2 * c.kv_dim, c.dim))
        w[p + "wq"] = qkv[: c.q_dim].copy()
        w[p + "wk"] = qkv[c.q_dim: c.q_dim + c.kv_dim].copy()
        w[p + "wv"] = qkv[c.q_dim + c.kv_dim:].copy()
        gate_up = store.take(hf + "mlp.gate_up_proj.weight", (2 * c.hidden_dim, c.dim))
        w[p + "w_gate"] = gate_up[: c.hidden_dim].copy()
        w[p + "w_up"] = gate_up[c.hidden_dim:].copy()
    return w


_MAPPERS = {"llama": _map_llama_like, "qwen2": _map_llama_like, "phi3": _map_phi3}
