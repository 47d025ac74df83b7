"""The host <-> firmware protocol: the request we hand the firmware and the
console lines it prints back (firmware/tllm_request.h, firmware/tllm_frame.h,
firmware/tllm_main.c).

Framing and error recovery (the firmware side is firmware/tllm_frame.c):

* a request is one frame: magic "TLRQ", total length, body, and a CRC32
  (zlib.crc32) over all of it with the CRC field counted as zero;
* the firmware hunts for the magic byte by byte, checks the length against
  its request buffer before reading on, drops a partial frame after a
  silence of TLLM_FRAME_TIMEOUT_MS (its own clock), checks the CRC, and after
  any error resynchronises on the next magic in what it has received (from
  the byte after the dead frame's magic; tllm_frame.h states the guarantee);
* every console line that starts with "@TLLM" ends in " crc=XXXXXXXX", the
  CRC32 of the line before that suffix; :func:`check_line` verifies it and
  :func:`parse_output` skips (and counts) lines that fail;
* "@TLLM done status=N req=XXXXXXXX" names the request (its CRC field) the
  status belongs to, "req=none" a frame dropped before its CRC arrived; the
  host (run.talk_serial) sends a request once more when its done line says
  it arrived damaged or another frame's done line is all it gets."""
from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

from ..abi import (EXIT_CODES, REQUEST_CONTINUE, REQUEST_CRC_OFFSET, REQUEST_EXIT_AFTER,  # noqa: F401 (re-exported)
                  REQUEST_HEADER_BYTES, REQUEST_HISTORY_CRC_OFFSET, REQUEST_HISTORY_TOKENS_OFFSET, REQUEST_MAGIC,
                  REQUEST_VERSION)
from ..reference.sampler import SamplingOptions

REQUEST_HEADER = struct.Struct("<4sIHHIIffQIII")  # see tllm_request.h
assert REQUEST_HEADER.size == REQUEST_HEADER_BYTES
assert REQUEST_HEADER.size - 8 == REQUEST_HISTORY_TOKENS_OFFSET == REQUEST_HISTORY_CRC_OFFSET - 4


def history_crc(tokens: Sequence[int]) -> int:
    """The CRC32 the firmware keeps of the conversation it holds (tllm_history): zlib's over the ids as
    little-endian uint16, in order; 0 for none."""
    return zlib.crc32(struct.pack(f"<{len(tokens)}H", *tokens)) if len(tokens) else 0


def pack_request(prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 flags: int = 0, history: Sequence[int] | None = None) -> bytes:
    """A request frame (tllm_request.h).  ``history``: a continue (multi-turn KV reuse): ``prompt_ids`` are
    the new turn's ids only (none is fine), and ``history`` every token of the conversation the board must
    hold (its earlier requests' ids and generated tokens, in order), named by count and CRC; the board
    refuses it (status 6, TLLM_EXIT_HISTORY) when it holds another, 7 when the new ids would not fit."""
    ids = struct.pack(f"<{len(prompt_ids)}H", *prompt_ids)
    total = REQUEST_HEADER.size + len(ids)
    total += (-total) % 4
    n_held, held_crc = (len(history), history_crc(history)) if history is not None else (0, 0)
    if history is not None:
        flags |= REQUEST_CONTINUE
    head = REQUEST_HEADER.pack(REQUEST_MAGIC, total, REQUEST_VERSION, flags, len(prompt_ids), max_new_tokens,
                               sampling.temperature, sampling.top_p, sampling.seed, 0, n_held, held_crc)
    body = (head + ids).ljust(total, b"\0")
    return body[:REQUEST_CRC_OFFSET] + struct.pack("<I", zlib.crc32(body)) + body[REQUEST_CRC_OFFSET + 4:]


def request_crc(request: bytes) -> int:
    """The CRC field of a packed request (what "@TLLM done ... req=" names)."""
    return struct.unpack_from("<I", request, REQUEST_CRC_OFFSET)[0]


_CRC_SUFFIX = re.compile(r" crc=([0-9a-f]{8})$")


def check_line(line: str) -> tuple[str, bool | None]:
    """A console line without its " crc=" suffix, and whether the CRC holds
    (None: the line has none, as lines from older firmware)."""
    m = _CRC_SUFFIX.search(line)
    if not m:
        return line, None
    body = line[:m.start()]
    return body, zlib.crc32(body.encode("utf-8", errors="surrogateescape")) == int(m.group(1), 16)


_DONE = re.compile(r"^@TLLM done status=(\d+)(?: req=([0-9a-f]{8}|none))?$")


def parse_done(line: str) -> tuple[int, int | None] | None:
    """(status, request CRC or None) of a CRC-clean "@TLLM done" line."""
    body, ok = check_line(line.rstrip("\r\n"))
    m = _DONE.match(body) if ok is not False else None
    if not m:
        return None
    req = m.group(2)
    return int(m.group(1)), (int(req, 16) if req and req != "none" else None)


