"""The firmware's frame reader (firmware/tllm_frame.c), built on the host
with gcc around a scripted console (frame_harness.c), against the guarantee
stated in firmware/tllm_frame.h: random byte streams with good frames
embedded among junk, false magics, cut-off, bit-flipped and refused frames,
delivered in random pieces separated by short gaps (which a byte-by-byte
reader cannot see) or by silences of the frame timeout.  Every good frame
the guarantee covers must be served, nothing else may be, no frame twice,
in stream order; every console line must carry its CRC."""
from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from tinyllm_gen.run.protocol import (REQUEST_CONTINUE, REQUEST_CRC_OFFSET, REQUEST_HEADER_BYTES, REQUEST_VERSION,
                                      check_line, history_crc, pack_request)
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.resources import firmware_dir

MAGIC = b"TLRQ"
HEADER = REQUEST_HEADER_BYTES
OLD = REQUEST_VERSION - 1  # a frame of the previous version: CRC good, refused for its version
SILENCE = None  # an event: no byte for the frame timeout
CAPS = (48, 72, 232, 1072)  # 1,072: the bundled model's request buffer
SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    here = Path(__file__).parent
    exe = tmp_path_factory.mktemp("frame-harness") / "frame_harness"
    base = ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I", str(firmware_dir()),
            str(here / "frame_harness.c"), str(firmware_dir() / "tllm_frame.c"), "-o", str(exe)]
    asan = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    if subprocess.run(base + asan, capture_output=True).returncode != 0:  # no sanitizer runtime here
        subprocess.run(base, check=True)
    return exe


def encode(events) -> bytes:
    out = bytearray()
    for e in events:
        if e is SILENCE:
            out += b"\xff\x01"
        else:
            out += bytes([e]) if e != 0xFF else b"\xff\x00"
    return bytes(out)


@dataclass
class Run:
    served: list[bytes]
    refused: list[bytes]
    order: list[tuple[str, bytes]]
    lines: list[str]


def run(harness: Path, cap: int, events) -> Run:
    p = subprocess.run([str(harness), str(cap)], input=encode(events), capture_output=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr.decode(errors="replace")[-3000:])
    order, lines = [], []
    for raw in p.stdout.decode("latin-1").split("\n"):
        if raw.startswith("#served ") or raw.startswith("#refused "):
            kind, hexed = raw[1:].split(" ")
            order.append((kind, bytes.fromhex(hexed)))
        elif raw:
            lines.append(raw)
    return Run([b for k, b in order if k == "served"], [b for k, b in order if k == "refused"], order, lines)


# ---------------------------------------------------------------- frames


def frame(n_ids: int, tag: int, version: int = REQUEST_VERSION, history: list[int] | None = None) -> bytes:
    """A request with a CRC that holds; `tag` (the seed) keeps frames apart; `history`: a continue."""
    body = bytearray(pack_request([(7 * tag + i) % 300 for i in range(n_ids)], 1 + tag % 5,
                                  SamplingOptions(seed=tag), history=history))
    struct.pack_into("<H", body, 8, version)
    struct.pack_into("<I", body, REQUEST_CRC_OFFSET, 0)
    struct.pack_into("<I", body, REQUEST_CRC_OFFSET, zlib.crc32(body))
    return bytes(body)


def with_length(f: bytes, total: int) -> bytes:
    return f[:4] + struct.pack("<I", total) + f[8:]


# ---------------------------------------------------------------- the guarantee, from the stream alone


def length_ok(n: int, cap: int) -> bool:
    return n >= HEADER and n % 4 == 0 and n <= cap


@dataclass(frozen=True)
class Stream:
    data: bytes
    silences: frozenset[int]  # i: a silence before byte i

    def magics(self) -> list[int]:
        return [p for p in range(len(self.data) - 3) if self.data[p:p + 4] == MAGIC]

    def claim(self, p: int, cap: int) -> int:
        if p + 8 > len(self.data):
            return 8
        n = struct.unpack_from("<I", self.data, p + 4)[0]
        return n if length_ok(n, cap) else 8

    def good_frames(self, cap: int) -> list[tuple[int, bytes]]:
        """(offset, bytes) of every candidate whose length and CRC hold (any version)."""
        out = []
        for p in self.magics():
            n = self.claim(p, cap)
            if n < HEADER or p + n > len(self.data):
                continue
            f = bytearray(self.data[p:p + n])
            stored = struct.unpack_from("<I", f, REQUEST_CRC_OFFSET)[0]
            struct.pack_into("<I", f, REQUEST_CRC_OFFSET, 0)
            if zlib.crc32(f) == stored:
                out.append((p, self.data[p:p + n]))
        return out


