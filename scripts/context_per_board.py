"""Context per board and what a chat turn costs, from `plan --json` (the
README's "Context per board" table).

    PYTHONPATH=... python scripts/context_per_board.py [--smollm2 GGUF] [--json]

For each build: the tokens of context `--max-seq auto` gives in 512 KiB of
SRAM and with the KV cache in the DK's SDRAM, the predicted decode and
prefill times (DWUP, plan's timing model), and the prefill of one chat turn
in a conversation (a system prompt, then turns of a user message and a
reply of fixed lengths): with multi-turn KV reuse a turn prefills its own
tokens and the previous reply's last one; sent whole, every token so far.
A build whose context cannot hold the turn says how many tokens it would
need (rolling, `--context-policy roll`, keeps generating past the end, but
a prompt must still fit, so it does not hold the conversation either)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SYSTEM = 37  # SmolLM2's chat template with its default system prompt, before the user says anything
USER = 20  # one user message in the template
REPLY = 40
TURN = 5

CASES = [  # (label, model, board, extra plan options)
    ("story-260k", "models/story-260k", "qemu-mps2-an500", []),
    ("story-260k", "models/story-260k", "stm32h750b-dk", []),
    ("story-260k", "models/story-260k", "weact-h750", []),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", []),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", ["--kv-bits", "8:4"]),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", ["--kv-bits", "4"]),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", ["--kv-region", "sdram"]),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", ["--kv-bits", "8:4", "--kv-region", "sdram"]),
    ("SmolLM2-135M", "SMOLLM2", "stm32h750b-dk", ["--kv-bits", "4", "--kv-region", "sdram"]),
]


def plan(model: str, board: str, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "tinyllm_gen", "plan", model, "--board", board, "--max-seq", "auto", "--json",
           *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout)


def turn_tokens(k: int) -> tuple[int, int]:
    """(prefilled with reuse, prefilled sent whole) for turn k (1-based)."""
    whole = SYSTEM + k * USER + (k - 1) * REPLY
    return (whole if k == 1 else USER + 1), whole


def row(label: str, board: str, extra: list[str], p: dict) -> dict:
    reuse, whole = turn_tokens(TURN)
    fits = whole + REPLY <= p["max_seq"]
    out = {"model": label, "board": board, "options": " ".join(extra) or "(default)", "kv_bits": p["kv_bits"],
           "kv_region": p.get("kv_region", "sram"), "context": p["max_seq"], "turn_tokens_reuse": reuse,
           "turn_tokens_whole": whole, "turn_fits": fits, "decode_ms": None, "prefill_ms_per_token": None,
           "turn_s_reuse": None, "turn_s_whole": None}
    pred = p.get("predicted", {}).get(board)
    if pred is None:  # the QEMU stand-in: exact instruction counts, no board to time
        return out
    mode = "dwup" if pred["modes"]["dwup"]["ms_per_token"] else "in_place"
    prefill_ms = pred["prefill"][mode]["ms_per_token"]
    out.update(decode_ms=pred["modes"][mode]["ms_per_token"], prefill_ms_per_token=prefill_ms)
    if fits:
        out.update(turn_s_reuse=round(reuse * prefill_ms / 1000, 2), turn_s_whole=round(whole * prefill_ms / 1000, 2))
    return out


def _ms(v) -> str:
    return "-" if v is None else f"{v:,} ms"


def _turn(seconds, tokens: int) -> str:
    return f"{tokens} tokens" if seconds is None else f"{seconds:,} s ({tokens} tokens)"


def markdown(rows: list[dict]) -> str:
    head = ("| model, board | options | KV | context | decode | prefill / prompt token "
            f"| turn {TURN} prefill, reuse | sent whole |\n|---|---|---|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        bits = str(r["kv_bits"])
        kv = (f"int{bits}" if ":" not in bits else "int{} K, int{} V".format(*bits.split(":"))) + \
            f", {'SDRAM' if r['kv_region'] == 'sdram' else 'SRAM'}"
        if r["turn_fits"]:
            reuse, whole = _turn(r["turn_s_reuse"], r["turn_tokens_reuse"]), _turn(r["turn_s_whole"],
                                                                                    r["turn_tokens_whole"])
        else:
            reuse = whole = f"does not fit ({r['turn_tokens_whole'] + REPLY} tokens)"
        lines.append(f"| {r['model']}, {r['board']} | {r['options']} | {kv} | {r['context']:,} "
                     f"| {_ms(r['decode_ms'])} | {_ms(r['prefill_ms_per_token'])} | {reuse} | {whole} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", type=Path, help="SmolLM2-135M-Instruct.Q4_1.gguf (its rows are left out without)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for label, model, board, extra in CASES:
        if model == "SMOLLM2":
            if args.smollm2 is None:
                continue
            model = str(args.smollm2)
        rows.append(row(label, board, extra, plan(model, board, extra)))
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
