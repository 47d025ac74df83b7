"""`tinyllm-gen chat OUT`: a terminal conversation with the firmware.

Each line read from standard input is a user turn; the conversation so far
is rendered with the model's chat template (backends.render_chat: the
tokenizer's template, else "User:/Assistant:" lines), sent to the device, and
the reply is printed token by token as the "@TLLM tok" lines arrive. With
``timing`` each token's count from the board's counter (instructions under
an emulator, DWT cycles on a board) and the host's arrival time follow the
reply on standard error. Old turns are dropped when the conversation no
longer fits the firmware's context."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO

from .backends import Backend, DeviceError, ModelInfo, TextStream, chat_prompt_ids, chat_stops
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


def run_chat(info: ModelInfo, backend: Backend, opts: ChatOptions, stdin: IO[str] = sys.stdin,
             stdout: IO[str] = sys.stdout, stderr: IO[str] = sys.stderr, prompt: str = "> ") -> int:
    """The read-generate-print loop; returns the exit status (0 at end of input)."""
    system = [{"role": "system", "content": opts.system}] if opts.system else []
    history: list[dict] = []
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
            continue
        history.append({"role": "user", "content": user})
        ids = _fit(info, history, system, opts.max_new_tokens)
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
    stderr.write(f"[{len(gen.generated_ids)} tokens, {reason}; median {median:,} {unit}/token, "
                 f"prefill {gen.prefill_count or 0:,} {unit}; {wall:.2f} s on the host]\n")
    stderr.flush()
