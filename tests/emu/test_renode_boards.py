"""The Renode tier (issue 23): both STM32H750 boards under Renode 1.15.1 with
OUT/renode/'s overlay, models and FPv5 workaround give the reference's tokens
(tolerance 0) for greedy and seeded top-p requests, in place and with
`--stream all` (the MDMA model moving the chunks), with int8 and int4 KV,
for the bundled model and a tiny GQA model; the bring-up takes the chip's
path (the QUADSPI model logs no command its flash would refuse); the
per-token instruction counts equal Unicorn's for the same build; the robot
test passes under renode-test with the reference's tokens.

Every Renode run is bounded in guest instructions (run_renode's
max_instructions: Renode's virtual time at the core clock; the robot's line
timeouts are virtual time too; Unicorn's count), with wall-clock backstops
far above the idle time (tests/bounds.py; a run takes 10-15 s). Skips
where `renode` is not on PATH."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import GREEDY, SHAPES, TOP_P, need
from tinymodels import make_hf_model
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import read_manifest
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.run.protocol import pack_request, parse_output
from tinyllm_gen.run.renode import find_renode, renode_missing_reason, run_renode, write_check

pytestmark = [pytest.mark.emu, pytest.mark.skipif(find_renode() is None, reason=renode_missing_reason())]

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
PROMPT = "Once upon a time"
N_NEW = 8
# Guest instructions per run: the bundled model's boot, 5-token prefill and 8 tokens take about 7 M, the
# streamed ones a little more; 25x that, so only a hung or runaway firmware meets it.
BUDGET = 200_000_000

# (model, board, --stream, --kv-bits, sampling): both boards with greedy and top-p, in place and streamed,
# int8 and int4 KV; the GQA model (4 heads, 2 KV heads) once on each board
CASES = [
    ("story", "weact-h750", "off", 8, GREEDY), ("story", "weact-h750", "off", 8, TOP_P),
    ("story", "weact-h750", "all", 4, GREEDY), ("story", "weact-h750", "all", 4, TOP_P),
    ("story", "stm32h750b-dk", "off", 4, GREEDY), ("story", "stm32h750b-dk", "off", 4, TOP_P),
    ("story", "stm32h750b-dk", "all", 8, GREEDY), ("story", "stm32h750b-dk", "all", 8, TOP_P),
    ("gqa", "weact-h750", "all", 8, TOP_P), ("gqa", "stm32h750b-dk", "off", 4, GREEDY),
]


def case_id(case) -> str:
    model, board, stream, kv, sampling = case
    mode, how = "stream" if stream == "all" else "inplace", "greedy" if sampling is GREEDY else "topp"
    return f"{model}-{board}-{mode}-kv{kv}-{how}"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("renode-tier")


def model_dir(root: Path, model: str) -> Path:
    if model == "story":
        return STORY
    path = root / "model-gqa"
    if not path.exists():
        make_hf_model(path, eos=None, **SHAPES["llama-tied-gqa"])
    return path


_built: dict = {}


def built(root: Path, model: str, board: str, stream: str, kv_bits: int) -> Path:
    key = (model, board, stream, kv_bits)
    if key not in _built:
        need("arm-none-eabi-gcc")
        need("cmake")
        out = root / f"out-{model}-{board}-{stream}-kv{kv_bits}"
        compiled = compile_path(model_dir(root, model), CompileOptions(board=board, stream=stream, kv_bits=kv_bits))
        write_tree(compiled.tree, out)
        build(out)
        _built[key] = out
    return _built[key]


def prompt_ids(out: Path) -> list[int]:
    from tinyllm_gen.run.backends import ModelInfo

    return ModelInfo.load(out).tokenizer.encode(PROMPT)


def reference(root: Path, model: str, out: Path, kv_bits: int, ids: list[int], sampling, n: int = N_NEW) -> list[int]:
    m = load_model(model_dir(root, model))
    max_seq = read_manifest(out)["max_seq"]
    qg = quantize(m, CompileOptions(kv_bits=kv_bits), max_seq=max_seq)
    return generate(Executor(m.graph, QuantKernels(qg, max_seq)), ids, n, max_seq, m.graph.config.eos_ids,
                    sampling).generated_ids


def renode(out: Path, board: str, ids: list[int], sampling, n: int = N_NEW, budget: int = BUDGET):
    request = out / "build" / "request.bin"
    request.write_bytes(pack_request(ids, n, sampling, 0))
    return run_renode(out, load_board(board), request, timeout_s=BACKSTOP_S, max_instructions=budget)


# the in-place greedy cases also compare their instruction counts with Unicorn's (fast there)
COUNTED = {("story", "weact-h750", "off", 8), ("story", "stm32h750b-dk", "off", 4)}


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_tokens_under_renode_are_the_references(root, case):
    model, board, stream, kv_bits, sampling = case
    out = built(root, model, board, stream, kv_bits)
    ids = prompt_ids(out)
    res = renode(out, board, ids, sampling)
    assert not res.timed_out and res.exit_code == 0, res.output[-800:]
    fw = parse_output(res.output)
    want = reference(root, model, out, kv_bits, ids, sampling)
    assert len(want) == N_NEW
    assert fw.generated_ids == want
    assert fw.canary_ok is True and fw.canary_regions and all(fw.canary_regions.values())
    assert fw.crc_errors == 0
    log = (out / "build" / "renode-log.txt").read_text(errors="replace")
    assert "FPv5 instructions run through thunks" in log
    for refused in ("Command decoding failed", "Unhandled parameterless command", "tllm-h750:"):
        assert refused not in log  # no flash command the chip would refuse, no model error
    if (model, board, stream, kv_bits) in COUNTED and sampling is GREEDY:
        assert_counts_equal_unicorns(out, board, fw)


def assert_counts_equal_unicorns(out: Path, board: str, under_renode) -> None:
    """Renode's CYCCNT (h750_dwt.py: executed instructions less the FPv5 thunks') and Unicorn's instruction
    count agree token for token on the same ELF and request (the one renode() last wrote)."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    from tinyllm_gen.run.unicorn import run_unicorn

    uni = run_unicorn(out / "build" / "firmware.elf", load_board(board), out / "weights.bin",
                      out / "build" / "request.bin", timeout_s=BACKSTOP_S, max_instructions=BUDGET)
    assert uni.exit_code == 0 and not uni.violations
    under_unicorn = parse_output(uni.output.decode())
    assert under_renode.generated_ids == under_unicorn.generated_ids
    assert under_renode.instructions_per_token == under_unicorn.instructions_per_token
    assert under_renode.prefill_instructions == under_unicorn.prefill_instructions
    assert all(400_000 < n < 700_000 for n in under_renode.instructions_per_token[1:])  # instructions, not quanta


