"""The stream pass (codegen/lower/stream.py): chunks of whole tiles covering every
matrix byte, the pin rule, the plan counting the stream buffers, the
schedule in report.json and `report`, determinism, and option errors."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tinyllm_gen.board import load_board
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from plans import plan_streamed
from tinyllm_gen.kernels import ArgmaxClassifier, MatvecQ4x4, PinCandidate, StreamedMatvec
from tinyllm_gen.kernels.chunks import chunks_of
from tinyllm_gen.kernels.refs import Q4Ref
from tinyllm_gen.lower.records import StepSource, StreamOptions
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.lower.stream import choose_pinned, pin_candidates, slot_bytes, stream_step
from tinyllm_gen.quant.formats import q4x4_bytes_of

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"


@pytest.mark.parametrize("rows,cols,group,chunk", [(64, 64, 32, 1024), (172, 64, 32, 16384), (5, 96, 64, 10),
                                                   (512, 64, 32, 4096), (344, 172, 32, 3000)])
def test_chunks_are_whole_tiles_covering_the_matrix(rows, cols, group, chunk):
    m = Q4Ref("w", rows, cols, group, -1, -1, "q4x4")
    per_rows, chunks = chunks_of(m, chunk)
    tile = q4x4_bytes_of(4, cols, group)
    assert per_rows % 4 == 0
    assert chunks[0].offset == 0 and chunks[0].row0 == 0
    for a, b in zip(chunks, chunks[1:]):
        assert b.offset == a.offset + a.nbytes and b.row0 == a.row0 + a.rows
    last = chunks[-1]
    assert last.offset + last.nbytes == q4x4_bytes_of(rows, cols, group) and last.row0 + last.rows == rows
    for c in chunks:
        assert c.nbytes % tile == 0 and (c.nbytes <= chunk or c.nbytes == tile)
        assert c.copy_bytes % 32 == 0 and 0 <= c.copy_bytes - c.nbytes < 32


def test_pin_rule_value_then_size():
    cands = [PinCandidate("rope.cos", "f32", 1000, 1 / 64), PinCandidate("big", "q4x4", 5000, 1.0),
             PinCandidate("small", "q4x4", 600, 1.0), PinCandidate("embed", "q4x4", 400, 1 / 128)]
    cands.sort(key=lambda p: (-p.value, -p.nbytes, p.name))
    assert choose_pinned(cands, slot_bytes(5000)) == {"big"}
    assert choose_pinned(cands, slot_bytes(5000) + slot_bytes(600) + slot_bytes(400)) == {"big", "small", "embed"}
    assert choose_pinned(cands, 10 ** 9) == {"big", "small", "embed", "rope.cos"}


def _shape():
    g = load_model(STORY).graph
    return StepSource(g, 32, 8, "cortex-m7", "rtn")


def test_stream_all_replaces_every_matvec_and_declares_two_dma_buffers():
    step = lower_step(_shape(), "greedy")
    out = stream_step(step, StreamOptions("all", 4096), 64)
    assert stream_step(step, StreamOptions("off"), 64) is step
    assert not any(isinstance(c.args, (MatvecQ4x4, ArgmaxClassifier)) for c in out.calls)
    assert sum(isinstance(c.args, StreamedMatvec) for c in out.calls) == \
        sum(isinstance(c.args, MatvecQ4x4) for c in step.calls)
    bufs = [d for d in out.decls if d.kind == "stream"]
    assert [d.name for d in bufs] == ["stream.buf0", "stream.buf1"]
    assert all(d.placement == "dma" and d.span == "always" and d.align == 32 for d in bufs)
    assert out.stream.buffer_bytes <= 4096 and out.stream.n_chunks > len(step.calls) // 4
    with pytest.raises(UserError, match="--kernels cortex-m7"):
        stream_step(replace(step, kernels="portable"), StreamOptions("all"), 64)


def test_plan_counts_stream_buffers_and_auto_pins_the_260k_blob():
    board = load_board("weact-h750")
    off, _ = plan_streamed(_shape(), 64, 512 * 1024, board, "off")
    on, opts = plan_streamed(_shape(), 64, 512 * 1024, board, "all")
    assert on.plan.total_bytes >= off.plan.total_bytes + 2 * 1024  # two stream buffers on the budget
    assert {b.region for b in on.plan.buffers if b.request.kind == "stream"} <= set(board.memory.placement["dma"])
    auto, pins = plan_streamed(_shape(), 64, 512 * 1024, board, "auto")
    names = {p.name for p in pin_candidates(lower_step(_shape()), 64)}
    assert pins.pinned == names  # everything fits: the whole blob is pinned
    assert auto.plan.buffer("stream.pinned").region in board.memory.placement["bulk"]
    host, none = plan_streamed(_shape(), 64, 512 * 1024, load_board("host"), "auto")
    assert none is None  # weights linked in: nothing to stream
    with pytest.raises(UserError, match="per-channel"):
        plan_streamed(replace(_shape(), method="per-channel"), 64, 512 * 1024, board, "all")


def test_schedule_in_report_deterministic(tmp_path):
    opts = CompileOptions(board="host", kernels="cortex-m7", stream="all", stream_chunk=2048, max_seq=32)
    a, b = compile_path(STORY, opts), compile_path(STORY, opts)
    assert a.tree.files == b.tree.files
    doc = json.loads(a.tree.files["report.json"])["stream_schedule"]
    assert doc["mode"] == "all" and doc["chunks_per_step"] == len(doc["chunks"])
    assert [c["index"] for c in doc["chunks"]] == list(range(len(doc["chunks"])))
    assert all(c["nbytes"] <= 2048 or c["rows"] == 4 for c in doc["chunks"])
    calls = [c["call"] for c in doc["chunks"]]
    assert calls == sorted(calls)  # execution order
    src = a.tree.files["src/tllm_model.c"].decode()
    table = src[src.index("STREAM_RUNS["):src.index("};", src.index("STREAM_RUNS["))]
    runs = len({c["call"] for c in doc["chunks"]})  # one run per streamed call
    assert table.count("}, /* ") == runs and runs < len(doc["chunks"])
    out = tmp_path / "o"
    write_tree(a.tree, out)
    text = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "report", str(out)], capture_output=True,
                          text=True, check=True).stdout
    assert "weight stream (--stream all)" in text and "layer 0 attn.wq" in text


def test_plan_cli_prints_the_trade_off():
    text = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(STORY), "--board", "weact-h750",
                           "--stream", "auto"], capture_output=True, text=True, check=True).stdout
    assert "weight stream trade-off" in text and "DWUP tok/s" in text and "pinned in SRAM" in text
