"""Prefill without the classifier (issue 13.5) in the firmware, counted under
QEMU with the tllm_icount plugin (exact instruction counts per function
between the engine's marks around every step).

The bundled 260K model: a prompt token before the last runs no classifier
instruction (greedy build: tllm_argmax_* never runs in those steps; full
build: their matvec instructions are the layers' alone, the classifier's
share less than the last prompt token's and every decode step's), and the
tokens are the reference's."""
from pathlib import Path

import pytest

from firmware_harness import need
from tinyllm_gen.bench.bench import _op_breakdown
from tinyllm_gen.bench.counting import run_counted
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import image_path
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.run.protocol import pack_request, parse_output
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions

pytestmark = pytest.mark.emu

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
N_NEW = 3
SAMPLING = SamplingOptions(0.9, 0.85, 77)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """sampler -> the bundled model's QEMU build (each built once for the module)."""
    root, outs = tmp_path_factory.mktemp("prefill"), {}

    def get(sampler: str, batch: int = 1):
        """batch: --prefill-batch (1: one tllm_model_step per prompt token, what the tests on the head count)."""
        need("arm-none-eabi-gcc")
        need("qemu-system-arm")
        key = (sampler, batch)
        if key not in outs:
            out = outs[key] = root / f"out-{sampler}-p{batch}"
            write_tree(compile_path(STORY, CompileOptions(sampler=sampler, max_seq=64, prefill_batch=batch)).tree, out)
            build(out)
        return outs[key]
    return get


def counted_run(out, sampling: SamplingOptions, batch: int = 1):
    m = load_model(STORY)
    prompt = m.tokenizer.encode("Once upon a time there was a cat")
    req = out / "build" / "req.bin"
    req.write_bytes(pack_request(prompt, N_NEW, sampling))
    board = load_board("qemu-mps2-an500")
    snaps = run_counted(image_path(out, board), board, out / "weights.bin", req)
    assert snaps.exit_code == 0, snaps.console
    ref = generate(Executor(m.graph, QuantKernels(quantize(m, CompileOptions()), 64)), prompt, N_NEW, 64,
                   m.graph.config.eos_ids, sampling).generated_ids
    assert parse_output(snaps.console).generated_ids == ref
    # marks: (before, after) per prefill call (`batch` prompt tokens), then one after its sampling; then
    # (before, after, after sample) per decode step
    n = -(-len(prompt) // batch)
    prompt_steps = [snaps.between(2 * i, 2 * i + 1) for i in range(n)]
    decode_steps = [snaps.between(2 * n + 1 + 3 * j, 2 * n + 2 + 3 * j) for j in range(N_NEW - 1)]
    return prompt_steps, decode_steps, m.graph.config


def test_greedy_classifier_runs_only_where_a_token_is_sampled(built):
    prompt_steps, decode_steps, _ = counted_run(built("greedy"), SamplingOptions())

    def argmax(fns):
        return sum(v for k, v in fns.items() if k.startswith("tllm_argmax"))

    assert len(prompt_steps) > 3 and all(argmax(s) == 0 for s in prompt_steps[:-1])
    assert argmax(prompt_steps[-1]) > 0 and all(argmax(s) == argmax(prompt_steps[-1]) for s in decode_steps)


def test_prompt_steps_before_the_last_skip_the_classifier(built):
    prompt_steps, decode_steps, c = counted_run(built("full"), SAMPLING)
    matvec = [_op_breakdown(s)["matvec"] for s in prompt_steps]
    body = matvec[0]
    assert all(mv == body for mv in matvec[:-1])  # data-independent kernels: the layers' matvecs alone
    head = matvec[-1] - body
    assert all(_op_breakdown(s)["matvec"] - body == head for s in decode_steps)
    # the classifier (vocab x dim) costs at least one instruction per MAC with the M7 kernels
    assert head >= c.vocab_size * c.dim


def test_bench_reports_the_prompts_instructions(built):
    """`tinyllm-gen bench`: the prompt before the measured decode step, the
    classifier only in its last step."""
    from tinyllm_gen.bench.bench import bench_decode, format_table

    result, snaps = bench_decode(built("full"), position=8)
    steps = [snaps.total_between(2 * i, 2 * i + 1) for i in range(8)]
    engine = result.prefill_instructions - sum(steps)  # the state machine between the steps
    assert 0 <= engine < 7 * 200
    assert steps[-1] - steps[-2] > 40_000  # the last step alone runs the 512x64 classifier
    assert f"the 8-token prompt before it {result.prefill_instructions:,}" in format_table(result)


def test_batched_prefill_reads_each_weight_once_per_batch(built):
    """--prefill-batch 4: the prompt's calls run tllm_matmat_q4x4 (the M7
    assembly) and no layer matvec; the last call alone runs the classifier
    (one matvec over the 512x64 table); the tokens are the reference's and the
    prompt costs fewer instructions than token by token (figures in README)."""
    one, _, c = counted_run(built("full", 1), SAMPLING)
    four, decode, _ = counted_run(built("full", 4), SAMPLING, batch=4)
    assert len(four) == -(-len(one) // 4) >= 2

    def calls(fns, prefix):
        return sum(v for k, v in fns.items() if k.startswith(prefix))

    assert all(calls(s, "tllm_matmat_q4x4") > 0 for s in four)
    assert all(calls(s, "tllm_matvec_q4x4") == 0 for s in four[:-1])
    assert calls(four[-1], "tllm_matvec_q4x4") == calls(decode[0], "tllm_matvec_q4x4") - calls(one[0], "tllm_matvec_q4x4")
    assert sum(map(lambda s: sum(s.values()), four)) < 0.9 * sum(map(lambda s: sum(s.values()), one))
