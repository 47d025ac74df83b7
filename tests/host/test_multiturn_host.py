"""Multi-turn KV reuse in the host tier: the bundled story model built for
the host runs a five-turn conversation on one firmware process (its console
on standard input), every turn after the first a continue that carries only
the new turn's ids; each turn's tokens equal one fresh request of the whole
conversation so far (on the firmware and on the reference, teacher-forcing
the same turns) and the reference's Session's, and the board's history
count and CRC equal the host's.  Also: a continue naming another history is
refused (status 6, one line on the host) and the same prompt goes fresh; a
continue past the context is refused (7) and leaves the conversation held;
max_new_tokens 0 ends it; history fields without the continue flag are a
bad request; `serve` continues a request that extends the previous one
token for token and prefills any other afresh.  A speculative build (--speculate lookup:3) keeps the same
equalities, greedy and sampled: only delivered tokens enter its history."""
from __future__ import annotations

import json
import struct
import threading
import urllib.request
import zlib
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import GREEDY, TOP_P, need
from tinyllm_gen.build.cmake import build
from tinyllm_gen.build.out import image_path, read_manifest
from tinyllm_gen.board import load_board
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.lower.speculate import built_k
from tinyllm_gen.reference.executor import Executor, QuantKernels
from tinyllm_gen.reference.session import ContextFull, Session
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.run.backends import ModelInfo, open_backend
from tinyllm_gen.run.check import tree_reference
from tinyllm_gen.run.console import talk_serial
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import history_crc, pack_request, parse_output
from tinyllm_gen.run.serve import make_server
from tinyllm_gen.run.session import DeviceSession, HostPort

pytestmark = pytest.mark.host

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
MAX_SEQ = 128
N = 8
TURNS_TEXT = ("Once upon a time there was a cat.", " The cat saw a dog.", " They played in the park.",
              " Then it rained.", " The end.")


@pytest.fixture(scope="module", params=["plain", "speculate"])
def story(request, tmp_path_factory):
    need("cmake")
    opts = CompileOptions(board="host", max_seq=MAX_SEQ,
                          **({"speculate": "lookup:3"} if request.param == "speculate" else {}))
    compiled = compile_path(STORY, opts)
    out = tmp_path_factory.mktemp(f"multiturn-{request.param}") / "out"
    write_tree(compiled.tree, out)
    build(out)
    tok = compiled.model.tokenizer
    turns = [tok.encode(t, bos=i == 0) for i, t in enumerate(TURNS_TEXT)]
    return out, turns


def executor(out: Path):
    qg, m = tree_reference(out)
    return Executor(qg.graph, QuantKernels(qg, int(m["max_seq"]))), qg.config.eos_ids, built_k(m["options"])


def image(out: Path) -> Path:
    return image_path(out, load_board(read_manifest(out)["board"]))


@pytest.mark.parametrize("sampling", [GREEDY, TOP_P], ids=["greedy", "top-p"])
def test_five_turns_continue_and_equal_one_long_request(story, sampling):
    out, turns = story
    ex, eos, k = executor(out)
    ref = Session(ex, MAX_SEQ, eos, k=k)
    fresh_ex = executor(out)[0]
    notes: list[str] = []
    conversation: list[int] = []
    passes: list[int] = []
    with HostPort(image(out)) as port:
        session = DeviceSession(port, BACKSTOP_S, note=notes.append)
        for i, turn in enumerate(turns):
            prompt = conversation + turn
            t = session.generate(prompt, N, sampling)
            assert t.status == 0 and t.refused is None
            assert (t.sent, t.reused) == ((len(turn), len(conversation) - 1) if i else (len(prompt), 0))
            got = t.output.generated_ids
            # the reference's session, and one fresh request of the whole conversation (reference, firmware)
            assert got == ref.generate(turn, N, sampling).generated_ids
            assert got == generate_speculative(fresh_ex, prompt, N, MAX_SEQ, eos, sampling, k=k).generated_ids
            assert got == run_firmware(out, prompt, N, sampling, timeout_s=BACKSTOP_S).output.generated_ids
            conversation = prompt + got
            assert t.output.history == (len(conversation), history_crc(conversation))
            passes += t.output.pass_tokens if i else []
            assert ref.tokens == conversation
    assert notes == []
    assert len(conversation) > 5 * N
    if k:  # a continued turn's passes delivered accepted guesses (and rolled back after rejected ones)
        assert max(passes) > 1 and len(passes) < 4 * N


