"""`tinyllm-gen chat OUT` with standard input piped in: each line a turn, the
reply streamed token by token from QEMU (then the host build), one timing
line per token from the board's counter, and the reply's tokens the
reference's for the conversation rendered with the chat template; the next
turn continues the conversation the device holds."""
import re
import subprocess
import sys

import pytest

from firmware_harness import GREEDY, SHAPES_CONTEXT, build_case, need, reference_tokens
from tinyllm_gen.run.backends import PLAIN_STOP, ModelInfo, chat_prompt_ids
from tinyllm_gen.run.chat import turn_ids

pytestmark = pytest.mark.emu
N = 8


def chat(out, stdin: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "chat", str(out), "--max-new-tokens", str(N),
                           "--timing", "tokens", *args], input=stdin, capture_output=True, text=True, timeout=300)


def expected_reply(built, info, messages):
    return expected_reply_ids(built, info, chat_prompt_ids(info, messages))


def expected_reply_ids(built, info, prompt_ids):
    ids = reference_tokens(built.model_dir, 32, prompt_ids, GREEDY, SHAPES_CONTEXT)[:N]
    text = b"".join(info.tokenizer.token_bytes(i) for i in ids).decode("utf-8", errors="replace")
    for stop in PLAIN_STOP:
        text = text.split(stop)[0]
    return ids, text


@pytest.mark.parametrize("board", ["qemu-mps2-an500", "host"])
def test_chat_over_piped_stdin(tmp_path, board):
    need("cmake")
    if board != "host":
        need("arm-none-eabi-gcc")
        need("qemu-system-arm")
    built = build_case(tmp_path, "llama-tied-gqa", 32, board)
    info = ModelInfo.load(built.out)
    proc = chat(built.out, "Tell me a story\n\n/reset\nAnother one\n")
    assert proc.returncode == 0, proc.stderr
    first = [{"role": "user", "content": "Tell me a story"}]
    second = [{"role": "user", "content": "Another one"}]  # after /reset: no history
    (ids1, text1), (ids2, text2) = expected_reply(built, info, first), expected_reply(built, info, second)
    assert proc.stdout == f"{text1}\n{text2}\n"
    tok_lines = [ln for ln in proc.stderr.splitlines() if ln.lstrip().startswith("tok ")]
    assert [int(ln.split()[2]) for ln in tok_lines] == ids1 + ids2
    summaries = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert len(summaries) == 2 and all(f"[{N} tokens" in s for s in summaries)
    counts = [int(re.search(r"([\d,]+) instructions", ln).group(1).replace(",", "")) for ln in tok_lines]
    if board == "host":
        assert set(counts) == {0}  # the host cannot count
    else:
        assert all(c > 0 for c in counts)  # QEMU -icount: instructions per token


def test_the_next_turn_continues_the_conversation_as_tokens(tmp_path):
    """Turn 2 is turn 1's prompt, the device's own reply tokens and the
    template's text for the next user turn (chat.turn_ids): the device keeps
    turn 1 in its KV cache and prefills only the new turn (multi-turn KV
    reuse); its reply is the reference's for that whole token sequence."""
    need("cmake")
    built = build_case(tmp_path, "llama-tied-gqa", 32, "host")
    info = ModelInfo.load(built.out)
    proc = chat(built.out, "Hello\nAnd then?\n", "--system", "Be brief.", "--timing", "summary")
    assert proc.returncode == 0, proc.stderr
    system = [{"role": "system", "content": "Be brief."}]
    ids1 = chat_prompt_ids(info, system + [{"role": "user", "content": "Hello"}])
    reply1, text1 = expected_reply_ids(built, info, ids1)
    ids2 = ids1 + reply1 + turn_ids(info, system, "And then?", after_eos=False)
    _, text2 = expected_reply_ids(built, info, ids2)
    assert proc.stdout == f"{text1}\n{text2}\n"
    assert info.tokenizer.decode(ids2).endswith("\nUser: And then?\nAssistant:")
    summaries = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert f"for {len(ids1)} tokens;" in summaries[0] and "kept" not in summaries[0]
    assert f"for {len(ids2) - len(ids1) - len(reply1) + 1} tokens, {len(ids1) + len(reply1) - 1} kept on the " \
           "device;" in summaries[1]
