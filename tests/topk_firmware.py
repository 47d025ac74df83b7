"""Compile -> build -> run helpers for the `--sampler topk:K` tests (host and
emulator tiers): the firmware's sampled tokens against the reference's (top_k=K; with a build's lookup guesses,
reference/speculative.py)."""
from __future__ import annotations

from pathlib import Path

from firmware_harness import SHAPES, SHAPES_CONTEXT, prompt_for, speculate_k
from tinymodels import make_hf_model
from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.reference.sampler import SamplingOptions
from bounds import BACKSTOP_S

N_NEW = 24
SAMPLINGS = [SamplingOptions(), SamplingOptions(0.9, 0.85, 1234), SamplingOptions(1.5, 1.0, 7),
             SamplingOptions(1.2, 0.5, 99)]


def model(root: Path, shape: str) -> Path:
    d = root / f"model-{shape}"
    if not d.exists():
        make_hf_model(d, eos=None, **SHAPES[shape])
    return d


def reference(model_path: Path, ids, sampling, k: int, guesses: int = 0) -> list[int]:
    """The reference's tokens of a topk:k build (guesses: its lookup guesses per pass, firmware_harness.speculate_k)."""
    m = load_model(model_path)
    ex = Executor(m.graph, QuantKernels(quantize(m, CompileOptions()), SHAPES_CONTEXT))
    if guesses:
        return generate_speculative(ex, ids, N_NEW, SHAPES_CONTEXT, m.graph.config.eos_ids, sampling, top_k=k,
                                    k=guesses).generated_ids
    return generate(ex, ids, N_NEW, SHAPES_CONTEXT, m.graph.config.eos_ids, sampling, top_k=k).generated_ids


def build_topk(root: Path, model_path: Path, tag: str, k: int, board: str = "host", **opts) -> Path:
    out = root / f"out-{tag}-{board}-k{k}"
    compiled = compile_path(model_path, CompileOptions(board=board, sampler=f"topk:{k}", **opts))
    write_tree(compiled.tree, out)
    build(out)
    return out


def check_all(out: Path, model_path: Path, k: int, samplings=SAMPLINGS) -> None:
    ids = prompt_for(model_path) if model_path.is_dir() else load_model(model_path).tokenizer.encode(
        "Once upon a time there was a cat")
    for sampling in samplings:
        fw = run_firmware(out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S)
        ref = reference(model_path, ids, sampling, k, speculate_k(out))
        assert len(ref) == N_NEW and fw.output.generated_ids == ref, sampling
        assert fw.output.canary_ok is True
