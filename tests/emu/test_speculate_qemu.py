"""Speculative decoding on the Cortex-M7 (QEMU mps2-an500, the M7 assembly
of the batched kernels) and on the STM32H750B-DK under Unicorn with the
weight stream (MDMA into DTCM, `--stream all`): the firmware's tokens are
plain decoding's for greedy requests and the speculative reference's for
sampled ones, int8 and int4 KV, a context the generation runs into the end
of; and, counted exactly with the tllm_icount plugin, a verification pass
over P positions costs fewer instructions than P decode steps (the weights
are unpacked once for the P)."""
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import need
from tinyllm_gen.bench.counting import run_counted
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import image_path
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions, top_k_of
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import pack_request, parse_output

pytestmark = pytest.mark.emu

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
REPEATING = "Once upon a time there was a cat. The cat was happy. Once upon a time there was a"
MAX_SEQ = 64
SAMPLED = SamplingOptions(0.9, 0.85, 1234)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("speculate-emu")


def built(root: Path, board: str, **opts) -> Path:
    need("arm-none-eabi-gcc")
    need("cmake")
    out = root / (board + "-" + "-".join(f"{k}{v}" for k, v in opts.items()).replace(":", ""))
    if not (out / "build").is_dir():
        compiled = compile_path(STORY, CompileOptions(board=board, max_seq=MAX_SEQ, **opts))
        assert compiled.program.speculate is not None
        write_tree(compiled.tree, out)
        build(out)
    return out


def check(out: Path, opts: dict, samplings, texts=(REPEATING, "Lily and Ben"), n_new: int = MAX_SEQ) -> None:
    """The firmware's tokens and passes against the speculative reference's (greedy: plain decoding's too);
    n_new = MAX_SEQ runs every generation that does not stop at EOS into the context's end."""
    m = load_model(STORY)
    kv = opts.get("kv_bits", 8)
    ex = Executor(m.graph, QuantKernels(quantize(m, CompileOptions(kv_bits=kv), max_seq=MAX_SEQ), MAX_SEQ))
    k, top_k = int(opts["speculate"].split(":")[1]), top_k_of(opts.get("sampler", "full"))
    eos = m.graph.config.eos_ids
    for text in texts:
        ids = m.tokenizer.encode(text)
        for sampling in samplings:
            fw = run_firmware(out, ids, n_new, sampling, timeout_s=BACKSTOP_S).output
            want = generate_speculative(ex, ids, n_new, MAX_SEQ, eos, sampling, top_k, k)
            assert (fw.generated_ids, fw.stop_reason) == (want.generated_ids, want.stop_reason), (text, sampling)
            assert (fw.pass_tokens, fw.pass_positions) == (want.pass_tokens, want.pass_positions)
            if sampling.temperature == 0:
                assert fw.generated_ids == generate(ex, ids, n_new, MAX_SEQ, eos, sampling, top_k).generated_ids
            assert fw.canary_ok is True


QEMU_CASES = [dict(sampler="greedy", speculate="lookup:3"), dict(sampler="full", speculate="lookup:3", kv_bits=4),
              dict(sampler="topk:8", speculate="lookup:2", stream="all", stream_chunk=2048)]


@pytest.mark.parametrize("opts", QEMU_CASES, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_speculative_firmware_under_qemu(root, opts):
    need("qemu-system-arm")
    out = built(root, "qemu-mps2-an500", **opts)
    check(out, opts, [SamplingOptions()] + ([] if opts["sampler"] == "greedy" else [SAMPLED]))


# Unicorn runs the firmware at about 17 M instructions a second, its MDMA and QUADSPI models in Python: the DK
# (the WeAct's stream is the same firmware; 150 s there for the full sampler), the repeating prompt, H750_NEW
# tokens (QEMU above covers the context's end)
H750_CASES = [("stm32h750b-dk", dict(sampler="topk:8", speculate="lookup:3", stream="all", kv_bits=4))]
H750_NEW = 16


@pytest.mark.parametrize("board,opts", H750_CASES, ids=[f"{b}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                                                        for b, o in H750_CASES])
def test_speculative_firmware_on_the_h750_boards_under_unicorn(root, board, opts):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    out = built(root, board, **opts)
    check(out, opts, [SamplingOptions(), SAMPLED], texts=(REPEATING,), n_new=H750_NEW)


def test_a_verification_pass_costs_less_than_its_positions_as_steps(root):
    """Instructions per pass against per token, exact: the engine marks every model call (before, after, after
    its sampling); a pass verifying P positions is compared with the plain decode steps of the same run."""
    need("qemu-system-arm")
    out = built(root, "qemu-mps2-an500", sampler="greedy", speculate="lookup:3")
    m = load_model(STORY)
    ids = m.tokenizer.encode(REPEATING)
    req = out / "build" / "req-counted.bin"
    req.write_bytes(pack_request(ids, 24, SamplingOptions()))
    board = load_board("qemu-mps2-an500")
    snaps = run_counted(image_path(out, board), board, out / "weights.bin", req)
    assert snaps.exit_code == 0, snaps.console
    o = parse_output(snaps.console)
    n_prefill = -(-len(ids) // 4)  # two marks per prefill call, then one after the first token's sampling
    first = 2 * n_prefill + 1
    cost = {}  # positions -> the model call's instructions, each pass after the prompt's
    for j, p in enumerate(o.pass_positions[1:]):
        cost.setdefault(p, []).append(snaps.total_between(first + 3 * j, first + 3 * j + 1))
    assert 1 in cost and max(cost) >= 3, cost
    step = min(cost[1])
    for p, runs in cost.items():
        if p > 1:
            assert max(runs) < p * step, (p, runs, step)  # each weight unpacked once for the P positions
