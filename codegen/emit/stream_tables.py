"""The weight stream's tables after binding: the schedule of chunks (blob
offsets, sizes, which call consumes each and which buffer it lands in) and
the pin table, as tllm_model.c prints them and the reports show them
(the stream pass that decides them is lower/stream.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..bind import Program
from ..kernels import StreamedEmbed
from ..kernels.chunks import LINE, line_up
from ..kernels.refs import blob_offset
from ..kernels.sizes import matrix_bytes
from ..quant.formats import GGUF_TILED

# the blob entries the stream may pin: tiled matrices and float vectors
PINNABLE_KINDS = ("q4x4", "f32") + tuple("ggufx4." + q.lower() for q in GGUF_TILED)



@dataclass(frozen=True)
class ScheduledChunk:
    index: int  # position in the step's stream (the firmware's table index)
    call: int  # the consuming kernel call's index in the step
    label: str
    matrix: str
    src: int  # blob offset
    nbytes: int
    copy_bytes: int
    row0: int
    rows: int
    buffer: int  # stream buffer it lands in, in the step's first run (odd stream lengths, and steps
    #              that skip the head, change the parity of the steps after them)


@dataclass(frozen=True)
class Pin:
    name: str
    src: int  # blob offset the copy starts at (a line at or below the entry)
    copy_bytes: int
    dst: int  # offset in stream.pinned (a multiple of the line)
    at: int  # where the entry itself lands in stream.pinned


def schedule_of(program: Program) -> list[ScheduledChunk]:
    out = []
    for i, call in enumerate(program.calls):
        a = call.args
        if a.stream_chunks():
            for ch in a.stream_chunks():
                k = len(out)
                out.append(ScheduledChunk(k, i, call.label if call.layer is None else f"layer {call.layer} {call.label}",
                                          a.matrix.name, blob_offset(a.matrix) + ch.offset, ch.nbytes,
                                          ch.copy_bytes, ch.row0, ch.rows, k % 2))
    total = len(program.blob.data)
    for ch in out:
        if ch.src + ch.copy_bytes > total:
            raise AssertionError(f"chunk {ch.index} reads past the blob ({ch.src + ch.copy_bytes} > {total})")
    for call in program.calls:  # the embedding's last tile, rounded up to a line, too
        a = call.args
        if isinstance(a, StreamedEmbed):
            m = a.table
            last = blob_offset(m) + matrix_bytes(m) - a.tile_bytes
            if last + a.copy_bytes > total:
                raise AssertionError(f"the embedding's last tile reads past the blob ({last + a.copy_bytes} > {total})")
    return out


def head_chunk(program: Program) -> int:
    """Index of the head's first chunk (the classifier's, after every layer's):
    a step without logits skips from there to the next step's chunk 0
    (tllm_stream_begin_step).  The chunk count when the head streams nothing."""
    sched = schedule_of(program)
    n = sum(c.call < program.head_start for c in sched)
    assert all(c.call >= program.head_start for c in sched[n:]), "chunks are in call order: body, then head"
    return n


def stream_runs(program: Program) -> list[dict]:
    """The C table (tllm_stream_run): one run per streamed call, its chunks
    back to back and equal but the last (kernels/chunks.chunks_of cuts them so)."""
    runs = []
    for i, call in enumerate(program.calls):
        chunks = call.args.stream_chunks()
        if not chunks:
            continue
        for a, b in zip(chunks, chunks[1:]):
            assert b.offset == a.offset + a.nbytes and (b is chunks[-1] or b.nbytes == a.nbytes), call.label
        where = call.label if call.layer is None else f"layer {call.layer} {call.label}"
        runs.append({"src": blob_offset(call.args.matrix) + chunks[0].offset, "stride": chunks[0].nbytes,
                     "len": chunks[0].copy_bytes, "last_len": chunks[-1].copy_bytes, "count": len(chunks),
                     "call": i, "what": f"{where}: {len(chunks)} x {call.args.streamed_rows() or chunks[0].rows} rows"})
    return runs


def head_run(program: Program) -> int:
    """Index of the head's first run (the run count when the head streams nothing)."""
    runs = stream_runs(program)
    n = sum(r["call"] < program.head_start for r in runs)
    assert all(r["call"] >= program.head_start for r in runs[n:]), "runs are in call order: body, then head"
    return n


def pin_table(program: Program) -> list[Pin]:
    plan = program.stream
    if plan is None:
        return []
    total = len(program.blob.data)
    by_name = {e.name: e for e in program.blob.entries if e.kind in PINNABLE_KINDS}
    out, dst = [], 0
    for name, slot in plan.pinned:
        e = by_name[name]
        src0 = e.offset & ~(LINE - 1)
        src1 = min(line_up(e.offset + e.nbytes), total)
        if (src1 - src0) % LINE:
            src0 -= (src1 - src0) % LINE
        assert src0 >= 0 and src1 - src0 <= slot, name
        out.append(Pin(name, src0, src1 - src0, dst, dst + e.offset - src0))
        dst += slot
    return out


def pinned_at(program: Program) -> dict[str, int]:
    """Entry name -> its offset in stream.pinned (the C descriptors point there)."""
    return {p.name: p.at for p in pin_table(program)}


def schedule_json(program: Program) -> dict | None:
    plan = program.stream
    if plan is None:
        return None
    sched = schedule_of(program)
    return {
        "mode": plan.options.mode, "chunk_bytes": plan.options.chunk_bytes, "buffers": 2 if plan.buffer_bytes else 0,
        "buffer_bytes": plan.buffer_bytes, "chunks_per_step": len(sched),
        "streamed_bytes_per_step": sum(c.nbytes for c in sched),
        "pinned_bytes": plan.pinned_bytes, "head_chunk": head_chunk(program),
        "pinned": [{"name": p.name, "src": p.src, "copy_bytes": p.copy_bytes, "dst": p.dst} for p in pin_table(program)],
        "chunks": [dataclasses.asdict(c) for c in sched],
    }


def schedule_text(doc: dict | None) -> str:
    if not doc:
        return "weight stream: off (weights read in place)"
    lines = [f"weight stream (--stream {doc['mode']}): {doc['chunks_per_step']} chunks per step, "
             f"{doc['streamed_bytes_per_step']:,} B streamed per token, 2 x {doc['buffer_bytes']:,} B stream buffers, "
             f"{len(doc['pinned'])} entries pinned ({doc['pinned_bytes']:,} B of SRAM, copied at boot)"]
    if doc.get("head_chunk", doc["chunks_per_step"]) < doc["chunks_per_step"]:  # an older OUT's report has none
        lines.append(f"  the head (classifier) is chunks {doc['head_chunk']}.., skipped for every prompt token "
                     "but the last")
    if doc["chunks"]:
        lines.append(f"  {'chunk':>5} {'call':>4} {'buf':>3} {'src':>10} {'bytes':>7} {'rows':>11}  matrix")
        for c in doc["chunks"]:
            lines.append(f"  {c['index']:>5} {c['call']:>4} {c['buffer']:>3} 0x{c['src']:08x} {c['nbytes']:>7} "
                         f"{c['row0']:>5}+{c['rows']:<5}  {c['label']} ({c['matrix']})")
    for p in doc["pinned"]:
        lines.append(f"  pinned {p['name']}: blob 0x{p['src']:08x} +{p['copy_bytes']} -> stream.pinned+0x{p['dst']:x}")
    return "\n".join(lines)
