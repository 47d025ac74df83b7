"""`tinyllm-gen chat OUT`: a terminal conversation with the firmware.

Each line read from standard input is a user turn; the first is rendered
with the model's chat template (backends.render_chat: the tokenizer's
template, else "User:/Assistant:" lines), sent to the device, and the reply
is printed token by token as the "@TLLM tok" lines arrive.  The conversation
is kept as tokens: every later turn is the conversation so far (its prompts
and the device's own tokens) and the template's text for the new user turn
(`turn_ids`), so the device continues the conversation it holds in its KV
cache and prefills only the new turn (multi-turn KV reuse, run/session.py;
the board's refusal falls back to a fresh prefill of the same tokens).  With
``timing`` each token's count from the board's counter (instructions under
an emulator, DWT cycles on a board) and the host's arrival time follow the
reply on standard error. When the conversation no longer fits the
firmware's context it is rendered again without its oldest turns (a fresh
prefill)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO

from .backends import Backend, DeviceError, ModelInfo, TextStream, chat_prompt_ids, chat_stops, render_chat
from ..reference.sampler import SamplingOptions


@dataclass(frozen=True)
class ChatOptions:
    max_new_tokens: int = 64
    sampling: SamplingOptions = SamplingOptions()
    system: str | None = None
    timing: str = "summary"  # "none", "summary" (one line per reply) or "tokens" (one line per token)


def _fit(info: ModelInfo, history: list[dict], system: list[dict], max_new: int) -> list[int] | None:
    """Prompt ids of the longest recent part of the conversation that leaves
    room for a reply; None when even the last turn alone does not fit."""
    for start in range(0, len(history), 2):
        ids = chat_prompt_ids(info, system + history[start:])
        if len(ids) + max(1, min(max_new, 8)) < info.max_seq:
            return ids
    return None


_CUT = "\x00tllm-turn\x00"  # stands for the previous reply: the template's text after it opens the next turn


def turn_ids(info: ModelInfo, system: list[dict], user: str, after_eos: bool) -> list[int]:
    """The tokens the chat template puts after an assistant reply to open the
    user turn ``user`` and the next reply (ChatML: the reply's end marker,
    the user's turn, the assistant's start).  ``after_eos``: the reply ended
    with the model's end-of-sequence token, which then stands for the
    template's text of it."""
    msgs = system + [{"role": "user", "content": "."}, {"role": "assistant", "content": _CUT},
                     {"role": "user", "content": user}]
    tok = info.tokenizer
    special = (lambda i: tok.decode([i]) if i is not None else "")
    text = render_chat(msgs, info.chat_template, special(tok.bos_id), special(tok.eos_id))
    text = text[text.index(_CUT) + len(_CUT):]
    if after_eos:
        for eos in info.eos_ids or ((tok.eos_id,) if tok.eos_id is not None else ()):
            end = tok.decode([eos])
            if end and text.startswith(end):
                text = text[len(end):]
                break
    return tok.encode(text, bos=False)


def run_chat(info: ModelInfo, backend: Backend, opts: ChatOptions, stdin: IO[str] = sys.stdin,
             stdout: IO[str] = sys.stdout, stderr: IO[str] = sys.stderr, prompt: str = "> ") -> int:
    """The read-generate-print loop; returns the exit status (0 at end of input)."""
    system = [{"role": "system", "content": opts.system}] if opts.system else []
    history: list[dict] = []
    conversation: list[int] = []  # the last prompt and reply as tokens: what the device holds
    after_eos = False
    interactive = stdin.isatty()
    while True:
        if interactive:
            stdout.write(prompt)
            stdout.flush()
        line = stdin.readline()
        if not line:
            return 0
        user = line.rstrip("\n")
        if not user.strip():
            continue
        if user.strip() in ("/exit", "/quit"):
            return 0
        if user.strip() == "/reset":
            history.clear()
            conversation = []
            continue
        history.append({"role": "user", "content": user})
        room = max(1, min(opts.max_new_tokens, 8))
        ids = conversation + turn_ids(info, system, user, after_eos) if conversation else None
        if ids is None or len(ids) + room >= info.max_seq:
            ids = _fit(info, history, system, opts.max_new_tokens)  # rendered afresh, oldest turns dropped
        if ids is None:
            history.pop()
            stderr.write(f"[that message does not fit the firmware's context of {info.max_seq} tokens]\n")
            continue
        max_new = min(opts.max_new_tokens, info.max_seq - len(ids))
        text = TextStream(chat_stops(info))
        arrivals: list[tuple[float, int, int, bytes]] = []  # (host seconds, id, board count, bytes)
        t0 = time.monotonic()

        def on_token(tok):
            arrivals.append((time.monotonic() - t0, tok.id, tok.count, tok.text))
            piece = text.feed(tok.text)
            if piece:
                stdout.write(piece)
                stdout.flush()

        try:
            gen = backend.generate(ids, max_new, opts.sampling, on_token=on_token)
        except DeviceError as e:
            history.pop()
            stdout.write("\n")
            stderr.write(f"[device error: {e}]\n")
            continue
        stdout.write(text.feed(b"", final=True) + "\n")
        stdout.flush()
        history.append({"role": "assistant", "content": text.text.strip()})
        conversation = ids + gen.generated_ids if gen.generated_ids else []
        after_eos = gen.stop_reason == "eos"
        _report(stderr, opts.timing, gen, arrivals, backend.unit, text.stopped)
    return 0


def _report(stderr: IO[str], timing: str, gen, arrivals, unit: str, stopped: bool) -> None:
    if timing == "none":
        return
    if timing == "tokens":
        prev = 0.0
        for i, (t, tid, count, raw) in enumerate(arrivals):
            stderr.write(f"  tok {i:3d} {tid:6d} {raw.decode('utf-8', errors='replace')!r:16} "
                         f"{count:>12,} {unit}  +{(t - prev) * 1000:7.1f} ms\n")
            prev = t
    counts = sorted(gen.counts[1:] or gen.counts)  # the first token's count is its sampling only
    median = counts[len(counts) // 2] if counts else 0
    reason = "stop string" if stopped else gen.stop_reason
    wall = arrivals[-1][0] if arrivals else 0.0
    ran = len(gen.prompt_ids) - gen.reused
    kept = f", {gen.reused} kept on the device" if gen.reused else ""
    # a rolling window forgot the oldest turns: the next turn is sent whole (the board holds another history)
    rolled = f"; the context rolled {gen.shifts} time{'s' if gen.shifts != 1 else ''}" if gen.shifts else ""
    stderr.write(f"[{len(gen.generated_ids)} tokens, {reason}; median {median:,} {unit}/token, "
                 f"prefill {gen.prefill_count or 0:,} {unit} for {ran} tokens{kept}{rolled}; "
                 f"{wall:.2f} s on the host]\n")
    stderr.flush()
