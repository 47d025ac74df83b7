"""Weight streaming (issue 14) in the emulator tiers: the Cortex-M7 build
under QEMU mps2-an500 (synchronous copy behind tllm_board_copy_start/wait)
and the STM32H750 images under Unicorn, where the MDMA model moves the
chunks and stops the run at the first broken rule (a CPU read of a stream
buffer still in flight among them). Tokens equal the reference; the
bundled 260K model with --stream auto pins its whole blob and reads no
weights from flash after the boot copy."""
import json
from collections import Counter
from pathlib import Path

import pytest

from firmware_harness import (GREEDY, SHAPES, TOP_P, Built, assert_identical, need, prompt_for, reference_tokens,
                              speculate_k)
from tinymodels import make_hf_model
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.run.protocol import pack_request, parse_output
from tinyllm_gen.run.result import decode as _decode
from tinyllm_gen.run.unicorn import run_unicorn
from tinyllm_gen.kernels import StreamedEmbed
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("stream-emu")


def build_streamed(root, model_dir, tag, board, kv_bits=8, stream="all", chunk=None, max_seq=None, sampler="full"):
    out = root / f"out-{tag}-{board}-kv{kv_bits}-{stream}-{chunk}-{sampler}"
    compiled = compile_path(model_dir, CompileOptions(board=board, kv_bits=kv_bits, stream=stream,
                                                      stream_chunk=chunk, max_seq=max_seq, sampler=sampler))
    write_tree(compiled.tree, out)
    build(out)
    return Built(model_dir, out, kv_bits), compiled


def tiny(root, shape):
    model_dir = root / f"model-{shape}"
    if not model_dir.exists():
        make_hf_model(model_dir, eos=None, **SHAPES[shape])
    return model_dir


@pytest.mark.parametrize("shape,kv_bits,chunk", [("qwen2-bias-untied", 8, 1024), ("llama-tied-gqa", 4, None)])
def test_streamed_under_qemu(root, shape, kv_bits, chunk):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    built, _ = build_streamed(root, tiny(root, shape), shape, "qemu-mps2-an500", kv_bits, chunk=chunk)
    assert "tllm_stream_matvec_q4x4(&weight_stream" in (built.out / "src" / "tllm_model.c").read_text()
    assert_identical(built, 32, GREEDY)
    assert_identical(built, 32, TOP_P)


def _unicorn(built, board, ids, n, sampling, watch=False):
    request = built.out / "build" / "request.bin"
    request.write_bytes(pack_request(ids, n, sampling, 0))
    return run_unicorn(built.out / "build" / "firmware.elf", load_board(board), built.out / "weights.bin", request,
                       timeout_s=BACKSTOP_S, watch_weight_reads=watch)


# One sampling mode per (board, KV) pair: both boards, both KV precisions and
# both modes covered.
@pytest.mark.parametrize("board,kv_bits,sampling,chunk", [
    ("stm32h750b-dk", 8, GREEDY, None), ("stm32h750b-dk", 4, TOP_P, 4096),
    ("weact-h750", 8, TOP_P, 4096), ("weact-h750", 4, GREEDY, None)])
