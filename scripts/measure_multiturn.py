"""What a second chat turn costs with and without multi-turn KV reuse, as the
firmware's console reports it (docs/serving.md).

    PYTHONPATH=... python scripts/measure_multiturn.py OUT [--system TEXT] [--max-new-tokens N] [--json]

Turn 1 (the chat template's rendering of one user message) goes to a fresh
firmware; turn 2 (the conversation so far as tokens, plus the template's
next user turn: chat.turn_ids) then goes twice: as a continue on the same
firmware (only the new turn's ids are run) and as one fresh request of the
whole conversation on a new one.  Both give the same tokens (checked here);
the script prints, for each, the tokens the prefill ran, the board's
prefill count ("@TLLM end ... prefill_instructions=": guest instructions
under QEMU, DWT cycles on a board, 0 on the host build, which cannot count)
and the host's wall-clock seconds for the turn (noisy).

``--callgrind`` (a host build): the firmware runs under valgrind's callgrind,
collecting only inside tllm_model_prefill (every prompt pass) and dumping
after each request (tllm_generate, tllm_continue), so each turn's prefill
gets an exact count of the host's (x86-64) instructions; about 50 times
slower than native."""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from tinyllm_gen.run.backends import ModelInfo, SessionBackend, chat_prompt_ids
from tinyllm_gen.run.chat import turn_ids
from tinyllm_gen.reference.sampler import SamplingOptions

USER_1 = "What is the capital of France?"
USER_2 = "And of Italy?"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--system", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--callgrind", action="store_true", help="count a host build's prefill with valgrind")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tllm-callgrind-"))

    def wrapper(tag: str) -> tuple[str, ...]:
        if not a.callgrind:
            return ()
        return ("valgrind", "--tool=callgrind", "--toggle-collect=tllm_model_prefill", "--dump-after=tllm_generate",
                "--dump-after=tllm_continue", f"--callgrind-out-file={tmp}/{tag}.%p")

    def counted(tag: str) -> list[int]:
        """Ir collected inside tllm_model_prefill, one figure per request, in order (callgrind's parts; the
        last part is what ran after the last request)."""
        parts = {}
        for d in tmp.glob(f"{tag}.*"):
            text = d.read_text()
            parts[int(re.search(r"^part: (\d+)", text, re.M).group(1))] = int(
                re.search(r"^totals: (\d+)", text, re.M).group(1))
        return [parts[k] for k in sorted(parts)][:-1]

    info = ModelInfo.load(a.out)
    system = [{"role": "system", "content": a.system}] if a.system else []
    greedy = SamplingOptions()
    rows = {}
    reused = SessionBackend(a.out, 3600 * 4, wrapper("reuse"))
    try:
        t0 = time.monotonic()
        ids1 = chat_prompt_ids(info, system + [{"role": "user", "content": USER_1}])
        g1 = reused.generate(ids1, a.max_new_tokens, greedy)
        rows["turn 1"] = (g1, time.monotonic() - t0)
        ids2 = ids1 + g1.generated_ids + turn_ids(info, system, USER_2, g1.stop_reason == "eos")
        t0 = time.monotonic()
        rows["turn 2, reuse"] = (reused.generate(ids2, a.max_new_tokens, greedy), time.monotonic() - t0)
    finally:
        reused.close()
    fresh = SessionBackend(a.out, 3600 * 4, wrapper("fresh"))
    try:
        t0 = time.monotonic()
        rows["turn 2, fresh"] = (fresh.generate(ids2, a.max_new_tokens, greedy), time.monotonic() - t0)
    finally:
        fresh.close()
    host_counts = {}
    if a.callgrind:
        r, f = counted("reuse"), counted("fresh")
        host_counts = {"turn 1": r[0], "turn 2, reuse": r[1], "turn 2, fresh": f[0]}
    same = rows["turn 2, reuse"][0].generated_ids == rows["turn 2, fresh"][0].generated_ids
    table = {name: {"prompt_tokens": len(g.prompt_ids), "prefill_tokens_run": len(g.prompt_ids) - g.reused,
                    "kept_on_device": g.reused, "prefill_count": g.prefill_count, "unit": g.unit,
                    "generated": len(g.generated_ids), "host_seconds": round(s, 3),
                    **({"host_prefill_instructions": host_counts[name]} if host_counts else {})}
             for name, (g, s) in rows.items()}
    if a.json:
        print(json.dumps({"out": str(a.out), "same_tokens": same, "turns": table}, indent=1))
    else:
        for name, r in table.items():
            print(f"{name:14s} prompt {r['prompt_tokens']:4d} tokens, prefill ran {r['prefill_tokens_run']:4d} "
                  f"({r['kept_on_device']} kept): {r['prefill_count']:>14,} {r['unit']}, "
                  f"{r['host_seconds']:.2f} s on the host"
                  + (f", {r['host_prefill_instructions']:,} host instructions (callgrind)" if host_counts else ""))
        print(f"turn 2 tokens identical with and without reuse: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
