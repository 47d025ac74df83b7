"""Batched prefill (codegen/lower/prefill.py) in the host tier, on logits: a C
driver of our own (tests/c/prefill/prefill_logits.c) links a compiled
host tree and runs the same prompt through tllm_model_prefill (P tokens per
call, the engine's order) and through tllm_model_step one token at a time.
The last prompt token's logits and those of one decoded token after it
(which reads every position's k and v) are compared as float32 bit
patterns with each other and with the numpy reference's, for P = 2..4,
prompt lengths that leave a partial last batch, the portable q4 kernels,
the Cortex-M7 layout's C twin, llama.cpp's kept blocks, int8 and int4 KV,
and a weight stream (tllm_stream_matmat_q4x4's chunk copies)."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

from c_program import build_program
from firmware_harness import SHAPES, need
from tinymodels import make_hf_model
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels

pytestmark = pytest.mark.host

DRIVER = Path(__file__).resolve().parents[1] / "c" / "prefill" / "prefill_logits.c"
MAX_SEQ = 48
NEXT = 7  # the token decoded after the prompt
PROMPTS = ([5], [9, 4, 200], [1, 2, 3, 4, 5], [11, 22, 33, 44, 55, 66, 77, 88, 99, 111])  # 1, 3, 5, 10 tokens


def bits(text: str, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    v = np.array([int(x, 16) for x in text.split()], dtype=np.uint32)
    assert v.size == 2 * vocab
    return v[:vocab], v[vocab:]


def reference_bits(model_dir: Path, opts: CompileOptions, prompt: list[int]):
    m = load_model(model_dir)
    ex = Executor(m.graph, QuantKernels(quantize(m, opts), MAX_SEQ))
    for pos, t in enumerate(prompt):
        last = ex.step(t, pos, pos == len(prompt) - 1)
    nxt = ex.step(NEXT, len(prompt), True)
    return (np.asarray(last, np.float32).view(np.uint32), np.asarray(nxt, np.float32).view(np.uint32))


def model(root: Path, shape: str) -> Path:
    """A tiny HF folder, or (gguf-QTYPE[-EMBD]) the llama-tied-gqa one as a GGUF file."""
    if shape.startswith("gguf-"):
        from gguf_models import hf_to_gguf

        qtype, _, embd = shape[5:].partition("-")
        path = root / f"{shape}.gguf"
        return path if path.exists() else hf_to_gguf(model(root, "llama-tied-gqa"), path, qtype,
                                                     embd_qtype=embd or None)
    model_dir = root / f"model-{shape}"
    if not model_dir.exists():
        make_hf_model(model_dir, eos=None, **(ODD_ROWS if shape == "odd-rows" else SHAPES[shape]))
    return model_dir


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("prefill-logits")


CASES = [  # (shape, options)
    ("qwen2-bias-untied", dict(kernels="portable", prefill_batch=4)),  # biases, untied classifier
    ("qwen2-bias-untied", dict(kernels="cortex-m7", prefill_batch=3)),
    ("llama-hd8", dict(kernels="cortex-m7", prefill_batch=2, kv_bits=4)),
    ("llama-tied-gqa", dict(kernels="cortex-m7", prefill_batch=4, group_size=64)),
    ("qwen2-bias-untied", dict(kernels="cortex-m7", prefill_batch=4, stream="all", stream_chunk=1024)),
    ("odd-rows", dict(kernels="cortex-m7", prefill_batch=3)),  # K, V of 6 rows: the tile kernel's spill
    # llama.cpp's blocks kept as they are (tllm_matmat_q41 / q40 / q80), SmolLM2's mix: Q8_0 embedding
    ("gguf-Q4_1-Q8_0", dict(prefill_batch=4)),
    ("gguf-Q4_0", dict(prefill_batch=3)),
]
# head_dim 6 and one KV head: K and V are not whole 4-row tiles
ODD_ROWS = dict(arch="llama", dim=48, hidden=64, layers=2, heads=8, kv_heads=1, vocab=300, context=96, tied=True,
                seed=21)


@pytest.mark.parametrize("shape,opts", CASES, ids=[f"{s}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                                                   for s, o in CASES])
def test_batched_prefill_logits_equal_step_by_step_and_reference(root, shape, opts):
    need("cmake")
    need("gcc")
    model_dir = model(root, shape)
    o = CompileOptions(board="host", max_seq=MAX_SEQ, **opts)
    compiled = compile_path(model_dir, o)
    assert compiled.program.prefill_batch == opts["prefill_batch"]
    out = root / ("out-" + shape + "-" + "-".join(f"{k}{v}" for k, v in opts.items()))
    write_tree(compiled.tree, out)
    src = (out / "src" / "tllm_model.c").read_text()
    assert ("tllm_stream_matmat_q4x4(" if "stream" in opts else
            f"tllm_matmat_{shape[5:9].lower().replace('_', '')}(" if shape.startswith("gguf-") else
            "tllm_matmat_q4x4(" if opts["kernels"] == "cortex-m7" else "tllm_matmat_q4(") in src
    copy = out / "board" / "copy_sync.c"  # a weight stream's copy hooks (the host board's memcpy)
    exe = build_program(root / (out.name + "-driver"), "prefill_logits", DRIVER, {"model": out},
                        extra_sources=(copy,) if copy.is_file() else (), include_dirs=(out / "board",))
    vocab = compiled.program.config.vocab_size
    for prompt in PROMPTS:
        runs = {mode: bits(subprocess.run([str(exe), mode, str(NEXT), *map(str, prompt)], check=True,
                                          capture_output=True, text=True).stdout, vocab)
                for mode in ("batched", "steps")}
        want = reference_bits(model_dir, o, prompt)
        for mode, (last, nxt) in runs.items():
            assert np.array_equal(last, want[0]), (mode, len(prompt), int(np.sum(last != want[0])))
            assert np.array_equal(nxt, want[1]), (mode, len(prompt), int(np.sum(nxt != want[1])))
