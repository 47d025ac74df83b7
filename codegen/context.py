"""What happens when the KV cache is full (`compile --context-policy`).

stop (the default): generation ends with reason "context" once the token
buffer's max_seq ids are used.

roll[:sinks] (sinks default 4): StreamingLLM's attention sinks with
llama.cpp's context shift.  The first `sinks` positions are always kept;
when the token just emitted sits at the last position (max_seq - 1),
`discard` = (max_seq - sinks) // 2 positions after the sinks are dropped:
every layer's KV rows sinks + discard .. pos - 1 move down to sinks ..,
each key turned back by `discard` positions (dequantize, RoPE by
-discard, quantize again: exact.kv_shift_i8 / kv_shift_kv4), V as it is,
the token buffer moves the same way, and pos -= discard.  Positions, as
RoPE sees them, are cache slots (StreamingLLM's definition), so they stay
below max_seq and the RoPE tables need no more rows.  The firmware
(tllm_engine.c context_shift) and the reference (executor.generate,
speculative.generate_speculative) follow this rule; docs/rolling-context.md
states its cost and the float order."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UserError

DEFAULT_SINKS = 4
POLICIES = ("stop", "roll")


@dataclass(frozen=True)
class ContextRoll:
    sinks: int
    discard: int

    @property
    def policy(self) -> str:
        return f"roll:{self.sinks}"


def parse_context_policy(text: str) -> int | None:
    """'stop' -> None; 'roll' / 'roll:S' -> the sinks S."""
    name, colon, arg = str(text).partition(":")
    if name == "stop" and not colon:
        return None
    if name == "roll":
        if not colon:
            return DEFAULT_SINKS
        if arg.isascii() and arg.isdigit() and len(arg) <= 6:
            return int(arg)
    raise UserError(f"--context-policy {str(text)[:40]!r} is not known: use stop, roll or roll:SINKS "
                    f"(e.g. roll:{DEFAULT_SINKS})")


def context_roll(text: str, max_seq: int) -> ContextRoll | None:
    """The rolling context a build with `max_seq` positions gets (None: stop)."""
    sinks = parse_context_policy(text)
    if sinks is None:
        return None
    if max_seq - sinks < 2:
        raise UserError(f"--context-policy roll:{sinks} keeps {sinks} sinks but the context has {max_seq} "
                        f"positions: use fewer sinks (at most {max(max_seq - 2, 0)}) or a larger --max-seq")
    return ContextRoll(sinks, (max_seq - sinks) // 2)


def shift_rows(roll: ContextRoll, pos: int) -> int:
    """KV rows a shift at `pos` (the last position) moves: sinks + discard .. pos - 1."""
    return pos - roll.sinks - roll.discard