def test_a_continue_of_another_history_is_refused_then_sent_fresh(story):
    out, turns = story
    ex, eos, k = executor(out)
    notes: list[str] = []
    with HostPort(image(out)) as port:
        session = DeviceSession(port, BACKSTOP_S, note=notes.append)
        first = session.generate(turns[0], N, GREEDY)
        assert first.status == 0
        session.held[1] ^= 1  # the host out of step with the board: one id differs
        prompt = session.held + turns[1]
        t = session.generate(prompt, N, GREEDY)
    assert t.status == 0 and t.reused == 0 and t.sent == len(prompt)
    assert "continue refused: the engine holds another conversation" in t.refused
    assert len(notes) == 1 and notes[0].startswith("[the board refused to continue the conversation (")
    assert t.output.generated_ids == generate_speculative(ex, prompt, N, MAX_SEQ, eos, GREEDY, k=k).generated_ids


def _talk(port, request: bytes, wait_ready: bool = False):
    status, text = talk_serial(port, request, BACKSTOP_S, wait_ready=wait_ready)
    return status, parse_output(text)


def test_refusals_keep_or_end_the_held_conversation(story):
    out, turns = story
    ex, eos, k = executor(out)
    ref = Session(ex, MAX_SEQ, eos, k=k)
    with HostPort(image(out)) as port:
        status, o = _talk(port, pack_request(turns[0], N, GREEDY), wait_ready=True)
        assert status == 0 and o.generated_ids == ref.generate(turns[0], N, GREEDY).generated_ids
        held = turns[0] + o.generated_ids
        # past the context: its own status, the conversation kept
        too_long = [turns[1][0]] * (MAX_SEQ - len(held))
        status, o = _talk(port, pack_request(too_long, N, GREEDY, history=held))
        assert status == 7 and "do not fit the context" in o.error and o.generated_ids == []
        with pytest.raises(ContextFull):
            ref.generate(too_long, N, GREEDY)
        status, o = _talk(port, pack_request(turns[1], N, GREEDY, history=held))
        assert status == 0 and o.generated_ids == ref.generate(turns[1], N, GREEDY).generated_ids
        held = held + turns[1] + o.generated_ids
        # another history: refused, kept
        status, o = _talk(port, pack_request(turns[2], N, GREEDY, history=held[:-1]))
        assert status == 6 and f"the board holds {len(held)} tokens crc {history_crc(held):08x}" in o.error
        # history fields without the continue flag: a bad request
        bad = bytearray(pack_request(turns[2], N, GREEDY, history=held))
        bad[10] &= ~0x2
        struct.pack_into("<I", bad, 36, 0)
        struct.pack_into("<I", bad, 36, zlib.crc32(bad))
        status, o = _talk(port, bytes(bad))
        assert status == 3 and "history fields set without the continue flag" in o.error
        # max_new_tokens 0 runs nothing and ends the conversation
        status, o = _talk(port, pack_request(turns[2], 0, GREEDY, history=held))
        assert status == 0 and o.generated_ids == [] and o.history == (0, 0)
        assert ref.generate(turns[2], 0, GREEDY).generated_ids == [] and ref.tokens == []
        status, o = _talk(port, pack_request(turns[3], N, GREEDY, history=held + turns[2]))
        assert status == 6 and "the board holds 0 tokens" in o.error


def _post(server, path: str, body: dict) -> dict:
    host, port = server.server_address[:2]
    req = urllib.request.Request(f"http://{host}:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=BACKSTOP_S) as r:
        return json.loads(r.read())


def test_serve_continues_a_request_that_extends_the_last(story):
    """serve: a prompt that extends the previous request's prompt and tokens token for token is a continue
    (x_tinyllm.kept_tokens), one that does not is a fresh prefill; the tokens are the reference's either way."""
    out, turns = story
    ex, eos, k = executor(out)
    info = ModelInfo.load(out, "story")
    server = make_server(info, open_backend(out, None, BACKSTOP_S), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        def complete(ids):
            x = _post(server, "/v1/completions", {"model": "story", "prompt": ids, "max_tokens": N})["x_tinyllm"]
            want = generate_speculative(ex, ids, N, MAX_SEQ, eos, GREEDY, k=k).generated_ids
            assert x["generated_ids"] == want and x["backend"] == "host"
            return x
        first = complete(turns[0])
        assert first["kept_tokens"] == 0
        held = turns[0] + first["generated_ids"]
        assert complete(held + turns[1])["kept_tokens"] == len(held) - 1
        assert complete(turns[2])["kept_tokens"] == 0  # not an extension: fresh
    finally:
        server.shutdown()
        server.server_close()
        server.device.close()
