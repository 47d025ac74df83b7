"""Seeded generators of malformed (and some valid) inputs, one per input
kind.  Each mutates a small valid base (`build_bases`) and says what must
happen: a one-line error, success, or either (`fuzz_harness.Case`).

Registered generators (name: what it feeds):
  config_json        config.json of a Hugging Face folder      -> inspect
  safetensors        model.safetensors (header, data, NaN/Inf)  -> inspect
  tokenizer_json     tokenizer.json (+ tokenizer_config.json)   -> inspect, reference
  llama2c_model      llama2.c v0/v1/v2 checkpoints               -> inspect
  llama2c_tokenizer  llama2.c tokenizer.bin, prompts             -> inspect, reference
  onnx               model.onnx (initializers, nodes, bytes)     -> inspect
  cli_values         option values of reference/plan/compile     -> reference, plan
  out_paths          -o targets (symlinks, files, /proc, long)   -> compile
  gguf               model.gguf (header, metadata, NaN, junk)   -> inspect
"""
from __future__ import annotations

import json
import math
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fuzz_harness import Case, Outcome, generator

DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB, CTX = 32, 48, 2, 4, 2, 300, 32
HD = DIM // HEADS


# ------------------------------------------------------------------ bases


@dataclass
class Bases:
    root: Path
    hf: Path  # config.json, model.safetensors, tokenizer.json
    config: dict
    st: bytes
    st_header: dict
    st_data_start: int
    tok_json: str
    l2c: dict  # version -> (bytes, spans [(start, end, kind "f32" | "i8" | "ignored")])
    l2c_tok: bytes
    onnx: Path | None  # export dir (config.json, model.onnx inline, tokenizer.json), None without torch/onnx
    onnx_weights: list[str] = field(default_factory=list)  # initializers the import takes as weights
    onnx_other_float: list[str] = field(default_factory=list)


