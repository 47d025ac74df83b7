"""The UART request protocol, as a host talks to a real board: QEMU's UART0 on
a loopback socket, pyserial on the other end. One request per run, and a
session of two requests served back to back (the firmware loops until a
request carries the exit flag); tokens == the reference every time."""
import pytest

from firmware_harness import GREEDY, TOP_P, build_case, need, prompt_for, reference_tokens, N_NEW, SHAPES_CONTEXT
from tinyllm_gen.build import run_firmware
from tinyllm_gen.protocol import REQUEST_EXIT_AFTER, pack_request, parse_output
from tinyllm_gen.board import load_board
from tinyllm_gen.run import qemu_uart_session, talk_serial

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    return build_case(tmp_path_factory.mktemp("uart"), "llama-tied-gqa", 32, "qemu-mps2-an500")


def test_one_request_over_uart(built):
    ids = prompt_for(built.model_dir)
    fw = run_firmware(built.out, ids, N_NEW, TOP_P, transport="uart", timeout_s=120)
    assert fw.output.generated_ids == reference_tokens(built.model_dir, 32, ids, TOP_P, SHAPES_CONTEXT)


def test_session_serves_two_requests(built):
    ids = prompt_for(built.model_dir)
    board = load_board("qemu-mps2-an500")
    with qemu_uart_session(built.out / "build" / "firmware.elf", board, built.out / "weights.bin", count=False) \
            as (port, qemu):
        first = talk_serial(port, pack_request(ids, 12, GREEDY), 120)
        second = talk_serial(port, pack_request(ids[:3], 12, TOP_P, REQUEST_EXIT_AFTER), 120)
        assert qemu.wait(timeout=30) == 0
    assert first[0] == 0 and second[0] == 0
    ref1 = reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:12]
    ref2 = reference_tokens(built.model_dir, 32, ids[:3], TOP_P, SHAPES_CONTEXT)[:12]
    assert parse_output(first[1]).generated_ids == ref1
    assert parse_output(second[1]).generated_ids == ref2


def test_host_reads_the_request_from_stdin(tmp_path):
    need("cmake")
    built = build_case(tmp_path, "llama-tied-gqa", 32, "host")
    ids = prompt_for(built.model_dir)
    fw = run_firmware(built.out, ids, N_NEW, GREEDY, transport="uart")
    assert fw.output.generated_ids == reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)

