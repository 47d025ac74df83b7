"""The host <-> firmware protocol: the request we hand the firmware and the
console lines it prints back (firmware/tllm_request.h, firmware/tllm_main.c)."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Sequence

from .sampler import SamplingOptions

REQUEST_MAGIC = b"TLRQ"
REQUEST_VERSION = 1
REQUEST_HEADER = struct.Struct("<4sIIIIffQI")  # 40 bytes, see tllm_request.h
assert REQUEST_HEADER.size == 40

EXIT_CODES = {0: "ok", 3: "bad request", 4: "weights blob mismatch", 5: "arena or stack canary broken",
              249: "unexpected interrupt", 250: "HardFault", 251: "MemManage fault (stack overflow?)",
              252: "BusFault", 253: "UsageFault", 254: "NMI"}


REQUEST_EXIT_AFTER = 0x1  # flags bit 0: the firmware exits after this generation (UART requests)


def pack_request(prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 flags: int = 0) -> bytes:
    ids = struct.pack(f"<{len(prompt_ids)}H", *prompt_ids)
    total = REQUEST_HEADER.size + len(ids)
    total += (-total) % 4
    head = REQUEST_HEADER.pack(REQUEST_MAGIC, total, REQUEST_VERSION, len(prompt_ids), max_new_tokens,
                               sampling.temperature, sampling.top_p, sampling.seed, flags)
    return (head + ids).ljust(total, b"\0")


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


_TOK = re.compile(r'^@TLLM tok (\d+) (\d+) (\d+) "(.*)"$')
_END = re.compile(r"^@TLLM end reason=(\w+) n=(\d+) prefill_instructions=(\d+)$")


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
    reason = prefill = canary = error = stack_peak = canary_regions = None
    text_lines: list[str] | None = None
    text = ""
    for line in console.split("\n"):
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
    return FirmwareOutput(ids, texts, instr, reason, prefill, text, canary, error, stack_peak, canary_regions)