def test_streamed_instruction_counts_equal_unicorns(root):
    """The same with --stream all, where the MDMA models of both emulators answer the polls alike (two
    tokens: Unicorn's MDMA model is slow)."""
    out = built(root, "story", "stm32h750b-dk", "all", 8)
    res = renode(out, "stm32h750b-dk", prompt_ids(out), GREEDY, n=2)
    assert res.exit_code == 0
    assert_counts_equal_unicorns(out, "stm32h750b-dk", parse_output(res.output))


def test_a_run_past_its_instruction_budget_is_timed_out(root):
    out = built(root, "story", "weact-h750", "off", 8)
    res = renode(out, "weact-h750", prompt_ids(out), GREEDY, n=64, budget=3_000_000)  # boot and part of prefill
    assert res.timed_out and res.exit_code < 0
    assert res.limit == "3,000,000 guest instructions"


@pytest.mark.skipif(shutil.which("renode-test") is None,
                    reason=f"renode-test is not on PATH; {renode_missing_reason()}")
@pytest.mark.parametrize("board,stream,kv_bits,sampling", [("weact-h750", "off", 8, GREEDY),
                                                           ("stm32h750b-dk", "all", 8, TOP_P)])
def test_robot_passes_under_renode_test(root, board, stream, kv_bits, sampling):
    """OUT/renode/tllm.robot: the bring-up reaches "@TLLM ready" with no model error, and (write_check) the
    request gives the reference's tokens line by line."""
    out = built(root, "story", board, stream, kv_bits)
    ids = prompt_ids(out)
    want = reference(root, "story", out, kv_bits, ids, sampling)
    robot = write_check(out, ids, N_NEW, sampling, want, "max_tokens")
    work = root / f"robot-{board}-{stream}"
    work.mkdir(exist_ok=True)  # renode-test writes its reports into the working directory
    proc = subprocess.run(["renode-test", str(robot)], capture_output=True, text=True, timeout=BACKSTOP_S, cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count("with status") == 2 and "Generates The Expected Tokens" in proc.stdout