def stream_of(events) -> Stream:
    data, silences = bytearray(), set()
    for e in events:
        if e is SILENCE:
            silences.add(len(data))
        else:
            data.append(e)
    return Stream(bytes(data), frozenset(silences))


def check_guarantee(harness: Path, cap: int, events, notes: list[str] | None = None) -> Run:
    s = stream_of(events)
    r = run(harness, cap, events)
    for line in r.lines:
        if line.startswith("@TLLM"):
            assert check_line(line)[1] is True, f"console line without a good CRC: {line!r}"
    good = s.good_frames(cap)
    # what was served or refused is a good frame of the stream, each once, in stream order
    at, placed = -1, []
    for kind, f in r.order:
        cands = [p for p, g in good if p > at and g == f]
        assert cands, f"{kind} a frame that is not a good frame of the stream after offset {at}: {f[:12].hex()}..."
        assert (kind == "served") == (struct.unpack_from("<H", f, 8)[0] == REQUEST_VERSION), (kind, f[8:10])
        at = cands[0]
        placed.append((kind, at))
    served_at = {p for k, p in placed if k == "served"}
    magics = s.magics()
    for q, f in good:
        if struct.unpack_from("<H", f, 8)[0] != REQUEST_VERSION:
            continue  # the caller refuses it: not a frame to serve
        n = len(f)
        if any(q < i < q + n for i in s.silences):
            continue  # a silence inside the frame: dropped as cut off, by design
        if any(a < q < a + len(g) for a, g in good):
            continue  # (1) inside another good frame's length
        if any(a < q and any(c < a and c + s.claim(c, cap) > q for c in magics) for a in served_at):
            continue  # (2) already received when an earlier frame was served
        assert q in served_at, (f"the good frame at offset {q} ({n} bytes, cap {cap}) was not served; "
                                f"served at {sorted(served_at)}; console: {r.lines[-12:]}")
        if notes is not None and any(c < q < c + s.claim(c, cap) for c in magics):
            notes.append("a good frame served from inside a dead frame's claim")
    if notes is not None:
        notes += [f"{len(r.served)} served" if len(r.served) < 3 else "3+ served"] + (["refused"] if r.refused else [])
    return r


# ---------------------------------------------------------------- the two cases of issue 26, and a refusal


def test_five_header_bytes_then_a_request(harness):
    req = frame(6, 1)
    for events in (list(req[:5] + req), list(req[:5]) + [SILENCE] + list(req)):
        r = check_guarantee(harness, 232, events)
        assert r.served == [req]


@pytest.mark.parametrize("cap", [232, 1072])
def test_a_header_claiming_the_whole_buffer_then_a_request(harness, cap):
    """48 bytes of a frame whose length is the request buffer's capacity, then
    a good request: swallowed as the dead frame's tail, then found again once
    the dead frame times out (or the input ends)."""
    req = frame(4, 2)
    dead = with_length(frame(60, 3), cap)[:48]
    for events in (list(dead + req) + [SILENCE], list(dead + req), list(dead) + [SILENCE] + list(req)):
        r = check_guarantee(harness, cap, events)
        assert r.served == [req], r.lines
    r = run(harness, cap, list(dead + req) + [SILENCE])
    assert f"@TLLM error frame: timeout, partial frame dropped after {48 + len(req)} of {cap} bytes" in \
        [check_line(ln)[0] for ln in r.lines]


