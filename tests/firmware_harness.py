"""Compile -> build -> run helpers shared by the host and emulator tiers."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import read_manifest
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.lower.speculate import built_k
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.reference.speculative import generate_speculative

from tinymodels import make_hf_model
from bounds import BACKSTOP_S

GREEDY = SamplingOptions()
TOP_P = SamplingOptions(temperature=0.9, top_p=0.85, seed=1234)

# Three shapes: a tied Llama with GQA, an untied Qwen2 with q/k/v biases
# whose hidden size leaves a short last group at group sizes 64 and 128, and
# stories260K's head geometry (head_dim 8: the attention kernels' own path).
SHAPES = {
    "llama-tied-gqa": dict(arch="llama", dim=64, hidden=96, layers=2, heads=4, kv_heads=2, vocab=300, context=96,
                           tied=True, seed=11),
    "qwen2-bias-untied": dict(arch="qwen2", dim=96, hidden=160, layers=3, heads=6, kv_heads=2, vocab=320,
                              context=96, tied=False, seed=12),
    "llama-hd8": dict(arch="llama", dim=64, hidden=96, layers=2, heads=8, kv_heads=4, vocab=300, context=96,
                      tied=True, seed=13),
    # head_dim 48: an int4 KV row holds two value groups of 24
    "llama-hd48": dict(arch="llama", dim=96, hidden=96, layers=2, heads=2, kv_heads=1, vocab=300, context=96,
                       tied=True, seed=14),
}
# int4 KV cache (--kv-bits 4): one GQA shape, one with biases and 3 layers,
# head_dim 8 and head_dim 48 (two KV groups per row).
KV4_CASES = [("llama-tied-gqa", 32), ("qwen2-bias-untied", 64), ("llama-hd8", 32), ("llama-hd48", 32)]
# what --kv-rotate auto picks for them: Hadamard where head_dim (16, 16, 8, 48) is a power of two
KV4_ROTATION = {"llama-tied-gqa": "hadamard", "qwen2-bias-untied": "hadamard", "llama-hd8": "hadamard",
                "llama-hd48": "off"}
CASES = [("llama-tied-gqa", 32), ("llama-tied-gqa", 64), ("qwen2-bias-untied", 64), ("qwen2-bias-untied", 128),
         ("llama-hd8", 32)]
N_NEW = 40


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (apt-get install gcc-arm-none-eabi qemu-system-arm)")


@dataclass(frozen=True)
class Built:
    model_dir: Path
    out: Path
    kv_bits: int = 8
    quant: str = "group"
    kv_rotate: str = "auto"  # --kv-rotate (int4 KV: auto is Hadamard where head_dim is a power of two)


def build_case(root: Path, shape: str, group: int, board: str, kv_bits: int | str = 8, kernels: str = "auto",
               quant: str = "group", cmsis_nn: Path | None = None, sampler: str = "full",
               kv_rotate: str = "auto") -> Built:
    model_dir = root / f"model-{shape}"
    if not model_dir.exists():
        make_hf_model(model_dir, eos=None, **SHAPES[shape])
    kv_tag = str(kv_bits).replace(":", "v")  # "8:4" -> "8v4": no colon in a build path
    out = root / (f"out-{shape}-g{group}-{board}-kv{kv_tag}-{kernels}-{quant}-{'cmsis' if cmsis_nn else 'own'}"
                  f"-{sampler}" + ("" if kv_rotate == "auto" else f"-rotate-{kv_rotate}"))
    compiled = compile_path(model_dir, CompileOptions(board=board, group_size=group, kv_bits=kv_bits,
                                                      kernels=kernels, quant=quant, sampler=sampler,
                                                      kv_rotate=kv_rotate))
    write_tree(compiled.tree, out)
    build(out, cmsis_nn)
    return Built(model_dir, out, kv_bits, quant, kv_rotate)


def rotation_of(out: Path) -> str:
    """An int4 tree's KV rotation as its manifest says, checked against the kernel its step calls."""
    rot = read_manifest(out)["options"]["kv_rotate"]
    step = "\n".join(p.read_text() for p in out.rglob("tllm_model*.c"))
    assert ("tllm_attention_kv4_hadamard(" in step) == (rot == "hadamard")
    return rot


def speculate_k(out: Path) -> int:
    """The lookup guesses per pass the build at out verifies (its manifest's options.speculate; 0: plain
    decoding).  Its greedy tokens are plain decoding's whatever k is; its sampled ones are
    reference/speculative.py's with this k (`compile --speculate auto` turns it on for the boards whose
    weights come over QUADSPI)."""
    return built_k(read_manifest(out)["options"])


def reference_tokens(model_dir: Path, group: int, prompt_ids: list[int], sampling: SamplingOptions,
                     max_seq: int, kv_bits: int = 8, quant: str = "group", k: int = 0,
                     kv_rotate: str = "auto") -> list[int]:
    """The reference's tokens: plain decoding, or with k > 0 speculative decoding as a build with
    --speculate lookup:k runs it (speculate_k)."""
    m = load_model(model_dir)
    qg = quantize(m, CompileOptions(group_size=group, kv_bits=kv_bits, quant=quant, kv_rotate=kv_rotate),
                  max_seq=max_seq)  # a centred int4 cache's centres are those of the build's context
    ex = Executor(m.graph, QuantKernels(qg, max_seq))
    if k:
        return generate_speculative(ex, prompt_ids, N_NEW, max_seq, m.graph.config.eos_ids, sampling,
                                    k=k).generated_ids
    return generate(ex, prompt_ids, N_NEW, max_seq, m.graph.config.eos_ids, sampling).generated_ids


def prompt_for(model_dir: Path) -> list[int]:
    return load_model(model_dir).tokenizer.encode("Once upon a time there was a cat")


def assert_identical(built: Built, group: int, sampling: SamplingOptions) -> list[int]:
    ids = prompt_for(built.model_dir)
    fw = run_firmware(built.out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S)
    ref = reference_tokens(built.model_dir, group, ids, sampling, SHAPES_CONTEXT, built.kv_bits, built.quant,
                           speculate_k(built.out), built.kv_rotate)
    assert len(ref) == N_NEW, "reference stopped early: the test would cover fewer than 40 tokens"
    assert fw.output.generated_ids == ref
    assert fw.output.canary_ok is True
    assert fw.output.canary_regions and all(fw.output.canary_regions.values())
    return fw.output.instructions_per_token


SHAPES_CONTEXT = 96


def build_c_harness(tmp: Path, source: str, kernel_file: str) -> Path:
    """A small C test driver linked with one runtime kernel file, built with
    the host gcc under the same float rules as the firmware (NUMERICS_CFLAGS).

    For a kernel against its numpy twin, add an entry to the kernel registry
    (tests/kernel_registry) instead: its one generated harness covers every
    kernel, and the completeness check knows about it."""
    import subprocess

    from tinyllm_gen.board import NUMERICS_CFLAGS
    from tinyllm_gen.resources import firmware_dir
    FIRMWARE = firmware_dir()

    need("gcc")
    (tmp / "h.c").write_text(source)
    exe = tmp / "h"
    subprocess.run(["gcc", "-O2", *NUMERICS_CFLAGS, "-Wall", "-Wextra", "-Werror",
                    "-I", str(FIRMWARE), str(tmp / "h.c"), str(FIRMWARE / kernel_file), "-lm", "-o", str(exe)],
                   check=True)
    return exe