def test_streamed_h750_under_unicorn(root, board, kv_bits, sampling, chunk):
    """MDMA fills the stream buffers (DTCM, first in the board's "dma" class:
    uncached, so no D-cache maintenance; the cacheable AXI destination is
    tests/emu/test_mdma_unicorn.py's) while the core computes; its misuse
    rules are armed for the whole run."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built, compiled = build_streamed(root, tiny(root, "qwen2-bias-untied"), "qwen2", board, kv_bits, chunk=chunk)
    plan = json.loads((built.out / "report.json").read_text())
    bufs = {b["name"]: b for b in plan["buffers"]}
    assert bufs["stream.buf0"]["region"] == bufs["stream.buf1"]["region"] == "dtcm"
    assert bufs["stream.buf0"]["placement"] == "dma" and bufs["stream.buf0"]["offset"] % 32 == 0
    assert_identical(built, 32, sampling)
    ids = prompt_for(built.model_dir)
    res = _unicorn(built, board, ids, 4, GREEDY)
    assert res.exit_code == 0 and not res.error and res.violations == []
    sched = plan["stream_schedule"]
    per_step = sum(c["copy_bytes"] for c in sched["chunks"])
    body = sum(c["copy_bytes"] for c in sched["chunks"][:sched["head_chunk"]])
    assert 0 < body < per_step  # the classifier streams: the head's chunks are the table's last
    embed = sum(c.args.copy_bytes for c in compiled.program.calls if isinstance(c.args, StreamedEmbed))
    # the body's chunks once per prefill pass (prefill_batch prompt tokens each) and per decode step,
    # the head's only where logits are read (the last pass, 3 decode steps), every token's embedding
    # tile, plus perhaps the last step's prefetch
    assert compiled.program.prefill_batch == 4  # auto: the planner's largest
    moved = stream_bytes(sched, len(ids), 4, 3, embed)
    assert moved <= res.mdma.bytes_moved <= moved + sched["chunks"][0]["copy_bytes"]


def stream_bytes(sched: dict, prompt: int, batch: int, decoded: int, embed: int) -> int:
    """Bytes the MDMA moves for a prompt of `prompt` tokens prefilled `batch`
    per pass and `decoded` decode steps after it."""
    per_step = sum(c["copy_bytes"] for c in sched["chunks"])
    body = sum(c["copy_bytes"] for c in sched["chunks"][:sched["head_chunk"]])
    passes = -(-prompt // batch)
    return (passes - 1) * body + (1 + decoded) * per_step + (prompt + decoded) * embed


def test_batched_prefill_reads_the_blob_once_per_batch_h750(root):
    """A 32-token prompt on the WeAct board with --prefill-batch 4 moves the
    layers' chunks through the MDMA ceil(32 / 4) = 8 times (the issue's
    target), against 32 token by token; tokens as the reference's."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    model_dir = tiny(root, "llama-tied-gqa")
    out = root / "out-prefill32-weact"
    compiled = compile_path(model_dir, CompileOptions(board="weact-h750", stream="all", stream_chunk=2048,
                                                      prefill_batch=4))
    write_tree(compiled.tree, out)
    build(out)
    ids = [(7 * i + 3) % 300 for i in range(32)]
    request = out / "build" / "request.bin"
    request.write_bytes(pack_request(ids, 2, GREEDY, 0))
    res = run_unicorn(out / "build" / "firmware.elf", load_board("weact-h750"), out / "weights.bin", request,
                      timeout_s=BACKSTOP_S)
    assert res.exit_code == 0 and not res.error and res.violations == []
    sched = json.loads((out / "report.json").read_text())["stream_schedule"]
    embed = sum(c.args.copy_bytes for c in compiled.program.calls if isinstance(c.args, StreamedEmbed))
    moved = stream_bytes(sched, 32, 4, 1, embed)
    assert moved <= res.mdma.bytes_moved <= moved + sched["chunks"][0]["copy_bytes"]
    assert res.mdma.bytes_moved < stream_bytes(sched, 32, 1, 1, embed) * 0.3
    assert parse_output(_decode(res.output)).generated_ids == reference_tokens(model_dir, 32, ids, GREEDY, 96)[:2]