def test_a_refused_frame_hands_back_what_followed(harness):
    """A dead frame swallows a frame of another version (CRC good, refused by
    the caller) and a good request: the refusal keeps the bytes after it."""
    v3, req = frame(3, 4, version=OLD), frame(5, 5)
    events = list(with_length(frame(60, 6), 1072)[:44] + v3 + req) + [SILENCE]
    r = check_guarantee(harness, 1072, events)
    assert r.refused == [v3] and r.served == [req]


def test_frames_swallowed_by_a_dead_frame_after_the_first_served_are_lost(harness):
    """Case (2) of the guarantee, pinned: the request buffer goes to the model
    with the first frame, so a second one received with it is dropped."""
    a, b = frame(2, 7), frame(2, 8)
    r = check_guarantee(harness, 1072, list(with_length(frame(60, 9), 1072)[:44] + a + b) + [SILENCE])
    assert r.served == [a]


# ---------------------------------------------------------------- random streams


@st.composite
def segments(draw, cap: int, tag: int):
    max_ids = (cap - HEADER) // 2
    kind = draw(st.sampled_from(["good", "good", "continue", "refused", "cut", "flip", "false", "junk", "silence"]))
    make = lambda: frame(draw(st.integers(0, max_ids)), tag)  # noqa: E731
    if kind == "good":
        return list(make())
    if kind == "continue":  # the multi-turn form: the framer serves it like any frame, its history fields intact
        return list(frame(draw(st.integers(0, max_ids)), tag,
                          history=draw(st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=600))))
    if kind == "refused":
        return list(frame(draw(st.integers(0, max_ids)), tag, draw(st.sampled_from([1, OLD, REQUEST_VERSION + 1,
                                                                                   0xFFFF]))))
    if kind == "cut":
        f = make()
        return list(f[:draw(st.integers(1, len(f) - 1))])
    if kind == "flip":
        f = bytearray(make())
        i = draw(st.integers(0, len(f) - 1))
        f[i] ^= 1 << draw(st.integers(0, 7))
        return list(f)
    if kind == "false":
        n = draw(st.one_of(st.just(cap), st.integers(0, cap // 4).map(lambda k: 4 * k), st.integers(0, 2**32 - 1)))
        return list(MAGIC + struct.pack("<I", n)) + draw(st.lists(st.integers(0, 255), max_size=40))
    if kind == "junk":
        pieces = draw(st.lists(st.one_of(st.sampled_from([b"T", b"TL", b"TLR", b"TLRQ", b"\xff", b"\x00"]),
                                         st.binary(min_size=1, max_size=8)), max_size=12))
        return list(b"".join(pieces))
    return [SILENCE]


@st.composite
def streams(draw):
    cap = draw(st.sampled_from(CAPS))
    n = draw(st.integers(1, 10))
    events = [e for tag in range(n) for e in draw(segments(cap, 1000 * n + tag))]
    # delivery in pieces: a cut between two pieces is either a short gap
    # (nothing for the reader to see) or a silence of the frame timeout
    cuts = sorted(draw(st.sets(st.integers(0, len(events)), max_size=6)), reverse=True)
    for at in cuts:
        if draw(st.booleans()):
            events.insert(at, SILENCE)
    return cap, events


def test_a_continue_frame_is_served_with_its_history_fields(harness):
    """The continue form (multi-turn KV reuse) through the framer, cut by a
    silence once and then whole: served byte for byte, history count and CRC
    where tllm_request.h has them."""
    held = [5, 300, 7, 65535]
    req = frame(3, 11, history=held)
    flags, = struct.unpack_from("<H", req, 10)
    assert flags & REQUEST_CONTINUE and struct.unpack_from("<II", req, 40) == (4, history_crc(held))
    r = check_guarantee(harness, 232, list(req[:30]) + [SILENCE] + list(req))
    assert r.served == [req]


@SETTINGS
@given(streams())
@example((232, list(frame(6, 1)[:5] + frame(6, 1))))
@example((1072, list(with_length(frame(60, 3), 1072)[:48] + frame(4, 2)) + [SILENCE]))
def test_random_streams_keep_the_guarantee(harness, case):
    cap, events = case
    notes: list[str] = []
    check_guarantee(harness, cap, events, notes)
    for note in sorted(set(notes)):
        event(note)  # --hypothesis-show-statistics: how often each situation came up
