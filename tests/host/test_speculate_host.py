"""Speculative decoding in the host tier: firmware built with `--speculate
lookup:k` runs the verification pass (tllm_model_verify: the layers on the
batched prefill's buffers, the classifier batched over the positions) and
the engine's acceptance; its tokens are compared with the reference's.

* greedy requests: the firmware's tokens are plain decoding's
  (reference.executor.generate), bit for bit, and the speculative
  reference's (reference/speculative.py), for the greedy-only, top-K and
  full-sampler classifiers, int8 and int4 KV, the portable, Cortex-M7 C twin
  and llama.cpp's block kernels (kept, and in M7 tiles), a weight stream, and a context short
  enough that the generation runs into its end;
* sampled requests: the firmware's tokens and its passes over the weights
  (the console's "@TLLM pass" lines) are the speculative reference's for
  fixed seeds, and `run --check`'s reference (rebuilt from the tree, its k
  from the manifest) agrees."""
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import need
from test_prefill_logits import model
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions, top_k_of
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.run.check import check_tokens
from tinyllm_gen.run.firmware import run_firmware

pytestmark = pytest.mark.host

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
MAX_SEQ = 64
REPEATING = "Once upon a time there was a cat. The cat was happy. Once upon a time there was a"
SAMPLED = (SamplingOptions(0.8, 1.0, 5), SamplingOptions(1.0, 0.9, 1234))

CASES = [  # (model, options)
    ("story", dict(sampler="greedy", kernels="cortex-m7", speculate="lookup:3")),
    ("story", dict(sampler="full", kernels="portable", speculate="lookup:3", kv_bits=4)),
    ("story", dict(sampler="topk:8", kernels="cortex-m7", speculate="lookup:2", stream="all", stream_chunk=2048)),
    ("story", dict(sampler="full", kernels="cortex-m7", speculate="lookup:3", stream="all", stream_chunk=2048)),
    ("qwen2-bias-untied", dict(sampler="full", kernels="cortex-m7", speculate="lookup:3")),
    # SmolLM2's mix of blocks in M7 tiles (q41x4 / q80x4), the classifier streamed (tllm_stream_argmax_batch_ggufx4)
    ("gguf-Q4_1-Q8_0", dict(sampler="greedy", kernels="cortex-m7", speculate="lookup:3", kv_bits=4, stream="all",
                            stream_chunk=2048)),
    ("gguf-Q4_0", dict(sampler="topk:8", kernels="cortex-m7", speculate="lookup:1")),  # tllm_topk_batch_ggufx4
    ("gguf-Q4_0", dict(sampler="topk:8", kernels="portable", speculate="lookup:2")),  # the kept blocks' loop
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("speculate-host")


def model_dir(root: Path, name: str) -> Path:
    return STORY if name == "story" else model(root, name)


def prompts(m) -> list[list[int]]:
    """A prompt that repeats itself (the lookup draft guesses, the model often agrees) and one that does not."""
    if m.tokenizer is not None and m.graph.config.vocab_size == 512:
        return [m.tokenizer.encode(REPEATING), m.tokenizer.encode("Lily and Ben went to the park")]
    return [[5, 9, 4, 200, 7, 5, 9, 4, 200, 7, 5, 9], [11, 22, 33, 44]]


@pytest.mark.parametrize("name,opts", CASES, ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                                                 for n, o in CASES])
def test_speculative_firmware_is_the_reference(root, name, opts):
    need("cmake")
    need("gcc")
    path = model_dir(root, name)
    o = CompileOptions(board="host", max_seq=MAX_SEQ, **opts)
    compiled = compile_path(path, o)
    k = int(opts["speculate"].split(":")[1])
    assert compiled.program.speculate is not None and compiled.program.speculate.k == k
    out = root / ("out-" + name + "-" + "-".join(f"{a}{b}" for a, b in opts.items()).replace(":", ""))
    write_tree(compiled.tree, out)
    assert "float *tllm_model_verify(" in (out / "src" / "tllm_model.c").read_text()
    build(out)
    m = load_model(path)
    ex = Executor(m.graph, QuantKernels(quantize(m, o), MAX_SEQ))
    eos, top_k = m.graph.config.eos_ids, top_k_of(opts["sampler"])
    n_new = MAX_SEQ  # every generation that does not stop at EOS runs into the context's end
    requests = [SamplingOptions()] + ([] if opts["sampler"] == "greedy" else list(SAMPLED))
    multi_token_passes = 0
    prompts_of = prompts(m)
    for prompt in prompts_of:
        for sampling in requests:
            fw = run_firmware(out, prompt, n_new, sampling, timeout_s=BACKSTOP_S).output
            want = generate_speculative(ex, prompt, n_new, MAX_SEQ, eos, sampling, top_k, k)
            assert (fw.generated_ids, fw.stop_reason) == (want.generated_ids, want.stop_reason), (prompt, sampling)
            assert (fw.passes, fw.pass_tokens, fw.pass_positions) == (want.passes, want.pass_tokens,
                                                                       want.pass_positions)
            if sampling.temperature > 0 and name == "story" and prompt is prompts_of[0]:  # run --check's reference
                assert check_tokens(out, m.tokenizer, prompt, n_new, sampling, fw.generated_ids) is None
            if sampling.temperature == 0:
                plain = generate(ex, prompt, n_new, MAX_SEQ, eos, sampling, top_k)
                assert (fw.generated_ids, fw.stop_reason) == (plain.generated_ids, plain.stop_reason)
            assert fw.canary_ok is True
            multi_token_passes += sum(1 for t in fw.pass_tokens if t > 1)
    assert multi_token_passes > 0, "no pass accepted a guess: the verification's other positions went unchecked"