@pytest.mark.parametrize("board", ["stm32h750b-dk", "weact-h750"])
def test_story260k_pinned_reads_no_flash_after_boot(root, board):
    """--stream auto: the whole 260K blob fits the SRAM the plan leaves, so
    every matrix, vector and table is pinned (copied once by MDMA at the
    first step) and no CPU load touches the QSPI weights afterwards."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built, compiled = build_streamed(root, STORY, "story", board, stream="auto", max_seq=64)
    sched = json.loads((built.out / "report.json").read_text())["stream_schedule"]
    assert sched["chunks_per_step"] == 0 and sched["buffer_bytes"] == 0
    names = {e.name for e in compiled.program.blob.entries if e.kind in ("q4x4", "f32")}
    assert {p["name"] for p in sched["pinned"]} == names
    ids = prompt_for(built.model_dir)
    for sampling in (GREEDY, TOP_P):
        fw = run_firmware(built.out, ids, 24, sampling)
        ref = reference_tokens(built.model_dir, 32, ids, sampling, 64, k=speculate_k(built.out))[:24]
        assert fw.output.generated_ids == ref
    res = _unicorn(built, board, ids, 24, TOP_P, watch=True)
    assert res.exit_code == 0 and not res.error and res.violations == []
    assert res.weight_reads_after_first_copy == 0
    assert res.mdma.bytes_moved == sum(p["copy_bytes"] for p in sched["pinned"])


def test_story260k_pinned_under_qemu(root):
    """--stream auto under QEMU (weights in PSRAM): the pinned copy made by
    the synchronous hook at the first step, the same tokens."""
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    built, _ = build_streamed(root, STORY, "story", "qemu-mps2-an500", stream="auto", max_seq=64)
    sched = json.loads((built.out / "report.json").read_text())["stream_schedule"]
    assert sched["pinned"] and "TLLM_P(" in (built.out / "src" / "tllm_model.c").read_text()
    ids = prompt_for(built.model_dir)
    for sampling in (GREEDY, TOP_P):
        fw = run_firmware(built.out, ids, 24, sampling)
        assert fw.output.generated_ids == reference_tokens(built.model_dir, 32, ids, sampling, 64,
                                                           k=speculate_k(built.out))[:24]


def expected_transfers(sched: dict, steps: list[tuple[list[int], bool]], embed_src) -> list[int]:
    """Blob offsets of the MDMA's transfers in request order, as
    firmware/tllm_stream.h makes them: chunk 0 at boot; per step (a prefill
    pass or a decode step: its tokens, whether it runs the head) each
    token's embedding tile, then per chunk taken the next chunk's start,
    wrapping to chunk 0 at the end of the table, or at the head's first
    chunk when the step skips the head."""
    srcs = [c["src"] for c in sched["chunks"]]
    head, n = sched["head_chunk"], len(srcs)
    out, nxt = [srcs[0]], 0
    for tokens, need_logits in steps:
        out += [embed_src(t) for t in tokens]
        for _ in range(n if need_logits else head):
            k = nxt + 1
            nxt = 0 if k == n or (not need_logits and k == head) else k
            out.append(srcs[nxt])
    return out


def test_prefetch_crosses_matrices_layers_and_steps_h750(root):
    """The MDMA's own request log under Unicorn: every chunk is requested
    while the previous one is computed on, in the schedule's order, across
    matrix, layer and step boundaries (the next step's chunk 0 is requested
    by the last chunk of this one, the head skipped in prefill passes), with
    no chunk fetched twice and the two stream buffers alternating."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built, compiled = build_streamed(root, tiny(root, "qwen2-bias-untied"), "qwen2-order", "weact-h750",
                                     chunk=2048)
    assert compiled.program.prefill_batch == 4
    ids = [(11 * i + 5) % 320 for i in range(9)]  # prefill passes of 4, 4 and 1 tokens
    res = _unicorn(built, "weact-h750", ids, 3, GREEDY)
    assert res.exit_code == 0 and not res.error and res.violations == []
    sched = json.loads((built.out / "report.json").read_text())["stream_schedule"]
    emb = next(c.args for c in compiled.program.calls if isinstance(c.args, StreamedEmbed))
    base = load_board("weact-h750").weights.address
    generated = parse_output(_decode(res.output)).generated_ids
    steps = [(ids[0:4], False), (ids[4:8], False), (ids[8:9], True), (generated[0:1], True), (generated[1:2], True)]
    want = expected_transfers(sched, steps, lambda t: emb.table.packed_offset + (t // 4) * emb.tile_bytes)
    got = [src - base for src, _, _ in res.mdma.started]
    assert got == want
    buffers = [dst for (src, dst, _), w in zip(res.mdma.started, want) if w in {c["src"] for c in sched["chunks"]}]
    assert len(set(buffers)) == 2
    per_matrix = Counter(c["matrix"] for c in sched["chunks"])
    assert len(per_matrix) >= 3 * 6 and max(per_matrix.values()) > 1  # 3 layers' matrices, some of several chunks
