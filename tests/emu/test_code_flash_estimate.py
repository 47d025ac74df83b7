"""The code-flash estimate (plan/codesize.py) against arm-none-eabi-size of
real builds: never below the image, at most ERROR_BOUND_BYTES above, for
each kernel set, weight layout (q4x4, kept GGUF rows and tiles), KV
precision, sampler, stream mode, prefill batch and board kind."""
import json
import subprocess
import sys

import pytest

from firmware_harness import need
from gguf_models import hf_to_gguf
from tinymodels import make_hf_model
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.plan.codesize import ERROR_BOUND_BYTES
from tinyllm_gen.plan.elfsize import elf_usage

pytestmark = pytest.mark.emu

CASES = [  # (id, model, options)
    ("m7-1-layer", dict(layers=1), dict(board="stm32h750b-dk")),
    ("m7-12-layers-kv4-greedy", dict(layers=12), dict(board="stm32h750b-dk", kv_bits=4, sampler="greedy")),
    ("m7-12-layers-kv4-unrotated", dict(layers=12), dict(board="stm32h750b-dk", kv_bits=4, kv_rotate="off",
                                                         sampler="greedy")),
    ("qwen2-untied-stream", dict(layers=4, arch="qwen2", dim=96, tied=False), dict(board="stm32h750b-dk", stream="all")),
    ("m7-16-layers-stream", dict(layers=16), dict(board="stm32h750b-dk", stream="all")),
    ("gguf-q4_1-portable", dict(layers=8, gguf="Q4_1"), dict(board="stm32h750b-dk", kernels="portable")),
    ("gguf-q4_1-tiled-stream-auto", dict(layers=8, gguf="Q4_1"), dict(board="stm32h750b-dk")),
    ("gguf-q4_1-q8_0-greedy", dict(layers=8, gguf="Q4_1", embd="Q8_0"), dict(board="stm32h750b-dk", sampler="greedy")),
    ("gguf-q4_1-classifier-q4", dict(layers=8, gguf="Q4_1", embd="Q8_0"), dict(board="stm32h750b-dk",
                                                                                classifier_quant="q4")),
    ("gguf-q8_0-untied-stream-all", dict(layers=4, arch="qwen2", dim=128, tied=False, gguf="Q8_0"),
     dict(board="stm32h750b-dk", stream="all")),
    ("gguf-q4_0-qemu", dict(layers=8, gguf="Q4_0"), dict(board="qemu-mps2-an500")),
    ("gguf-q4_0-weact-stream-off-p1", dict(layers=8, gguf="Q4_0"), dict(board="weact-h750", stream="off",
                                                                         prefill_batch=1)),
    ("qemu-24-layers", dict(layers=24), dict(board="qemu-mps2-an500")),
    ("m7-16-layers-stream-unrolled", dict(layers=16), dict(board="stm32h750b-dk", stream="all", unroll_layers=True)),
    ("qwen2-untied-stream-unrolled", dict(layers=4, arch="qwen2", dim=96, tied=False),
     dict(board="stm32h750b-dk", stream="all", unroll_layers=True)),
    ("qemu-24-layers-unrolled", dict(layers=24), dict(board="qemu-mps2-an500", unroll_layers=True)),
    # speculative decoding (--speculate lookup:k): tllm_model_verify and the head's batched forms, on a shape
    # above (an 8- or 12-layer model is over by 4 to 6 KiB with or without speculation)
    ("m7-16-layers-stream-speculate", dict(layers=16), dict(board="stm32h750b-dk", stream="all", speculate="lookup:3")),
    ("m7-16-layers-stream-topk-speculate", dict(layers=16), dict(board="stm32h750b-dk", stream="all", sampler="topk:8",
                                                                 speculate="lookup:3")),
    ("m7-8-layers-kv4-roll", dict(layers=8), dict(board="stm32h750b-dk", kv_bits=4, context_policy="roll")),
    ("m7-12-layers-k8v4-greedy", dict(layers=12), dict(board="stm32h750b-dk", kv_bits="8:4", sampler="greedy")),
    ("m7-8-layers-k8v4-roll", dict(layers=8), dict(board="stm32h750b-dk", kv_bits="8:4", context_policy="roll")),
    ("qemu-1-layer-roll", dict(layers=1), dict(board="qemu-mps2-an500", context_policy="roll:2")),
]


def model(root, layers, arch="llama", dim=64, tied=True, gguf=None, embd=None):
    d = root / f"{arch}-{layers}-{dim}-{tied}"
    if not d.exists():
        make_hf_model(d, arch, eos=None, dim=dim, hidden=dim * 3 // 2, layers=layers, heads=4, kv_heads=2,
                      vocab=300, context=64, tied=tied, seed=5)
    return hf_to_gguf(d, root / f"{d.name}-{gguf}-{embd}.gguf", gguf, embd_qtype=embd) if gguf else d


@pytest.mark.parametrize("case,shape,opts", CASES, ids=[c[0] for c in CASES])
def test_code_flash_estimate_bounds_the_built_image(tmp_path, case, shape, opts):
    need("arm-none-eabi-gcc")
    need("cmake")
    m = model(tmp_path, **shape)
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in opts.items()]
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(m), "--json", *flags],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    estimate = json.loads(proc.stdout)["code_flash_bytes"]
    out = tmp_path / "out"
    write_tree(compile_path(m, CompileOptions(**opts)).tree, out)
    build(out)
    report = json.loads((out / "report.json").read_text())
    built = elf_usage(out / "build" / "firmware.elf", load_board(opts["board"]), report)["flash_bytes"]
    assert 0 <= estimate - built <= ERROR_BOUND_BYTES, (case, estimate, built)
