"""The UART request protocol, as a host talks to a real board: QEMU's UART0 on
a loopback socket, pyserial on the other end. One request per run, and a
session of two requests served back to back (the firmware loops until a
request carries the exit flag); tokens == the reference every time."""
import pytest

from firmware_harness import GREEDY, TOP_P, build_case, need, prompt_for, reference_tokens, N_NEW, SHAPES_CONTEXT
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import REQUEST_EXIT_AFTER, pack_request, parse_output
from tinyllm_gen.board import load_board
from tinyllm_gen.run.console import talk_serial
from tinyllm_gen.run.qemu import qemu_uart_session
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    return build_case(tmp_path_factory.mktemp("uart"), "llama-tied-gqa", 32, "qemu-mps2-an500")


def test_one_request_over_uart(built):
    ids = prompt_for(built.model_dir)
    fw = run_firmware(built.out, ids, N_NEW, TOP_P, transport="uart", timeout_s=BACKSTOP_S)
    assert fw.output.generated_ids == reference_tokens(built.model_dir, 32, ids, TOP_P, SHAPES_CONTEXT)


def test_session_serves_two_requests(built):
    ids = prompt_for(built.model_dir)
    board = load_board("qemu-mps2-an500")
    with qemu_uart_session(built.out / "build" / "firmware.elf", board, built.out / "weights.bin", count=False) \
            as (port, qemu):
        first = talk_serial(port, pack_request(ids, 12, GREEDY), 120)
        second = talk_serial(port, pack_request(ids[:3], 12, TOP_P, REQUEST_EXIT_AFTER), 120)
        assert qemu.wait(timeout=300) == 0
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



# ---------------------------------------------------------------- issue 26: the host checks req= and resends once


class FaultyLink:
    """A pyserial port whose first `bad` writes are damaged on the way: a bit
    of the first prompt id flipped, or ("cut") the last 6 bytes lost."""

    def __init__(self, port, bad: int, how: str = "flip"):
        self.port, self.bad, self.how, self.writes = port, bad, how, 0

    def write(self, data: bytes):
        if self.writes < self.bad:
            data = data[:-6] if self.how == "cut" else data[:40] + bytes([data[40] ^ 0x10]) + data[41:]
        self.writes += 1
        return self.port.write(data)

    def __getattr__(self, name):
        return getattr(self.port, name)


@pytest.mark.parametrize("how", ["flip", "cut"])
def test_a_damaged_first_send_is_sent_again(built, how):
    """flip: the firmware's done line names our CRC after a CRC failure; cut:
    our frame times out (req=none) and the firmware then waits for input."""
    ids = prompt_for(built.model_dir)
    board = load_board("qemu-mps2-an500")
    with qemu_uart_session(built.out / "build" / "firmware.elf", board, built.out / "weights.bin") as (port, qemu):
        link = FaultyLink(port, 1, how)
        seen = []
        status, text = talk_serial(link, pack_request(ids, 12, GREEDY), 600, on_line=seen.append)  # a backstop
    assert status == 0 and link.writes == 2
    assert parse_output(text).generated_ids == reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:12]
    assert any(("crc mismatch" if how == "flip" else "timeout, partial frame dropped") in ln for ln in seen), seen


@pytest.mark.parametrize("bad", [1, 2], ids=["first-send", "every-send"])
def test_run_transport_uart_resends_once_then_exits_2(built, monkeypatch, capsys, bad):
    """`tinyllm-gen run --transport uart` over a link that damages the first
    send (the answer is the reference's tokens) or every send (one line, exit 2)."""
    import contextlib
    import json

    import tinyllm_gen.run.qemu as run
    from tinyllm_gen.cli import main

    real = run.qemu_uart_session
    links = []

    @contextlib.contextmanager
    def faulty_session(*args, **kwargs):
        with real(*args, **kwargs) as (port, proc):
            links.append(FaultyLink(port, bad))
            yield links[-1], proc

    monkeypatch.setattr(run, "qemu_uart_session", faulty_session)
    with pytest.raises(SystemExit) as e:
        main(["run", str(built.out), "--prompt", "Once upon a time there was a cat", "--max-new-tokens", "12",
              "--transport", "uart", "--json", "--timeout", "300"])
    out, err = capsys.readouterr()
    assert links and links[0].writes == 2
    if bad == 1:
        assert e.value.code == 0, err
        ids = prompt_for(built.model_dir)
        ref = reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:12]
        assert json.loads(out)["generated_ids"] == ref
    else:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert e.value.code == 2 and len(lines) == 1, err
        assert lines[0].startswith("tinyllm-gen: error: the board did not serve the request"), lines[0]
        assert "sent 2 times" in lines[0]
