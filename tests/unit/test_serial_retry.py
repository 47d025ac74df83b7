"""The host side of the UART protocol (run.talk_serial, backends.SerialBackend)
against a scripted board: the request's CRC against the done line's req=,
one resend when the request arrived damaged or was lost, then a one-line
error; no resend when another frame's done line comes first and ours
follows (a frame a previous host cut off), nor for a request the firmware
refuses for its fields.

The board here is a small Python model of the firmware's console loop
(firmware/tllm_main.c, tllm_frame.c): it answers on the port's readline(),
and a partial frame "times out" after two reads with nothing new, so what
it says depends on the order of events, never on the host's speed."""
from __future__ import annotations

import struct
import time
import zlib

import pytest

from tinyllm_gen.run.backends import DeviceError, SerialBackend
from tinyllm_gen.run.protocol import REQUEST_CRC_OFFSET, pack_request, parse_output
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.run.console import RequestLost, talk_serial

CAP = 232
QUIET = 0.05  # talk_serial's quiet_s here: the fake answers at once, or never


def line(body: str) -> bytes:
    return f"{body} crc={zlib.crc32(body.encode()):08x}\n".encode()


class FakeBoard:
    """A pyserial-like port; `link(n, data)` is what the n-th write delivers."""

    def __init__(self, link=lambda n, data: data, pending: bytes = b"", ready: bool = True, refuse: str | None = None):
        self.link, self.buf, self.refuse = link, bytearray(pending), refuse
        self.out: list[bytes] = [line(f"@TLLM ready max_request={CAP}")] if ready else []
        self.writes: list[bytes] = []
        self.served: list[int] = []
        self.idle = 0

    # the port
    def write(self, data: bytes) -> int:
        self.buf += self.link(len(self.writes), bytes(data))
        self.writes.append(bytes(data))
        self.idle = 0
        return len(data)

    def flush(self) -> None:
        pass

    def readline(self) -> bytes:
        if not self.out:
            self._step()
        if self.out:
            return self.out.pop(0)
        time.sleep(0.005)
        return b""

    # the firmware
    def _done(self, status: int, req: int | None) -> None:
        self.out += [line(f"@TLLM done status={status} req={'none' if req is None else f'{req:08x}'}"),
                     line(f"@TLLM ready max_request={CAP}")]

    def _drop(self, why: str, req: int | None = None) -> None:
        self.out.append(line(f"@TLLM error frame: {why}"))
        self._done(3, req)
        del self.buf[:4]  # the search resumes after the dead frame's magic

    def _step(self) -> None:
        at = self.buf.find(b"TLRQ")
        if at < 0:
            keep = next((k for k in (3, 2, 1) if self.buf.endswith(b"TLRQ"[:k])), 0)
            del self.buf[:len(self.buf) - keep]
            return
        del self.buf[:at]
        if len(self.buf) >= 8:
            n = struct.unpack_from("<I", self.buf, 4)[0]
            if n < 40 or n % 4 or n > CAP:
                return self._drop(f"bad length {n} (max {CAP})")
            if len(self.buf) >= n:
                frame = bytearray(self.buf[:n])
                stored = struct.unpack_from("<I", frame, REQUEST_CRC_OFFSET)[0]
                struct.pack_into("<I", frame, REQUEST_CRC_OFFSET, 0)
                if zlib.crc32(frame) != stored:
                    return self._drop("crc mismatch", stored)
                del self.buf[:n]
                if self.refuse:
                    self.out.append(line(f"@TLLM error request: {self.refuse}"))
                    return self._done(3, stored)
                self.served.append(stored)
                self.out += [line("@TLLM begin n_prompt=3 max_new=1 max_seq=96"), line('@TLLM tok 0 42 1000 "a"'),
                             line("@TLLM end reason=max_tokens n=1 prefill_instructions=5")]
                return self._done(0, stored)
        self.idle += 1
        if self.idle >= 2:  # nothing new for a while: the frame timeout (the board's clock)
            self.idle = 0
            self._drop("timeout, partial frame dropped")