@dataclass(frozen=True)
class FirmwareOutput:
    generated_ids: list[int]
    token_texts: list[bytes]  # what the firmware printed for each token
    instructions_per_token: list[int]
    stop_reason: str | None
    prefill_instructions: int | None
    text: str  # the firmware's own rendering of prompt + generation
    canary_ok: bool | None  # every arena canary and the stack-limit canary intact
    error: str | None
    stack_peak: int | None = None  # bytes of stack used (0: the board cannot measure)
    canary_regions: dict | None = None  # region -> intact
    crc_errors: int = 0  # "@TLLM" lines whose crc= suffix did not match (skipped)
    passes: int | None = None  # passes over the weights that produced tokens (None: older firmware)
    # tokens each pass produced ("@TLLM pass" lines, speculative builds; the last pass may deliver fewer);
    # a plain build prints none: every pass is one token
    pass_tokens: list[int] | None = None
    pass_positions: list[int] | None = None  # positions each pass ran through the weights (1: a plain step)
    # the conversation the board holds after this generation (tokens, CRC: what the next continue names)
    history: tuple[int, int] | None = None
    shifts: int = 0  # context shifts (a rolling-context build: compile --context-policy roll)

    @property
    def tokens_per_pass(self) -> float | None:
        """Generated tokens per pass over the weights (1.0 for plain decoding)."""
        return len(self.generated_ids) / self.passes if self.passes else None


_TOK = re.compile(r'^@TLLM tok (\d+) (\d+) (\d+) "(.*)"$')
_END = re.compile(r"^@TLLM end reason=(\w+) n=(\d+) prefill_instructions=(\d+)(?: passes=(\d+))?(?: shifts=(\d+))?"
                  r"(?: history=(\d+) history_crc=([0-9a-f]{8}))?$")
_PASS = re.compile(r"^@TLLM pass (\d+) tokens=(\d+) positions=(\d+)$")


@dataclass(frozen=True)
class TokenLine:
    """One "@TLLM tok" line: the index of the token in the generation, its id,
    the board's count for it (instructions; cycles on a board) and its bytes."""
    index: int
    id: int
    count: int
    text: bytes


def parse_token_line(line: str) -> TokenLine | None:
    """The token of a CRC-clean "@TLLM tok" line, else None (for streaming:
    one line at a time as it arrives)."""
    body, ok = check_line(line.rstrip("\r\n"))
    m = _TOK.match(body) if ok is not False else None
    if not m:
        return None
    return TokenLine(int(m.group(1)), int(m.group(2)), int(m.group(3)), _unescape(m.group(4)))


def _unescape(s: str) -> bytes:
    out, i = bytearray(), 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "n":
                out.append(10)
                i += 2
                continue
            if nxt == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out += nxt.encode()
            i += 2
            continue
        out += ch.encode()
        i += 1
    return bytes(out)


def parse_output(console: str) -> FirmwareOutput:
    ids, texts, instr = [], [], []
    reason = prefill = canary = error = stack_peak = canary_regions = history = None
    text_lines: list[str] | None = None
    text = ""
    crc_errors = 0
    passes, pass_tokens, pass_positions = None, [], []
    shifts = 0
    for line in console.split("\n"):
        if line.startswith("@TLLM"):  # the story text between text-begin/end has no such lines
            line, ok = check_line(line)
            if ok is False:
                crc_errors += 1
                continue
        if text_lines is not None:
            if line == "@TLLM text-end":
                text = "\n".join(text_lines)
                text_lines = None
            else:
                text_lines.append(line)
            continue
        if m := _TOK.match(line):
            ids.append(int(m.group(2)))
            instr.append(int(m.group(3)))
            texts.append(_unescape(m.group(4)))
        elif m := _END.match(line):
            reason, prefill = m.group(1), int(m.group(3))
            passes = int(m.group(4)) if m.group(4) is not None else None
            shifts = int(m.group(5) or 0)
            history = (int(m.group(6)), int(m.group(7), 16)) if m.group(6) is not None else None
        elif m := _PASS.match(line):
            pass_tokens.append(int(m.group(2)))
            pass_positions.append(int(m.group(3)))
        elif line == "@TLLM text-begin":
            text_lines = []
        elif line.startswith("@TLLM canary "):
            fields = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
            canary = fields.get("arena") == "ok" and fields.get("stack", "ok") == "ok"
            stack_peak = int(fields["stack_peak"]) if "stack_peak" in fields else None
            regions = dict(r.split(":", 1) for r in fields.get("regions", "").split(",") if ":" in r)
            canary_regions = {k: v == "ok" for k, v in regions.items()} or None
        elif line.startswith("@TLLM error "):
            error = line[len("@TLLM error "):]
    if passes is not None and not pass_tokens:  # a plain build: one token, one position per pass
        pass_tokens, pass_positions = [1] * passes, [1] * passes
    seen = passes is not None or pass_tokens
    return FirmwareOutput(ids, texts, instr, reason, prefill, text, canary, error, stack_peak, canary_regions,
                          crc_errors, passes, pass_tokens if seen else None, pass_positions if seen else None,
                          history, shifts)
