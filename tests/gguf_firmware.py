"""Tiny GGUF models compiled with their llama.cpp blocks kept (--weight-quant
gguf, the default for GGUF inputs), built for a board, and the firmware's
tokens compared with QuantKernels' (host and QEMU tiers)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from firmware_harness import N_NEW, SHAPES_CONTEXT
from gguf_models import hf_to_gguf
from tinymodels import make_hf_model
from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from bounds import BACKSTOP_S

# (name, arch, model kwargs, matrices' qtype, embedding's qtype)
GGUF_CASES = {
    "llama-q4_1-embd-q8_0": ("llama", dict(seed=1, tied=True), "Q4_1", "Q8_0"),  # SmolLM2's mix, tied classifier
    "llama-q4_0": ("llama", dict(seed=2, tied=True), "Q4_0", None),
    "qwen2-q8_0-untied": ("qwen2", dict(seed=3, tied=False), "Q8_0", None),  # biases, separate classifier
    "qwen2-q4_1-untied": ("qwen2", dict(seed=4, tied=False), "Q4_1", None),
    # the embedding scaled by 1e-3 (untied, so the classifier is not): its Q8_0 d are fp16 subnormals,
    # which the M7's VCVTB must convert exactly (a flush to zero would make x0 = 0); RMSNorm undoes the scale
    "qwen2-q8_0-subnormal-embd": ("qwen2", dict(seed=5, tied=False), "Q4_1", "Q8_0"),
}
SCALED_EMBEDDING = {"qwen2-q8_0-subnormal-embd": 1e-3}


def subnormal_fp16_fields(path: Path) -> int:
    """How many d/m fields of the kept blocks are fp16 subnormals."""
    qg = quantize(load_model(path), CompileOptions())
    n = 0
    for t in qg.gguf.values():
        b = t.data.reshape(t.rows, t.n_blocks, -1)
        for f in [b[:, :, 0:2]] + ([b[:, :, 2:4]] if t.qtype == "Q4_1" else []):
            h = f.copy().view("<u2").reshape(-1)
            n += int(((((h >> 10) & 0x1F) == 0) & ((h & 0x3FF) != 0)).sum())
    return n


def gguf_case(root: Path, case: str) -> Path:
    arch, kw, qtype, embd = GGUF_CASES[case]
    path = root / f"{case}.gguf"
    if not path.exists():
        model_dir = make_hf_model(root / f"hf-{case}", arch, eos=None, context=SHAPES_CONTEXT, **kw)
        if case in SCALED_EMBEDDING:
            from safetensors.numpy import load_file, save_file

            sd = load_file(str(model_dir / "model.safetensors"))
            sd["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"] * np.float32(SCALED_EMBEDDING[case])
            save_file(sd, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
        hf_to_gguf(model_dir, path, qtype, embd_qtype=embd)
    return path


def build_gguf(root: Path, case: str, board: str, sampler: str = "full", **options) -> tuple[Path, Path]:
    """Compile CASE for BOARD (CompileOptions' other fields in OPTIONS) and build it."""
    path = gguf_case(root, case)
    tag = "-".join(f"{k}={v}" for k, v in sorted(options.items()))
    out = root / f"out-{case}-{board}-{sampler}{'-' + tag if tag else ''}"
    compiled = compile_path(path, CompileOptions(board=board, sampler=sampler, **options))
    assert compiled.qgraph.method == "gguf" and compiled.qgraph.gguf
    write_tree(compiled.tree, out)
    build(out)
    return path, out


def assert_gguf_identical(path: Path, out: Path, sampling, **options) -> list[int]:
    """The firmware in OUT gives QuantKernels' tokens for the model quantized with OPTIONS."""
    m = load_model(path)
    ids = m.tokenizer.encode("Once upon a time there was a cat")
    fw = run_firmware(out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S)
    qg = quantize(m, CompileOptions(**options))
    ref = generate(Executor(m.graph, QuantKernels(qg, SHAPES_CONTEXT)), ids, N_NEW, SHAPES_CONTEXT,
                   m.graph.config.eos_ids, sampling).generated_ids
    assert len(ref) == N_NEW
    assert fw.output.generated_ids == ref
    assert fw.output.canary_ok is True
    return fw.output.instructions_per_token