REQ = pack_request([1, 2, 3], 1, SamplingOptions())
MINE = struct.unpack_from("<I", REQ, REQUEST_CRC_OFFSET)[0]


def flip_first(n: int, data: bytes) -> bytes:
    return data[:41] + bytes([data[41] ^ 0x04]) + data[42:] if n == 0 else data


def flip_all(n: int, data: bytes) -> bytes:
    return flip_first(0, data)


def talk(board: FakeBoard, wait_ready: bool = True):
    return talk_serial(board, REQ, 30, wait_ready=wait_ready, quiet_s=QUIET)


def test_a_clean_link_sends_once():
    board = FakeBoard()
    status, text = talk(board)
    assert status == 0 and len(board.writes) == 1 and board.served == [MINE]
    assert parse_output(text).generated_ids == [42]


def test_a_request_damaged_once_is_sent_again():
    board = FakeBoard(link=flip_first)
    status, text = talk(board)
    assert status == 0 and len(board.writes) == 2 and board.served == [MINE]
    assert parse_output(text).generated_ids == [42]


def test_a_request_damaged_twice_is_one_line_error():
    board = FakeBoard(link=flip_all)
    with pytest.raises(RequestLost) as e:
        talk(board)
    msg = str(e.value)
    assert "\n" not in msg and len(board.writes) == 2 and board.served == []
    assert f"CRC {MINE:08x}" in msg and "sent 2 times" in msg and "damaged (error frame: crc mismatch)" in msg
    assert e.value.exit_code == 2


def test_a_request_cut_short_is_sent_again_after_the_quiet():
    """The first send loses its tail: the board's frame times out (req=none),
    it says ready and then nothing; the host sends again."""
    board = FakeBoard(link=lambda n, d: d[:-6] if n == 0 else d)
    status, _ = talk(board)
    assert status == 0 and len(board.writes) == 2 and board.served == [MINE]


def test_a_request_lost_twice_is_one_line_error():
    board = FakeBoard(link=lambda n, d: d[:-6])
    with pytest.raises(RequestLost) as e:
        talk(board)
    assert "\n" not in str(e.value) and "lost (" in str(e.value) and len(board.writes) == 2


@pytest.mark.parametrize("wait_ready", [False, True], ids=["sent-at-once", "waits-for-ready"])
def test_a_frame_a_previous_host_cut_off_costs_no_resend(wait_ready):
    """The board still waits for the tail of a frame whose length is its
    whole buffer: our request is taken as that tail, the dead frame times out,
    the board finds ours inside it and serves it. One send, one generation.
    Waiting for "ready", the host sees the dead frame's error line first and
    must not give up on it."""
    dead = bytearray(pack_request([9] * 20, 1, SamplingOptions())[:48])
    struct.pack_into("<I", dead, 4, CAP)
    board = FakeBoard(pending=bytes(dead), ready=False)
    status, text = talk(board, wait_ready=wait_ready)
    assert status == 0 and len(board.writes) == 1 and board.served == [MINE]
    assert parse_output(text).generated_ids == [42]


def test_a_refusal_for_the_fields_is_the_answer():
    board = FakeBoard(refuse="prompt longer than the context")
    status, text = talk(board)
    assert status == 3 and len(board.writes) == 1
    assert parse_output(text).error == "request: prompt longer than the context"


def _backend(board: FakeBoard) -> SerialBackend:
    b = SerialBackend("socket://fake", timeout_s=30)
    b._port = board  # the link SerialBackend would open
    return b


def test_serial_backend_resends_once_then_reports_one_line():
    board = FakeBoard(link=flip_first, ready=False)
    gen = _backend(board).generate([1, 2, 3], 1, SamplingOptions())
    assert gen.generated_ids == [42] and len(board.writes) == 2
    board = FakeBoard(link=flip_all, ready=False)
    with pytest.raises(DeviceError) as e:
        _backend(board).generate([1, 2, 3], 1, SamplingOptions())
    assert "\n" not in str(e.value) and "sent 2 times" in str(e.value) and len(board.writes) == 2
