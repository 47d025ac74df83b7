"""Multi-turn KV reuse on the Cortex-M7 (QEMU mps2-an500, UART0 on a socket,
one firmware for the whole conversation) and on the STM32H750 image under
Unicorn (the WeAct board; the five requests over its console USART): five
turns, each after the first a continue carrying only the new turn's ids,
give the tokens of one fresh request of the whole conversation so far
(teacher-forcing the same turns) and of the reference's Session; on QEMU a
continue's prefill, counted by the board (guest instructions), costs a
fraction of the fresh request's, and a continue naming another history is
refused with status 6 and sent fresh; serve's and chat's backend keeps the
H750 image up under Unicorn between requests and continues there too."""
from __future__ import annotations

from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import GREEDY, TOP_P, need
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import image_path
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.reference.executor import Executor, QuantKernels
from tinyllm_gen.reference.session import Session
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.run.backends import SessionBackend, open_backend
from tinyllm_gen.run.check import tree_reference
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import REQUEST_EXIT_AFTER, history_crc, pack_request, parse_output
from tinyllm_gen.run.qemu import qemu_uart_session
from tinyllm_gen.run.session import DeviceSession
from tinyllm_gen.run.unicorn import run_unicorn_board

pytestmark = pytest.mark.emu

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
MAX_SEQ = 128
N = 8
TURNS_TEXT = ("Once upon a time there was a cat.", " The cat saw a dog.", " They played in the park.",
              " Then it rained.", " The end.")


def built(root: Path, board: str):
    need("arm-none-eabi-gcc")
    need("cmake")
    compiled = compile_path(STORY, CompileOptions(board=board, max_seq=MAX_SEQ))
    out = root / board
    write_tree(compiled.tree, out)
    build(out)
    tok = compiled.model.tokenizer
    return out, [tok.encode(t, bos=i == 0) for i, t in enumerate(TURNS_TEXT)]


def reference(out: Path):
    qg, m = tree_reference(out)
    return Executor(qg.graph, QuantKernels(qg, int(m["max_seq"]))), qg.config.eos_ids


@pytest.mark.parametrize("sampling", [GREEDY, TOP_P], ids=["greedy", "top-p"])
def test_five_turns_on_qemu_continue_and_equal_one_long_request(tmp_path, sampling):
    need("qemu-system-arm")
    out, turns = built(tmp_path, "qemu-mps2-an500")
    ex, eos = reference(out)
    ref, fresh_ex = Session(ex, MAX_SEQ, eos), reference(out)[0]
    board = load_board("qemu-mps2-an500")
    notes: list[str] = []
    conversation: list[int] = []
    with qemu_uart_session(image_path(out, board), board, out / "weights.bin") as (port, _proc):
        session = DeviceSession(port, BACKSTOP_S, note=notes.append)
        for i, turn in enumerate(turns):
            prompt = conversation + turn
            t = session.generate(prompt, N, sampling)
            assert t.status == 0 and t.reused == (len(conversation) - 1 if i else 0)
            got = t.output.generated_ids
            assert got == ref.generate(turn, N, sampling).generated_ids
            assert got == generate_speculative(fresh_ex, prompt, N, MAX_SEQ, eos, sampling).generated_ids
            conversation = prompt + got
            assert t.output.history == (len(conversation), history_crc(conversation))
        # the last turn's prefill as a continue against one fresh request of the whole conversation
        fresh = run_firmware(out, prompt, N, sampling, timeout_s=BACKSTOP_S).output
        assert fresh.generated_ids == got
        assert t.output.prefill_instructions * 2 < fresh.prefill_instructions, \
            (t.output.prefill_instructions, fresh.prefill_instructions, len(turn), len(prompt))
        # out of step: refused with its own status, one line, the same prompt fresh
        session.held[0] ^= 1
        t = session.generate(session.held + turns[1], N, sampling)
        assert t.status == 0 and t.reused == 0 and "holds another conversation" in t.refused
    assert len(notes) == 1


def test_five_turns_on_the_h750_under_unicorn(tmp_path):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    out, turns = built(tmp_path, "weact-h750")
    ex, eos = reference(out)
    ref = Session(ex, MAX_SEQ, eos)
    # the whole conversation's requests up front (the console USART's input): the reference's tokens name each
    # continue's history, so a board that generated anything else refuses the next turn
    frames, wants = [], []
    for i, turn in enumerate(turns):
        held = list(ref.tokens)
        wants.append(ref.generate(turn, N, GREEDY).generated_ids)
        flags = REQUEST_EXIT_AFTER if i == len(turns) - 1 else 0
        frames.append(pack_request(turn, N, GREEDY, flags, history=held if i else None))
    board = load_board("weact-h750")
    res = run_unicorn_board(image_path(out, board), board, out / "weights.bin", out / "build" / "request.bin",
                            uart_request=b"".join(frames), timeout_s=BACKSTOP_S)
    assert res.exit_code == 0, res.output[-2000:]
    answers = [parse_output(part) for part in res.output.split("@TLLM ready")[1:]]
    assert [a.generated_ids for a in answers] == wants
    assert answers[-1].history == (len(ref.tokens), history_crc(ref.tokens))
    counts = [a.prefill_instructions for a in answers]
    assert all(c > 0 for c in counts) and max(counts[1:]) < counts[0] * 2, counts
    assert "continue=" in res.output and "error" not in res.output


def test_chat_backend_on_the_h750_under_unicorn_keeps_the_conversation(tmp_path):
    """serve's and chat's backend on an STM32H750 build: the image stays up under Unicorn between requests
    (unicorn_session.UnicornPort), so turns 2 and 3 are continues; the tokens are the reference's."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    out, turns = built(tmp_path, "weact-h750")
    ex, eos = reference(out)
    ref = Session(ex, MAX_SEQ, eos)
    backend = open_backend(out, None, BACKSTOP_S)
    try:
        assert isinstance(backend, SessionBackend) and backend.name == "unicorn"
        conversation: list[int] = []
        for i, turn in enumerate(turns[:3]):
            gen = backend.generate(conversation + turn, N, GREEDY)
            assert gen.generated_ids == ref.generate(turn, N, GREEDY).generated_ids
            assert gen.reused == (len(conversation) - 1 if i else 0) and gen.prefill_count > 0
            conversation = conversation + turn + gen.generated_ids
    finally:
        backend.close()