def _hf_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(VOCAB, DIM), "model.norm.weight": 1 + 0.1 * r(DIM),
         "lm_head.weight": r(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * r(DIM)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * r(DIM)
        t[p + "self_attn.q_proj.weight"] = r(HEADS * HD, DIM)
        t[p + "self_attn.k_proj.weight"] = r(KV * HD, DIM)
        t[p + "self_attn.v_proj.weight"] = r(KV * HD, DIM)
        t[p + "self_attn.o_proj.weight"] = r(DIM, HEADS * HD)
        t[p + "mlp.gate_proj.weight"] = r(HIDDEN, DIM)
        t[p + "mlp.up_proj.weight"] = r(HIDDEN, DIM)
        t[p + "mlp.down_proj.weight"] = r(DIM, HIDDEN)
    return t


def _config() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "hidden_size": DIM, "intermediate_size": HIDDEN,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV,
            "vocab_size": VOCAB, "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}


def _l2c_v(version: int, seed: int = 5) -> tuple[bytes, list]:
    """llama2.c export.py layouts (v0 legacy, v1 fp32, v2 Q8_0: per tensor
    int8 values then its scales), with the byte span of every tensor."""
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    tied = version != 1
    L = range(LAYERS)
    emb = r(VOCAB, DIM)
    norms = {k: [1 + 0.1 * r(DIM) for _ in L] for k in ("attention_norm", "ffn_norm")}
    mats = {"wq": [r(DIM, DIM) for _ in L], "wk": [r(KV * HD, DIM) for _ in L], "wv": [r(KV * HD, DIM) for _ in L],
            "wo": [r(DIM, DIM) for _ in L], "w1": [r(HIDDEN, DIM) for _ in L], "w2": [r(DIM, HIDDEN) for _ in L],
            "w3": [r(HIDDEN, DIM) for _ in L]}
    final, out = 1 + 0.1 * r(DIM), r(VOCAB, DIM)
    params = [DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB if tied else -VOCAB, CTX]
    chunks: list[tuple[bytes, str]] = []
    f32 = lambda a: (np.ascontiguousarray(a, "<f4").tobytes(), "f32")  # noqa: E731
    if version == 0:
        head = struct.pack("<7i", *params)
        chunks += [f32(emb), *(f32(a) for a in norms["attention_norm"])]
        for k in ("wq", "wk", "wv", "wo"):
            chunks += [f32(a) for a in mats[k]]
        chunks += [f32(a) for a in norms["ffn_norm"]]
        for k in ("w1", "w2", "w3"):
            chunks += [f32(a) for a in mats[k]]
        chunks += [f32(final)]
        chunks += [(np.zeros(CTX * HD // 2, "<f4").tobytes(), "ignored")] * 2  # freq_cis: unused
    else:
        params[5] = VOCAB
        h = struct.pack("<Ii7iB", 0x616B3432, version, *params, int(tied))
        if version == 2:
            h += struct.pack("<i", 32)
        head = h + b"\0" * (256 - len(h))
        chunks += [f32(a) for a in norms["attention_norm"] + norms["ffn_norm"] + [final]]
        seq = [emb] + [a for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3") for a in mats[k]]
        if not tied:
            seq.append(out)
        for a in seq:
            if version == 1:
                chunks.append(f32(a))
                continue
            g = a.reshape(-1, 32)
            s = (np.abs(g).max(axis=1) / np.float32(127)).astype(np.float32)
            q = np.round(g / s[:, None]).astype(np.int8)
            chunks += [(q.tobytes(), "i8"), (s.astype("<f4").tobytes(), "scale")]
    if version == 0 and not tied:
        chunks.append(f32(out))
    data, spans, pos = bytearray(head), [], len(head)
    for b, kind in chunks:
        spans.append((pos, pos + len(b), kind))
        data += b
        pos += len(b)
    return bytes(data), spans


_L2C: dict[int, bytes] = {}


def _l2c_cache(version: int) -> bytes:
    if version not in _L2C:
        _L2C[version] = _l2c_v(version)[0]
    return _L2C[version]


def _l2c_tokenizer() -> bytes:
    pieces = [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)]
    pieces += [(f"<0x{b:02X}>".encode(), 0.0) for b in range(256)]
    words = [b" ", b"a", b"t", b"he", b" the", b"at", b" c", b" cat", b"th", b"e", b"h", b"c", b" a"]
    pieces += [(w, float(len(w))) for w in words]
    while len(pieces) < VOCAB:
        pieces.append((f"<pad{len(pieces)}>".encode(), -1e9))
    out = struct.pack("<i", max(len(p) for p, _ in pieces))
    return out + b"".join(struct.pack("<fi", s, len(p)) + p for p, s in pieces)


def build_bases(root: Path) -> Bases:
    import sys

    from safetensors.numpy import save_file

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tinymodels import make_tokenizer

    hf = root / "base-hf"
    hf.mkdir(parents=True)
    save_file(_hf_tensors(), str(hf / "model.safetensors"))
    cfg = _config()
    (hf / "config.json").write_text(json.dumps(cfg))
    make_tokenizer(hf, VOCAB)
    st = (hf / "model.safetensors").read_bytes()
    (n,) = struct.unpack_from("<Q", st)
    header = json.loads(st[8:8 + n])
    l2c = {v: _l2c_v(v) for v in (0, 1, 2)}
    bases = Bases(root, hf, cfg, st, header, 8 + n, (hf / "tokenizer.json").read_text(), l2c, _l2c_tokenizer(), None)
    _build_onnx(bases)
    return bases


def _build_onnx(b: Bases) -> None:
    """An ONNX export of a tiny transformers Llama (torch.onnx.export), with
    its weights inlined; skipped (None) when torch or onnx is missing."""
    try:
        import onnx
        import torch  # noqa: F401
    except ImportError:
        return
    from tinymodels import export_onnx, make_hf_model

    from tinyllm_gen.frontends import load_model

    src = make_hf_model(b.root / "onnx-src", dim=DIM, hidden=HIDDEN, layers=1, heads=HEADS, kv_heads=KV,
                        vocab=VOCAB, context=CTX, tied=False, seed=2)
    d = export_onnx(src, b.root / "onnx-export")
    model = onnx.load(str(d / "model.onnx"))  # external data loaded
    out = b.root / "base-onnx"
    out.mkdir()
    onnx.save(model, str(out / "model.onnx"))  # inline
    for f in ("config.json", "tokenizer.json"):
        (out / f).write_bytes((d / f).read_bytes())
    weights = load_model(out).graph.weights
    arrays = [w for w in weights.values()]
    from onnx import numpy_helper

    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind != "f":
            continue
        if any(a.shape == w.shape and np.array_equal(a, w) or a.ndim == 2 and a.T.shape == w.shape
               and np.array_equal(a.T, w) for w in arrays):
            b.onnx_weights.append(t.name)
        else:
            b.onnx_other_float.append(t.name)
    b.onnx = out


# ----------------------------------------------------------------- helpers


def _dir(work: Path, name: str, files: dict[str, bytes | str | Path | None], base: Path | None = None) -> Path:
    """A case directory: the base's files hard-linked, then `files` written
    (a Path value: a special entry made by the caller; None: removed)."""
    d = work / name
    d.mkdir(parents=True)
    if base is not None:
        for f in base.iterdir():
            if f.is_file() and f.name not in files:
                os.link(f, d / f.name)
    for fname, content in files.items():
        p = d / fname
        if content is None:
            continue
        if isinstance(content, str):
            p.write_text(content)
        elif isinstance(content, bytes):
            p.write_bytes(content)
    return d


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _junk_value(rng: random.Random):
    return rng.choice([None, True, False, 0, -1, 1, 2**64, -2**63, 1.5, float("1e308"), "x", "", [], {}, [1, 2],
                       {"a": 1}, "LlamaForCausalLM", 1e-300, 32, 48, 300])


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _bad_json_texts(rng: random.Random, text: str):
    """(label, bytes, expect) whole-file corruptions of a JSON file."""
    raw = text.encode()
    cut = rng.randrange(0, len(raw))
    yield "truncated", raw[:cut], "error"
    yield "invalid-utf8", b"\xff\xfe" + raw[2:], "error"
    yield "deep-nesting", ('{"a": ' + _deep(rng.choice([3000, 50000, 200000])) + "}").encode(), "error"
    yield "top-level-array", b"[1, 2, 3]", "error"
    yield "empty", b"", "error"
    yield "nan-literal", raw[:-1] + b', "zz": NaN}', "error"
    yield "binary", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), "error"
    yield "bom", b"\xef\xbb\xbf" + raw, "error"


# ---------------------------------------------------------------- config.json

_CONFIG_VALUES = {  # key -> [(value, expect)]; "drop" removes the key
    "hidden_size": [(0, "error"), (-32, "error"), (2**64, "error"), (32.0, "error"), ("32", "error"),
                    (True, "error"), (None, "error"), ([], "error"), (33, "error"), (1 << 17, "error"),
                    ("drop", "error"), (10**30, "error")],
    "intermediate_size": [(0, "error"), (-1, "error"), (2**63, "error"), ("48", "error"), (49, "error"),
                          ("drop", "error"), (1 << 19, "error")],
    "num_hidden_layers": [(0, "error"), (-1, "error"), (10**12, "error"), (2**64, "error"), (3, "error"),
                          ("1", "error"), (1 << 10, "error"), (10**6, "error"), (1, "error"), ("drop", "error")],
    "num_attention_heads": [(0, "error"), (3, "error"), (5, "error"), (64, "error"), (2**40, "error"),
                            (8, "error"), ("drop", "error")],
    "num_key_value_heads": [(0, "error"), (3, "error"), (4, "error"), (None, "error"), (-2, "error"),
                            ("drop", "error"), (2**70, "error")],
    "vocab_size": [(0, "error"), (299, "error"), (2**64, "error"), (301, "error"), (1 << 21, "error"),
                   ("drop", "error"), (150, "error")],
    "max_position_embeddings": [(0, "error"), (-1, "error"), (2**64, "error"), (1 << 21, "error"), (16, "ok"),
                                (64, "ok"), (None, "ok"), ("32", "error"), ("drop", "ok"), (1 << 20, "ok")],
    "head_dim": [(8, "ok"), (16, "error"), (7, "error"), (0, "error"), (None, "ok"), (2**64, "error")],
    "rms_norm_eps": [(0, "error"), (-1e-5, "error"), ("1e-5", "error"), (None, "error"), (1e-6, "ok"),
                     (1e308, "error"), (1e-300, "error"), (1e30, "ok"), ("drop", "ok"), ([1e-5], "error")],
    "rope_theta": [(0, "error"), (-1, "error"), ("x", "error"), (1e6, "ok"), (None, "error"), (1e400, "error"),
                   (1e300, "error")],
    "partial_rotary_factor": [("half", "error"), (0.5, "error"), (1.0, "ok"), ([], "error"), (None, "ok"),
                              ({}, "error"), (True, "error")],
    "layer_types": [("full_attention", "error"), (5, "error"), ({}, "error"), (["full_attention"], "ok"),
                    (["sliding_attention"], "error"), ([], "ok"), ([1], "error"), (None, "ok")],
    "sliding_window": [("x", "error"), (8, "error"), (64, "ok"), (None, "ok"), (True, "error"), (-1, "error"),
                       (1.5, "error"), ([], "error")],
    "tie_word_embeddings": [("yes", "error"), (1, "error"), (True, "ok"), (False, "ok"), (None, "ok"),
                            ([], "error")],
    "architectures": [([], "error"), ("LlamaForCausalLM", "error"), ([["x"]], "error"), (["GPT2"], "error"),
                      (None, "error"), ([5], "error"), ("drop", "error"), ([{"a": 1}], "error")],
    "hidden_act": [("gelu", "error"), (None, "error"), (5, "error"), ("silu", "ok"), ([], "error")],
    "bos_token_id": [(300, "error"), (-1, "error"), ("1", "error"), (None, "ok"), ([0], "ok"), (1.0, "error"),
                     (2**64, "error")],
    "eos_token_id": [([1, 2], "ok"), ([999], "error"), ("x", "error"), ([], "ok"), ({}, "error"), (True, "error")],
    "rope_scaling": [({"type": "linear", "factor": 2}, "error"), ("x", "error"), ({"rope_type": "default"}, "ok"),
                     (None, "ok"), ([], "error")],
    "attention_bias": [(True, "error"), (False, "ok")],
    "mlp_bias": [(True, "error"), (False, "ok")],
    "rope_parameters": [({"rope_type": "yarn"}, "error"), ({"rope_theta": -1}, "error"), ("x", "ok"),
                        ({"a": {"rope_theta": 1e4}, "b": {"rope_theta": 1e5}}, "error")],
    "zz_unknown_key": [(1, "ok"), ({"deep": [1, 2, {"x": None}]}, "ok")],
}


def _fifo_and_directory(work: Path, b: Bases, fifo_dir: str, dir_dir: str, name: str, fifo_label: str,
                        dir_label: str):
    """Two cases: the model folder's file `name` as a FIFO (isolated: an open
    would block) and as a directory; both refused, naming the file."""
    d = _dir(work, fifo_dir, {name: None}, b.hf)
    _fifo(d / name)
    yield Case(fifo_label, ["inspect", str(d)], "error", needle=name, isolate=True)
    d = _dir(work, dir_dir, {name: None}, b.hf)
    (d / name).mkdir()
    yield Case(dir_label, ["inspect", str(d)], "error", needle=name)


@generator("config_json", cases=220)
def gen_config_json(rng: random.Random, b: Bases, work: Path, n: int):
    table = [(k, v, e) for k, vals in _CONFIG_VALUES.items() for v, e in vals]
    k = 0
    for key, value, expect in table:  # every listed value once
        cfg = dict(b.config)
        if value == "drop":
            cfg.pop(key, None)
        else:
            cfg[key] = value
        d = _dir(work, f"c{k}", {"config.json": json.dumps(cfg)}, b.hf)
        yield Case(f"config {key}={value!r:.40}", ["inspect", str(d)], expect)
        if expect == "ok":  # the rest of the pipeline on an odd but valid config: plan may not fit
            yield Case(f"config {key}={value!r:.40} plan", ["plan", str(d), "--max-seq", "auto"], "any")
            yield Case(f"config {key}={value!r:.40} compile", ["compile", str(d), "-o", str(d / "out"), "--board",
                                                               "host"], "any")
        k += 1
    for label, raw, expect in _bad_json_texts(rng, json.dumps(b.config)):
        d = _dir(work, f"c{k}", {"config.json": raw}, b.hf)
        yield Case(f"config file {label}", ["inspect", str(d)], expect, needle="config.json")
        k += 1
    # config.json not a regular file / missing; a generation_config.json that must be ignored
    yield from _fifo_and_directory(work, b, f"c{k}", f"c{k + 1}", "config.json", "config.json is a FIFO",
                                   "config.json is a directory")
    k += 2
    d = _dir(work, f"c{k}", {"config.json": None}, b.hf)
    yield Case("config.json missing", ["inspect", str(d)], "error", needle="config.json")
    k += 1
    d = _dir(work, f"c{k}", {"config.json": None}, b.hf)
    os.symlink(work / "nowhere.json", d / "config.json")
    yield Case("config.json dangling symlink", ["inspect", str(d)], "error", needle="config.json")
    k += 1
    d = _dir(work, f"c{k}", {}, b.hf)
    _fifo(d / "generation_config.json")
    yield Case("generation_config.json is a FIFO (never opened)", ["inspect", str(d)], "ok", isolate=True)
    k += 1
    d = _dir(work, f"c{k}", {"generation_config.json": b"\xff garbage"}, b.hf)
    yield Case("generation_config.json garbage (ignored)", ["inspect", str(d)], "ok")
    k += 1
    # random multi-key mutations: validity unknown, the promise still holds
    while k < n:
        cfg = dict(b.config)
        for _ in range(rng.randrange(1, 4)):
            key = rng.choice(list(_CONFIG_VALUES) + list(b.config))
            if rng.random() < 0.2:
                cfg.pop(key, None)
            else:
                cfg[key] = _junk_value(rng)
        d = _dir(work, f"c{k}", {"config.json": json.dumps(cfg)}, b.hf)
        yield Case(f"config random #{k}", ["inspect", str(d)], "any")
        k += 1


# ---------------------------------------------------------------- safetensors


def _st_bytes(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


@generator("safetensors", cases=200)
def gen_safetensors(rng: random.Random, b: Bases, work: Path, n: int):
    data = b.st[b.st_data_start:]
    names = sorted(k for k in b.st_header if k != "__metadata__")
    k = 0

    def case(label, raw, expect, needle=None):
        nonlocal k
        d = _dir(work, f"s{k}", {"model.safetensors": raw}, b.hf)
        k += 1
        return Case(f"safetensors {label}", ["inspect", str(d)], expect, needle=needle)

    for value in (float("nan"), float("inf"), float("-inf")):  # non-finite weights, named
        for _ in range(4):
            name = rng.choice(names)
            start, end = b.st_header[name]["data_offsets"]
            i = rng.randrange((end - start) // 4)
            buf = bytearray(data)
            struct.pack_into("<f", buf, start + 4 * i, value)
            yield case(f"{value} in {name}[{i}]", b.st[:b.st_data_start] + bytes(buf), "error", needle=name)
    for dtype in ("I8", "I32", "U8", "BOOL", "I64", "XX", "F8_E4M3", 5):
        h = json.loads(json.dumps(b.st_header))
        h[rng.choice(names)]["dtype"] = dtype
        yield case(f"dtype {dtype}", _st_bytes(h, data), "error")
    yield case("empty", b"", "error")
    yield case("8 bytes", b.st[:8], "error")
    yield case("header length huge", struct.pack("<Q", 2**63) + b.st[8:], "error")
    yield case("header length 0", struct.pack("<Q", 0) + b.st[8:], "error")
    yield case("header length past end", struct.pack("<Q", len(b.st)) + b.st[8:], "error")
    yield case("header not json", struct.pack("<Q", 4) + b"{{{{" + data, "error")
    yield case("header deep", _st_bytes({"a": json.loads(_deep(500))}, b""), "error")
    # whole-file FIFO, directory
    yield from _fifo_and_directory(work, b, f"s{k}", f"s{k + 1}", "model.safetensors", "safetensors FIFO",
                                   "safetensors is a directory")
    k += 2
    d = _dir(work, f"s{k}", {"model.safetensors.index.json": _deep(100000)}, b.hf)
    yield Case("shard index deeply nested", ["inspect", str(d)], "error", needle="index")
    k += 1
    d = _dir(work, f"s{k}", {"model.safetensors.index.json": json.dumps({"weight_map": {"x": 5}})}, b.hf)
    yield Case("shard index wrong types", ["inspect", str(d)], "error", needle="index")
    k += 1
    # a RoPE inv_freq buffer: not read as a weight, checked against rope_theta (frontends/derived.py)
    from safetensors.numpy import save as st_save

    inv = (1.0 / 10000.0 ** (np.arange(0, HD, 2) / HD)).astype(np.float32)
    for label, value, expect in (("as transformers computes it", inv, "ok"),
                                 ("of theta 500000", (1.0 / 500000.0 ** (np.arange(0, HD, 2) / HD)).astype(np.float32),
                                  "error"),
                                 ("zeros", np.zeros_like(inv), "error"), ("too long", np.ones(HD, np.float32), "error"),
                                 ("NaN", np.where(np.arange(inv.size) == 1, np.nan, inv).astype(np.float32), "error")):
        raw = st_save({**_hf_tensors(), "model.rotary_emb.inv_freq": value})
        yield case(f"inv_freq {label}", raw, expect, needle="model.rotary_emb.inv_freq" if expect == "error" else None)
    while k < n:
        r = rng.random()
        if r < 0.3:  # a bit flip in the data: valid iff every value stays finite
            buf = bytearray(data)
            pos = rng.randrange(len(buf))
            buf[pos] ^= 1 << rng.randrange(8)
            v = struct.unpack_from("<f", buf, pos - pos % 4)[0]
            c = case(f"flip data byte {pos}", b.st[:b.st_data_start] + bytes(buf),
                     "ok" if math.isfinite(v) else "error")
            if rng.random() < 0.3:  # through quantization and the quantized reference too
                c.argv = ["reference", c.argv[1], "--max-new-tokens", "2", "--prompt", "the cat"]
                c.id += " (reference)"
            yield c
        elif r < 0.45:
            yield case(f"truncated #{k}", b.st[:rng.randrange(len(b.st))], "error")
        elif r < 0.55:
            yield case(f"trailing bytes #{k}", b.st + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))),
                       "any")
        elif r < 0.75:  # header edits: shapes, offsets, names
            h = json.loads(json.dumps(b.st_header))
            name = rng.choice(names)
            what = rng.choice(["shape", "offsets", "drop", "rename", "junk"])
            if what == "shape":
                h[name]["shape"] = rng.choice([[1], [2**62, 2**62], [], [-1, 4], ["a"], list(reversed(h[name]["shape"]))])
            elif what == "offsets":
                s0, e0 = h[name]["data_offsets"]
                h[name]["data_offsets"] = rng.choice([[e0, s0], [0, 2**63], [-1, e0], [s0, e0 + 4], [s0 + 4, e0 + 4]])
            elif what == "drop":
                del h[name]
            elif what == "rename":
                h[name + ".extra"] = h.pop(name)
            else:
                h[name] = _junk_value(rng)
            expect = "any" if what == "shape" and h[name]["shape"] == b.st_header[name]["shape"] else "error"
            if what == "offsets":
                s0, e0 = b.st_header[name]["data_offsets"]
                s1, e1 = h[name]["data_offsets"]
                if e1 - s1 == e0 - s0:
                    expect = "any"  # the same size elsewhere: whether that is refused is the library's business
            yield case(f"header {what} {name} #{k}", _st_bytes(h, data), expect)
        else:  # random bytes in the header region
            buf = bytearray(b.st)
            for _ in range(rng.randrange(1, 6)):
                buf[rng.randrange(8, b.st_data_start)] = rng.randrange(256)
            yield case(f"header bytes #{k}", bytes(buf), "any")


# ------------------------------------------------------------- tokenizer.json


@generator("tokenizer_json", cases=120)
def gen_tokenizer_json(rng: random.Random, b: Bases, work: Path, n: int):
    base = json.loads(b.tok_json)
    k = 0

    def case(label, text, expect, needle=None, extra=None, cmd="inspect"):
        nonlocal k
        files = {"tokenizer.json": text}
        files.update(extra or {})
        d = _dir(work, f"t{k}", files, b.hf)
        k += 1
        argv = ["inspect", str(d)] if cmd == "inspect" else \
            ["reference", str(d), "--fp32", "--max-new-tokens", "2", "--prompt", "the cat"]
        return Case(f"tokenizer.json {label}", argv, expect, needle=needle)

    for extra in (1, 5, 40):  # more tokens than the model's 300: ids past the embedding
        t = json.loads(b.tok_json)
        for i in range(extra):
            t["model"]["vocab"][f"zz{i}"] = VOCAB + i
        yield case(f"{extra} tokens past vocab_size", json.dumps(t), "error", needle="vocab_size")
        yield case(f"{extra} tokens past vocab_size (reference)", json.dumps(t), "error", needle="vocab_size",
                   cmd="reference")
    for tid in (VOCAB, 10**6, 2**31):
        t = json.loads(b.tok_json)
        t["added_tokens"].append({"id": tid, "content": "<big>", "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
        yield case(f"added token id {tid}", json.dumps(t), "any" if tid >= 2**31 else "error")
    for label, raw, expect in _bad_json_texts(rng, b.tok_json):
        yield case(label, raw, expect, needle="tokenizer")
    d = _dir(work, f"t{k}", {"tokenizer.json": None}, b.hf)
    k += 1
    _fifo(d / "tokenizer.json")
    yield Case("tokenizer.json FIFO", ["inspect", str(d)], "error", needle="tokenizer", isolate=True)
    d = _dir(work, f"t{k}", {"tokenizer.json": None}, b.hf)
    k += 1
    (d / "tokenizer.json").mkdir()
    yield Case("tokenizer.json directory", ["inspect", str(d)], "error", needle="tokenizer")
    d = _dir(work, f"t{k}", {}, b.hf)
    k += 1
    _fifo(d / "tokenizer_config.json")
    yield Case("tokenizer_config.json FIFO (never opened)", ["inspect", str(d)], "ok", isolate=True)
    yield case("tokenizer_config.json garbage (ignored)", b.tok_json, "ok",
               extra={"tokenizer_config.json": b"\x00\xff" * 10})
    yield case("model type unknown", json.dumps({**base, "model": {**base["model"], "type": "Foo"}}), "error")
    while k < n:
        t = json.loads(b.tok_json)
        r = rng.random()
        if r < 0.35:
            vocab = t["model"]["vocab"]
            for key in rng.sample(sorted(vocab), rng.randrange(1, 20)):
                del vocab[key]
        elif r < 0.6:
            path = rng.choice([("model", "type"), ("model", "merges"), ("model", "vocab"), ("pre_tokenizer",),
                               ("decoder",), ("normalizer",), ("added_tokens",), ("post_processor",),
                               ("model", "unk_token"), ("model", "byte_fallback")])
            node = t
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = _junk_value(rng)
        elif r < 0.8:
            vocab = t["model"]["vocab"]
            key = rng.choice(sorted(vocab))
            vocab[key] = rng.choice([-1, VOCAB - 1, 0, 2**40, "x", None])
        else:
            merges = t["model"]["merges"]
            if merges:
                merges[rng.randrange(len(merges))] = _junk_value(rng)
        yield case(f"random #{k}", json.dumps(t), "any", cmd=rng.choice(["inspect", "reference"]))


# ------------------------------------------------------------ llama2.c model


@generator("llama2c_model", cases=200)
def gen_llama2c_model(rng: random.Random, b: Bases, work: Path, n: int):
    k = 0

    def case(label, raw, expect, needle=None):
        nonlocal k
        p = work / f"m{k}.bin"
        k += 1
        p.write_bytes(raw)
        return Case(f"llama2c {label}", ["inspect", str(p)], expect, needle=needle or p.name)

    for v, (good, spans) in b.l2c.items():
        yield case(f"v{v} valid", good, "ok")
        for value in (float("nan"), float("inf"), float("-inf")):
            for _ in range(3):  # NaN/Inf in a weight, a norm or (v2) a Q8_0 scale
                s0, e0, kind = rng.choice([s for s in spans if s[2] in ("f32", "scale")])
                buf = bytearray(good)
                struct.pack_into("<f", buf, s0 + 4 * rng.randrange((e0 - s0) // 4), value)
                yield case(f"v{v} {value} at {s0}", bytes(buf), "error", needle="non-finite")
        yield case(f"v{v} truncated by 1", good[:-1], "error", needle="truncated")
        yield case(f"v{v} trailing byte", good + b"\0", "error", needle="trailing")
        yield case(f"v{v} empty", b"", "error")
        hdr = 8 if v else 0
        for field_i, value in ((2, 10**9), (2, 2**31 - 1), (0, 1 << 20), (5, 2**31 - 1), (6, 2**31 - 1),
                               (1, 0), (3, -4), (4, 0)):
            buf = bytearray(good)
            struct.pack_into("<i", buf, hdr + 4 * field_i, value)
            yield case(f"v{v} header field {field_i}={value}", bytes(buf), "error")
    p = work / "fifo.bin"
    _fifo(p)
    yield Case("llama2c FIFO checkpoint", ["inspect", str(p)], "error", needle="fifo.bin", isolate=True)
    k += 1
    while k < n:
        v = rng.choice([0, 1, 2])
        good, spans = b.l2c[v]
        r = rng.random()
        buf = bytearray(good)
        if r < 0.45:  # bit flip in the payload: valid iff the flipped float stays finite
            s0, e0, kind = rng.choice(spans)
            pos = rng.randrange(s0, e0)
            buf[pos] ^= 1 << rng.randrange(8)
            if kind in ("f32", "scale"):
                x = struct.unpack_from("<f", buf, s0 + (pos - s0) // 4 * 4)[0]
                expect = "ok" if math.isfinite(x) else "error"
                if kind == "scale" and math.isfinite(x) and abs(x) * 127 > 3.4e38:
                    expect = "any"  # finite scale, but int8 * scale may overflow float32
            else:
                expect = "ok"  # int8 values and llama2.c's unused RoPE tables
            yield case(f"v{v} flip {pos}", bytes(buf), expect)
        elif r < 0.7:  # a header int to a random value
            hdr = 8 if v else 0
            fld = rng.randrange(7 if v == 0 else 9)
            val = rng.choice([0, -1, 1, 2, 3, 7, 8, 16, 31, 32, 33, 64, 300, 2**16, 2**20 + 1, 2**31 - 1, -2**31,
                              rng.randrange(-2**31, 2**31)])
            if fld < 7:
                struct.pack_into("<i", buf, hdr + 4 * fld, val)
            elif fld == 7:
                buf[36] = val & 0xFF  # shared_classifier flag
            elif v == 2:
                struct.pack_into("<i", buf, 37, val)  # group_size
            else:
                struct.pack_into("<i", buf, 4, val)  # version
            yield case(f"v{v} header #{k} field {fld}={val}", bytes(buf), "any")
        elif r < 0.85:
            yield case(f"v{v} truncated #{k}", good[:rng.randrange(len(good))], "error")
        else:
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            yield case(f"random bytes #{k}", junk, "any")


# -------------------------------------------------------- llama2.c tokenizer


def _entries(tok: bytes) -> list[tuple[int, int]]:
    """(offset of the entry's score, its length) for each entry."""
    out, off = [], 4
    while off < len(tok):
        (n,) = struct.unpack_from("<i", tok, off + 4)
        out.append((off, n))
        off += 8 + n
    return out


@generator("llama2c_tokenizer", cases=130)
def gen_llama2c_tokenizer(rng: random.Random, b: Bases, work: Path, n: int):
    model = work / "model.bin"
    model.write_bytes(b.l2c[1][0])
    good = b.l2c_tok
    entries = _entries(good)
    k = 0

    def case(label, raw, expect, prompt=None, needle=None):
        nonlocal k
        p = work / f"tok{k}.bin"
        k += 1
        if raw is not None:
            p.write_bytes(raw)
        argv = ["inspect", str(model), "--tokenizer", str(p)] if prompt is None else \
            ["reference", str(model), "--tokenizer", str(p), "--fp32", "--max-new-tokens", "2", "--prompt", prompt]
        return Case(f"tokenizer.bin {label}", argv, expect, needle=needle)

    yield case("valid", good, "ok")
    yield case("valid, prompt", good, "ok", prompt="the cat")
    yield case("100 KB prompt (was a quadratic hang)", good, "error", prompt="the cat " * 12800, needle="context")
    yield case("1 MB prompt of one letter", good, "error", prompt="a" * 1_000_000, needle="context")
    yield case("invalid UTF-8 prompt (lone surrogate)", good, "error", prompt="the \udcff cat", needle="UTF-8")
    yield case("empty prompt", good, "ok", prompt="")
    for cut in (258, 100, 3, 0):  # fewer than the 259 fixed pieces (and the model's 300)
        yield case(f"only {cut} entries", good[:entries[cut][0]] if cut else good[:4], "error")
    yield case("max_token_length 0", struct.pack("<i", 0) + good[4:], "error")
    yield case("max_token_length -5", struct.pack("<i", -5) + good[4:], "error")
    yield case("empty file", b"", "error")
    yield case("trailing entries ignored", good + good[4:200], "ok")
    p = work / "tokfifo.bin"
    _fifo(p)
    yield Case("tokenizer.bin FIFO", ["inspect", str(model), "--tokenizer", str(p)], "error", needle="tokfifo.bin", isolate=True)
    k += 1
    yield Case("tokenizer.bin missing", ["inspect", str(model), "--tokenizer", str(work / "none.bin")], "error")
    k += 1
    prompts = ["the cat", "", "a" * 20, "ünïcödé 🙂", "\x00\x01", "the cat " * 3, "<0x41>", "\n\n", "th"]
    while k < n:
        buf = bytearray(good)
        r = rng.random()
        i = rng.randrange(len(entries))
        off, length = entries[i]
        if r < 0.2:
            struct.pack_into("<i", buf, off + 4, rng.choice([-1, -2**31, 2**31 - 1, length + 10**6]))
            yield case(f"entry {i} length corrupt", bytes(buf), "error")
        elif r < 0.35:
            struct.pack_into("<f", buf, off, rng.choice([float("nan"), float("inf"), float("-inf"), 1e38]))
            yield case(f"entry {i} score non-finite", bytes(buf), "ok", prompt=rng.choice(prompts))
        elif r < 0.55:
            for j in range(length):
                buf[off + 8 + j] = rng.randrange(256)
            yield case(f"entry {i} random bytes", bytes(buf), "ok", prompt=rng.choice(prompts))
        elif r < 0.7:
            yield case(f"truncated #{k}", good[:rng.randrange(4, len(good))], "error")
        else:
            text = "".join(rng.choice("the cat a\u00e9\U0001F642\n ") for _ in range(rng.randrange(0, 60)))
            yield case(f"prompt #{k}", good, "any", prompt=text)


# --------------------------------------------------------------------- ONNX


@generator("onnx", cases=110)
def gen_onnx(rng: random.Random, b: Bases, work: Path, n: int):
    if b.onnx is None:
        return
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    base = onnx.load(str(b.onnx / "model.onnx"))
    raw = (b.onnx / "model.onnx").read_bytes()
    inits = {t.name: i for i, t in enumerate(base.graph.initializer)}
    k = 0

    def case(label, model_or_bytes, expect, needle=None):
        nonlocal k
        data = model_or_bytes if isinstance(model_or_bytes, bytes) else model_or_bytes.SerializeToString()
        d = _dir(work, f"o{k}", {"model.onnx": data}, b.onnx)
        k += 1
        return Case(f"onnx {label}", ["inspect", str(d)], expect, needle=needle)

    def copy():
        m = onnx.ModelProto()
        m.CopyFrom(base)
        return m

    yield case("valid", raw, "ok")
    inv_freq = [name for name in b.onnx_other_float if name.endswith("rotary_emb.inv_freq")]
    for name in inv_freq:  # the graph's cos/sin come from it; the compiler's from rope_theta: checked
        for label, change in (("NaN", lambda a: np.where(np.arange(a.size) == 2, np.nan, a)),
                              ("scaled", lambda a: a * 1.5), ("of theta 1e6", lambda a: a ** 1.5)):
            m = copy()
            t = m.graph.initializer[inits[name]]
            t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t)).astype(np.float32), t.name))
            yield case(f"{label} inv_freq {name}", m, "error", needle="inv_freq")
    for value in (np.nan, np.inf, -np.inf):
        for _ in range(3):
            m = copy()
            t = m.graph.initializer[inits[rng.choice(b.onnx_weights)]]
            a = numpy_helper.to_array(t).copy()
            a.reshape(-1)[rng.randrange(a.size)] = value
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            yield case(f"{value} in weight {t.name}", m, "error", needle="non-finite")
    for name in rng.sample(b.onnx_weights, min(6, len(b.onnx_weights))):  # integer weights: refused, not cast
        m = copy()
        t = m.graph.initializer[inits[name]]
        a = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array(np.round(a * 100).astype(rng.choice([np.int32, np.int64, np.int8])),
                                           t.name))
        yield case(f"integer initializer {name}", m, "error", needle=None)
    for name in rng.sample(b.onnx_weights, min(6, len(b.onnx_weights))):  # truncated raw data: reshape error
        m = copy()
        t = m.graph.initializer[inits[name]]
        if t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        else:
            del t.float_data[len(t.float_data) // 2:]
        yield case(f"truncated initializer {name}", m, "error", needle=name)
    m = copy()
    v = m.graph.node[len(m.graph.node) // 2].output[0]
    m.graph.node.append(helper.make_node("Identity", [v], [v], name="selfloop"))
    yield case("Identity self-loop", m, "any")
    m = copy()
    m.graph.node.append(helper.make_node("Identity", ["loop_a"], ["loop_b"]))
    m.graph.node.append(helper.make_node("Identity", ["loop_b"], ["loop_a"]))
    yield case("Identity cycle", m, "any")
    d = _dir(work, f"o{k}", {"model.onnx": None}, b.onnx)
    k += 1
    _fifo(d / "model.onnx")
    yield Case("model.onnx FIFO", ["inspect", str(d)], "error", needle="model.onnx", isolate=True)
    m = copy()  # a weight kept in an external data file that is a FIFO
    t = m.graph.initializer[inits[b.onnx_weights[0]]]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, val in (("location", "w.data"), ("offset", "0"), ("length", "64")):
        e = t.external_data.add()
        e.key, e.value = key, val
    d = _dir(work, f"o{k}", {"model.onnx": m.SerializeToString()}, b.onnx)
    k += 1
    _fifo(d / "w.data")
    yield Case("external data FIFO", ["inspect", str(d)], "error", needle="w.data", isolate=True)
    while k < n:
        r = rng.random()
        if r < 0.25:
            m = copy()
            del m.graph.node[rng.randrange(len(m.graph.node))]
            yield case(f"node removed #{k}", m, "any")
        elif r < 0.4:
            m = copy()
            node = m.graph.node[rng.randrange(len(m.graph.node))]
            if node.input and rng.random() < 0.5:
                del node.input[rng.randrange(len(node.input))]
            elif node.output:
                del node.output[:]
            yield case(f"node operands removed #{k}", m, "any")
        elif r < 0.55:
            m = copy()
            t = m.graph.initializer[rng.randrange(len(m.graph.initializer))]
            t.dims.extend([rng.choice([0, 1, 2, 7])]) if rng.random() < 0.5 else t.ClearField("dims")
            yield case(f"initializer dims #{k}", m, "any")
        elif r < 0.7:
            yield case(f"truncated file #{k}", raw[:rng.randrange(len(raw))], "any")
        elif r < 0.8 and b.onnx_other_float:
            m = copy()
            t = m.graph.initializer[inits[rng.choice(b.onnx_other_float)]]
            a = numpy_helper.to_array(t).copy()
            if a.size:
                a.reshape(-1)[rng.randrange(a.size)] = np.nan
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            # the RoPE inv_freq and the norm's eps are checked, the rest refused for NaN (onnx_model._other_constants)
            yield case(f"NaN in a non-weight constant {t.name} #{k}", m, "error" if a.size else "any")
        else:
            buf = bytearray(raw)
            for _ in range(rng.randrange(1, 8)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            yield case(f"random bytes #{k}", bytes(buf), "any")


# --------------------------------------------------------------- CLI values


def _float_ok(text: str, ok) -> bool:
    try:
        v = float(text)
    except ValueError:
        return False
    return math.isfinite(v) and ok(v)


def _int_ok(text: str, lo: int, hi: int) -> bool:
    try:
        v = int(text)
    except ValueError:
        return False
    return lo <= v <= hi


_FLOATS = ["nan", "NaN", "inf", "-inf", "1e-45", "1e-39", "1e-38", "1.2e-38", "0", "-0", "0.0", "1", "1.0",
           "0.5", "0.9", "1.0000001", "2", "100", "100.1", "1e308", "1e400", "-1", "abc", "", " ", "0x10", "1,5",
           "½", "0.001", "0.0009", "1e-3", "  0.7  ", "+0.8", "1_0"]
_INTS = ["0", "1", "-1", "64", "4294967295", "4294967296", "1000000000", "18446744073709551615",
         "18446744073709551616", "1e3", "abc", "", "0x10", "+5", " 7 ", "99999999999999999999999", "٣"]
_SIZES = ["512K", "512k", "512KB", "512KiB", "1M", "1m", "300000", "0", "-1K", "K", "", "1.5M", "abc", "12Q",
          "4G", "4096M", "4097M", "99999999999999999", "١٢٣", "  64K ", "1_000K", "64 K", "nan", "inf"]


@generator("cli_values", cases=160)
def gen_cli_values(rng: random.Random, b: Bases, work: Path, n: int):
    # the documented ranges (README, sampler.py), restated here as the test's own rule
    TEMPERATURE_MIN, TEMPERATURE_MAX, TOP_P_MIN = 1e-3, 100.0, float(np.finfo(np.float32).tiny)
    model = str(b.hf)
    ref = ["reference", model, "--fp32", "--max-new-tokens", "1", "--prompt", "the cat"]
    temp_ok = lambda v: v == 0 or TEMPERATURE_MIN <= v <= TEMPERATURE_MAX  # noqa: E731
    topp_ok = lambda v: TOP_P_MIN <= v <= 1  # noqa: E731
    k = 0
    for t in _FLOATS:
        yield Case(f"--temperature {t!r}", ref + ["--temperature", t], "ok" if _float_ok(t, temp_ok) else "error",
                   needle="--temperature" if not _float_ok(t, temp_ok) else None)
        yield Case(f"--top-p {t!r}", ref + ["--temperature", "1", "--top-p", t],
                   "ok" if _float_ok(t, topp_ok) else "error")
    for t in _INTS:
        yield Case(f"--max-new-tokens {t!r}", ["reference", model, "--fp32", "--prompt", "hi", "--max-new-tokens", t],
                   "ok" if _int_ok(t, 0, 2**32 - 1) else "error")
        yield Case(f"--seed {t!r}", ref + ["--temperature", "1", "--seed", t],
                   "ok" if _int_ok(t, 0, 2**64 - 1) else "error")
        yield Case(f"--max-seq {t!r}", ["plan", model, "--max-seq", t],
                   "ok" if _int_ok(t, 8, CTX) else ("any" if _int_ok(t, 1, 2**80) else "error"))
    for s in _SIZES:
        # reference used to ignore --ram-budget: now every command parses it
        yield Case(f"reference --ram-budget {s!r}", ref + ["--ram-budget", s], "any")
        yield Case(f"plan --ram-budget {s!r}", ["plan", model, "--ram-budget", s], "any")
    for bad in ("12Q", "", "abc", "-1K", "1.5M", "nan", "4097M"):
        yield Case(f"reference rejects --ram-budget {bad!r}", ref + ["--ram-budget", bad], "error",
                   needle="--ram-budget")
    for opt, vals in (("--group-size", ["16", "32", "64", "128", "x"]), ("--kv-bits", ["8", "4", "8:4", "2", "", "4:8", "8:8", "8:"]),
                      ("--board", ["host", "nope", "", "../boards/host", "qemu-mps2-an500"]),
                      ("--quant", ["group", "per-channel", "int8"]), ("--sampler", ["full", "greedy", "best"]),
                      ("--prefill-batch", ["auto", "1", "4", "0", "5", "-2", "2.0", "", "AUTO"])):
        for v in vals:
            valid = v in ("32", "64", "128", "8", "4", "8:4", "host", "qemu-mps2-an500", "group", "per-channel",
                          "full", "greedy", "auto", "1")
            argv = ["plan", model, opt, v] if opt not in ("--quant",) else ref + [opt, v]
            yield Case(f"{opt} {v!r}", argv, "ok" if valid else "error")
    for argv in (["compile", model], ["compile"], ["inspect"], ["nosuchcommand"], ["reference", model, "--bogus"],
                 ["inspect", model, "--json", "--json"], ["plan", model, "--board"], ["reference", model, "--prompt"],
                 ["inspect", str(work / "missing")], ["inspect", ""], ["inspect", "\x7f"], ["report", model],
                 ["build", str(work)], ["inspect", model, "--tokenizer", str(work)],
                 ["inspect", "m" * 300], ["inspect", str(work / ("m" * 300) / "x")], ["inspect", "/etc/passwd/x"],
                 ["inspect", model, "--tokenizer", "t" * 300], ["inspect", "/proc/self/mem"], ["inspect", "/dev/zero"],
                 ["inspect", str(work / "sloop")], ["report", "r" * 300], ["build", "b" * 300]):
        valid = argv == ["inspect", model, "--json", "--json"]
        yield Case(f"argv {argv[:3]!r}", list(argv), "ok" if valid else "error")
    os.symlink(work / "sloop", work / "sloop")
    calib_ok, calib_bin = work / "calib.txt", work / "calib.bin"
    calib_ok.write_text("the cat sat. " * 40)
    calib_bin.write_bytes(bytes(range(256)) * 8)
    fifo = _fifo(work / "calib.fifo")
    for path, expect in ((calib_ok, "ok"), (calib_bin, "error"), (fifo, "error"), (work, "error")):
        yield Case(f"--calibration {path.name}", ref[:2] + ["--max-new-tokens", "1", "--prompt", "the", "--quant",
                                                            "per-channel", "--calibration", str(path)], expect,
                   isolate=path == fifo)
    # garbage manifest.json / plan.json for build and report
    for i, content in enumerate([b"", b"[]", b"{}", b"\xff\xfe", _deep(100000).encode(), b'{"board": 5}',
                                 b'{"board": "host", "max_seq": 32, "tokenizer": {"kind": "hf", "file": "../x", '
                                 b'"vocab_size": 3}}']):
        d = work / f"out{i}"
        d.mkdir()
        (d / "manifest.json").write_bytes(content)
        yield Case(f"report with manifest {content[:20]!r}", ["report", str(d)], "error", needle="manifest")
        yield Case(f"build with manifest {content[:20]!r}", ["build", str(d)], "error", needle="manifest")
        yield Case(f"run with manifest {content[:20]!r}", ["run", str(d)], "error", needle="manifest")
    k = 1000
    while k < 1000 + max(0, n - 150):  # random combinations, validity from the rules above
        argv = list(ref)
        ok = True
        for opt, pool, rule in (("--temperature", _FLOATS, lambda t: _float_ok(t, temp_ok)),
                                ("--top-p", _FLOATS, lambda t: _float_ok(t, topp_ok)),
                                ("--seed", _INTS, lambda t: _int_ok(t, 0, 2**64 - 1))):
            if rng.random() < 0.5:
                v = rng.choice(pool)
                argv += [opt, v]
                ok = ok and rule(v)
        yield Case(f"random options #{k}", argv, "ok" if ok else "error")
        k += 1


# ---------------------------------------------------------------- -o paths


def _no_leftovers(parent: Path):
    def check(o: Outcome) -> str | None:
        try:
            left = [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
        except OSError:  # the parent is not a directory (or cannot even be named)
            return None
        return f"left behind in {parent}: {left}" if left else None
    return check


def _all(*checks):
    def check(o: Outcome) -> str | None:
        for c in checks:
            why = c(o)
            if why:
                return why
        return None
    return check


@generator("out_paths", cases=40)
def gen_out_paths(rng: random.Random, b: Bases, work: Path, n: int):
    model = str(b.hf)
    base = ["compile", model, "--board", "host", "-o"]

    def c(label, out: Path | str, expect, needle=None, extra_check=None):
        parent = Path(out).parent if str(out) else work
        checks = [_no_leftovers(parent)] + ([extra_check] if extra_check else [])
        return Case(f"-o {label}", base + [str(out)], expect, needle=needle, check=_all(*checks))

    yield c("new directory", work / "new", "ok")
    yield c("nested new directories", work / "a" / "b" / "c", "ok")
    prev = work / "prev"
    yield c("fresh output", prev, "ok")
    yield c("over an earlier output", prev, "ok")
    empty = work / "empty"
    empty.mkdir()
    yield c("empty directory", empty, "ok")
    foreign = work / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    yield c("non-empty foreign directory", foreign, "error", needle="not a tinyllm-gen output",
            extra_check=lambda o: None if (foreign / "notes.txt").read_text() == "keep" else "foreign file changed")
    target = work / "target"
    target.mkdir()
    link = work / "link"
    os.symlink(target, link)

    def link_kept(o: Outcome) -> str | None:
        if not link.is_symlink() or not (target / "manifest.json").is_file():
            return "the symlink was replaced or its target not written"
        return None
    yield c("symlink to a directory (written through)", link, "ok", extra_check=link_kept)
    yield c("symlink to a directory, again", link, "ok", extra_check=link_kept)
    dangling = work / "dangling"
    os.symlink(work / "nowhere", dangling)
    yield c("dangling symlink", dangling, "error", needle="symlink")
    afile = work / "afile"
    afile.write_text("x")
    yield c("an existing file", afile, "error", needle="not a directory")
    yield c("under an existing file", afile / "sub", "error", needle="not a directory")
    yield c("deep under an existing file", afile / "x" / "y", "error", needle="not a directory")
    filelink = work / "filelink"
    os.symlink(afile, filelink)
    yield c("symlink to a file", filelink, "error", needle="not a directory")
    for p in ("/proc/tinyllm-out", "/proc/self/x", "/sys/tinyllm-out", "/sys/kernel/x", "/dev/tinyllm-out",
              "/dev/null"):
        yield c(p, p, "error")
    yield c("component of 256 bytes", work / ("x" * 256), "error", needle="longer")
    yield c("component of 250 bytes", work / ("y" * 250), "error", needle="longer")
    yield c("component of 1000 bytes deeper", work / ("z" * 1000) / "out", "error", needle="longer")
    yield c("component of 200 bytes", work / ("w" * 200), "ok")
    yield c("non-ASCII name", work / "ünï 🙂 out", "ok")
    yield c("name with a newline", work / "new\nline", "ok")
    yield c("dot-dot path", work / "a" / ".." / "dd", "ok")
    loop = work / "loop"
    os.symlink(loop, loop)
    yield c("symlink loop", loop, "error")
    yield c("through a symlink loop", loop / "x", "error")
    k = 0
    while k + 27 < n:  # random names: printable, unicode, dots
        name = "".join(rng.choice("abc.-_ ü🙂é") for _ in range(rng.randrange(1, 30)))
        if name in (".", ".."):
            name = "n" + name
        yield c(f"random name #{k} {name!r}", work / "rand" / name, "any")
        k += 1


# ------------------------------------------------------------------ GGUF


def _gguf_tensor_offsets(path: Path) -> list[tuple[str, int, int, int]]:
    """(name, data offset, bytes, GGML type) of each tensor in a GGUF file."""
    import gguf

    r = gguf.GGUFReader(str(path))
    return [(t.name, int(t.data_offset), int(t.n_bytes), int(t.tensor_type)) for t in r.tensors]


@generator("gguf", cases=90)
def gen_gguf(rng: random.Random, b: Bases, work: Path, n: int):
    """model.gguf written from the base HF model (F32, F16), then
    truncated, bit-flipped in its header and metadata, given NaN norms,
    replaced by junk, or a FIFO."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        return
    from gguf_models import hf_to_gguf

    bases = {}
    for q in ("F32", "F16"):  # the base shapes (hidden 48) are not whole 32-blocks: no Q-types here
        p = hf_to_gguf(b.hf, work / f"base-{q}.gguf", q)
        bases[q] = (p.read_bytes(), _gguf_tensor_offsets(p))
    k = 0

    def case(label, raw, expect, needle=None):
        nonlocal k
        p = work / f"g{k}.gguf"
        k += 1
        p.write_bytes(raw)
        return Case(f"gguf {label}", ["inspect", str(p)], expect, needle=needle or p.name)

    for q, (good, tensors) in bases.items():
        yield case(f"{q} valid", good, "ok")
        yield case(f"{q} truncated by 1", good[:-1], "error")
        yield case(f"{q} header only", good[:24], "error")
        norms = [t for t in tensors if t[3] == 0 and "norm" in t[0]]  # F32 norm vectors
        for value in (float("nan"), float("inf")):
            name, off, nbytes, _ = rng.choice(norms)
            buf = bytearray(good)
            struct.pack_into("<f", buf, off + 4 * rng.randrange(nbytes // 4), value)
            yield case(f"{q} {value} in {name}", bytes(buf), "error", needle="non-finite")
    p = work / "fifo.gguf"
    _fifo(p)
    yield Case("gguf FIFO model", ["inspect", str(p)], "error", needle="fifo.gguf", isolate=True)
    k += 1
    # llama.cpp's RoPE frequency factors: all 1 is plain RoPE (accepted), anything else RoPE scaling
    for label, factors, expect in (("ones", np.ones(HD // 2), "ok"), ("llama3-like", np.array([1, 1, 2, 8]), "error"),
                                   ("NaN", np.array([1, np.nan, 1, 1]), "error"), ("too long", np.ones(HD), "error")):
        p = hf_to_gguf(b.hf, work / f"g{k}.gguf", "F32",
                       extra_tensors={"rope_freqs.weight": factors.astype(np.float32)})
        k += 1
        yield Case(f"gguf rope_freqs {label}", ["inspect", str(p)], expect, needle="rope_freqs" if expect == "error"
                   else None)
    while k < n:
        q = rng.choice(list(bases))
        good, tensors = bases[q]
        r = rng.random()
        if r < 0.5:  # a bit flip in the header or metadata: refused in one line, or still a valid model
            buf = bytearray(good)
            pos = rng.randrange(min(len(good), tensors[0][1]))
            buf[pos] ^= 1 << rng.randrange(8)
            yield case(f"{q} flip {pos}", bytes(buf), "any")
        elif r < 0.8:
            yield case(f"{q} truncated #{k}", good[:rng.randrange(len(good))], "error")
        else:
            junk = b"GGUF" + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 400)))
            yield case(f"junk #{k}", junk, "any")
