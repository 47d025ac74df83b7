"""A `compile --speculate draft:DRAFT:k` tree (the target and its draft model
in one firmware, codegen/compile_draft.py) on the Cortex-M7: QEMU
mps2-an500 with the weights pinned (int8 KV) and streamed (`--stream all`,
int4 KV: both models stream, and the board's one-transfer-at-a-time
contract is checked by its copy code), and the STM32H750B-DK under Unicorn
and the WeAct H750 under Unicorn with the weights in external flash streamed
by the MDMA, and the DK's tree under Renode's own board model.  A greedy
generation's tokens are the speculative reference's with the same draft and
plain decoding's, and every pass's token count is the reference's (QEMU
also into the context's end); a sampled one's (temperature, top-p, a seed)
tokens and passes are the reference's too: its draft's q computed again
after a rejection by a repeated draft step, also between two streams, or
(a top-K tree) kept per guess; and a vocabulary-pruned student's greedy
ones under QEMU, its id tables in the code flash."""
import json
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from drafts import draft_reference, target_and_student, vocab_pruned_student
from firmware_harness import need
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, write_tree
from tinyllm_gen.compile_draft import compile_draft_path
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.run.check import check_tokens
from tinyllm_gen.run.firmware import run_firmware

pytestmark = pytest.mark.emu
pytest.importorskip("torch")

PROMPT = "Once upon a time there was a little cat. The"
SEQ, K = 64, 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-emu")
    target, draft = target_and_student(root)
    return {"root": root, "target": target, "draft": draft}


def built(models, board: str, draft: Path | None = None, **opts) -> Path:
    need("arm-none-eabi-gcc")
    need("cmake")
    draft = draft or models["draft"]
    out = models["root"] / (board + "-" + draft.name + "-"
                            + "-".join(f"{k}{v}" for k, v in opts.items()).replace(":", "_"))  # make
    compiled = compile_draft_path(models["target"], CompileOptions(board=board, max_seq=SEQ,
                                                                   speculate=f"draft:{draft}:{K}", **opts))
    write_tree(compiled.tree, out)
    build(out)
    return out


def check(models, out: Path, max_new: int, kv_bits: int = 8, draft: Path | None = None, prompt: str = PROMPT,
          longest: int | None = K + 1, emulator: str = "auto") -> None:
    """longest: the longest pass's tokens (None: more than 1, some guess kept)."""
    ids = load_model(models["target"]).tokenizer.encode(prompt)
    got = run_firmware(out, ids, max_new, SamplingOptions(), timeout_s=BACKSTOP_S, emulator=emulator).output
    spec, plain = draft_reference(models["target"], draft or models["draft"], ids, max_new, SEQ, K, kv_bits)
    assert (got.generated_ids, got.stop_reason) == (spec.generated_ids, spec.stop_reason)
    assert got.generated_ids == plain.generated_ids and got.generated_ids
    assert got.pass_tokens == spec.pass_tokens
    assert max(got.pass_tokens) == longest if longest is not None else max(got.pass_tokens) > 1
    assert got.canary_ok is True and got.canary_regions["draft"] is True  # its arenas are guarded too


def check_sampled(models, out: Path, kv_bits: int = 8, top_k: int = 0) -> None:
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    sampling = SamplingOptions(1.1, 0.9, 5)
    got = run_firmware(out, ids, 16, sampling, timeout_s=BACKSTOP_S).output
    spec, _ = draft_reference(models["target"], models["draft"], ids, 16, SEQ, K, kv_bits, sampling=sampling,
                              top_k=top_k)
    assert got.generated_ids == spec.generated_ids and got.pass_tokens == spec.pass_tokens
    assert spec.guessed > spec.accepted > 0  # kept and rejected guesses
    # run --check's reference: both models rebuilt from the tree (the draft's blob after the target's, external)
    tok = load_model(models["target"]).tokenizer
    assert check_tokens(out, tok, ids, 16, sampling, got.generated_ids) is None


QEMU_CASES = [dict(), dict(kv_bits=4, stream="all", stream_chunk=2048)]


@pytest.mark.parametrize("opts", QEMU_CASES, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()) or "default")
def test_the_draft_tree_under_qemu(models, opts):
    need("qemu-system-arm")
    out = built(models, "qemu-mps2-an500", **opts)
    for max_new in (20, 60):  # the token limit; the context's end (20 prompt tokens + 60 > 64)
        check(models, out, max_new, opts.get("kv_bits", 8))
    check_sampled(models, out, opts.get("kv_bits", 8))


def test_a_top_k_draft_tree_under_qemu_keeps_each_guess_q(models):
    """topk:8: the draft keeps its q per guess (K candidates each) instead of stepping again."""
    need("qemu-system-arm")
    out = built(models, "qemu-mps2-an500", sampler="topk:8")
    assert "tllm_draft_guess_values" in (out / "draft" / "tllm_draft_table.c").read_text()
    check_sampled(models, out, top_k=8)


def test_a_vocabulary_pruned_draft_tree_under_qemu(models):
    """A compress --prune-vocab student (270 of the target's 300 tokens): its id tables in the draft table's
    C, in the code flash and counted there; the tokens and passes the reference's."""
    need("qemu-system-arm")
    draft, _ = vocab_pruned_student(models["target"], models["root"] / "pruned", 270)
    out = built(models, "qemu-mps2-an500", draft)
    d = json.loads((out / "manifest.json").read_text())["draft"]
    assert d["id_table_bytes"] == 2 * (300 + 270) and d["code_flash_bytes"] > d["id_table_bytes"]
    for max_new in (20, 60):
        check(models, out, max_new, draft=draft, prompt="Once upon a time there was a little dog. The", longest=None)


@pytest.fixture(scope="module")
def h750_trees(models):
    """board -> its streamed draft tree, built once for Unicorn and Renode."""
    trees = {}

    def get(board: str) -> Path:
        if board not in trees:
            trees[board] = built(models, board, stream="all")
        return trees[board]
    return get


@pytest.mark.parametrize("board", ["stm32h750b-dk", "weact-h750"])
def test_the_draft_tree_on_the_h750_boards_under_unicorn_with_the_mdma_stream(models, h750_trees, board):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    out = h750_trees(board)
    check(models, out, 16)
    if board == "stm32h750b-dk":
        check_sampled(models, out)


def test_the_draft_tree_on_the_dk_under_renode(models, h750_trees):
    """Renode's own STM32H743 model (with OUT/renode/'s overlay), not our register models."""
    from tinyllm_gen.run.renode import find_renode, renode_missing_reason

    if find_renode() is None:
        pytest.skip(renode_missing_reason())
    check(models, h750_trees("stm32h750b-dk"), 12, emulator="renode")
