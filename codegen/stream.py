"""Weight streaming (DWUP, issue 14): LoweredStep -> LoweredStep, between
lowering and planning.

Boards keep the weights blob in external flash (the H750's QUADSPI window).
Instead of letting the kernels read it in place through the D-cache, the
compiler turns the step's weight reads into a *stream schedule*: every q4x4
matrix the step reads (each linear, the fused gate/up matrix, the
classifier) is split into chunks of whole 4-row tiles (a row range of tiles
is one contiguous byte range of the blob, quant/formats.py), in execution
order.  The firmware (firmware/tllm_stream.h) keeps one transfer in flight:
per chunk it waits for chunk k, starts chunk k+1 into the other of two
stream buffers and computes on chunk k.  The table wraps around, so the
step's last chunk starts the next step's first, and a matrix's last chunk
starts the next matrix's first (across layers too): the link never idles
on a matrix boundary.  The embedding row (its tile depends on the token, so
it cannot be prefetched) is fetched synchronously into the free buffer.

Pinned weights: what fits in the SRAM the plan leaves is copied once at
boot into one "stream.pinned" buffer and never streamed.  Every weight byte
a step reads is read once per token, so the value of pinning an entry is
flash bytes per token saved per byte of SRAM:

    matrices (linears, gate/up, classifier), norm weights, biases   1
    the RoPE tables (one position's row per token)                   1 / max_seq
    the embedding table (one 4-row tile per token)                   1 / ceil(vocab / 4)

`choose_pinned` takes entries by that value, and among equal values the
largest first (first-fit decreasing: the most bytes saved for the SRAM
left; all matrices save the same per byte, so what matters is filling the
space).  The bundled 260K model pins its whole blob: no flash reads after
boot.

Bit-identical by construction: a streamed matvec is the same kernel
(tllm_matvec_q4x4) on the same bytes, one row range at a time, and each
row's arithmetic does not depend on the others.  Norm weights and biases
that are not pinned are read in place (a few hundred bytes per layer).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Union

from .errors import UserError
from .lower import (ArgmaxClassifier, BufferDecl, EmbedQ4, KernelCall, LoweredStep, MatvecQ4x4, Q4Ref, TopKClassifier,
                    VectorRef, refs_of)
from .quant.formats import q4x4_bytes_of

MODES = ("off", "all", "auto")
LINE = 32  # the H750 invalidates whole D-cache lines of a cacheable destination: copies in multiples of 32
BUFFERS = ("stream.buf0", "stream.buf1")
PINNED = "stream.pinned"
DEFAULT_CHUNK_BYTES = 16 * 1024  # timing.DEFAULT_CHUNK_BYTES: two buffers, 1.6% over the flash bound (README)


def line_up(n: int) -> int:
    return -(-n // LINE) * LINE


@dataclass(frozen=True)
class StreamOptions:
    """What `compile --stream` asked for, plus the pinned entries chosen."""

    mode: str = "off"  # off | all | auto
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # at most this many bytes per chunk (whole tiles)
    pinned: frozenset = frozenset()  # blob entry names copied to SRAM at boot


@dataclass(frozen=True)
class Chunk:
    """One transfer of the schedule: rows [row0, row0 + rows) of a matrix,
    bytes [offset, offset + nbytes) of its q4x4 stream (copy_bytes: nbytes
    rounded up to a D-cache line; the few extra bytes are never read)."""

    row0: int
    rows: int
    offset: int  # from the matrix's start in the blob
    nbytes: int
    copy_bytes: int


@dataclass(frozen=True)
class StreamedMatvecQ4x4:
    """A q4x4 matvec (a linear or the fused gate/up matrix) over the stream:
    chunk k's rows computed from the stream buffer chunk k landed in."""

    matvec: MatvecQ4x4
    chunk_rows: int  # rows per chunk (a multiple of 4); the last chunk may be shorter
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref:
        return self.matvec.matrix


@dataclass(frozen=True)
class StreamedArgmaxQ4x4:
    """The greedy classifier over the stream: per chunk, argmax_rows rows at
    a time into the logits chunk, one running first maximum over all."""

    argmax: ArgmaxClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref:
        return self.argmax.matvec.matrix


@dataclass(frozen=True)
class StreamedTopKQ4x4:
    """The top-K classifier over the stream: per chunk, chunk_rows rows at a
    time into the logits chunk, each pushed into the running K-entry set."""

    topk: TopKClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref:
        return self.topk.matvec.matrix


@dataclass(frozen=True)
class StreamedEmbedQ4x4:
    """The embedding row: its 4-row tile, known only once the token is,
    copied synchronously into the free stream buffer."""

    embed: EmbedQ4
    tile_bytes: int
    copy_bytes: int

    @property
    def table(self) -> Q4Ref:
        return self.embed.table


StreamedCall = Union[StreamedMatvecQ4x4, StreamedArgmaxQ4x4, StreamedTopKQ4x4, StreamedEmbedQ4x4]
STREAMED_MATRIX_CALLS = (StreamedMatvecQ4x4, StreamedArgmaxQ4x4, StreamedTopKQ4x4)  # each a run of chunks


@dataclass(frozen=True)
class PinCandidate:
    name: str  # blob entry name
    kind: str  # "q4x4" | "f32"
    nbytes: int
    value: float  # flash bytes per token saved per byte of SRAM


@dataclass(frozen=True)
class StreamPlan:
    """The stream pass's decisions, carried by the LoweredStep and Program."""

    options: StreamOptions
    buffer_bytes: int  # each of the two stream buffers (0: nothing streamed)
    pinned: tuple[tuple[str, int], ...]  # (entry name, slot bytes) in slot order
    n_chunks: int

    @property
    def pinned_bytes(self) -> int:
        return sum(b for _, b in self.pinned)


def tile_bytes(m: Q4Ref) -> int:
    return q4x4_bytes_of(4, m.cols, m.group)


def chunks_of(m: Q4Ref, chunk_bytes: int) -> tuple[int, tuple[Chunk, ...]]:
    """Whole tiles of at most chunk_bytes (one tile at least)."""
    tb = tile_bytes(m)
    tiles = -(-m.rows // 4)
    per = max(1, min(tiles, chunk_bytes // tb))
    out = []
    for t0 in range(0, tiles, per):
        n = min(per, tiles - t0)
        rows = min(m.rows, (t0 + n) * 4) - t0 * 4
        out.append(Chunk(t0 * 4, rows, t0 * tb, n * tb, line_up(n * tb)))
    return per * 4, tuple(out)


def slot_bytes(nbytes: int) -> int:
    """A pinned entry's slot: its copy starts on a line at or below the
    entry and ends on a line (pin_table), so up to 63 bytes more."""
    return line_up(nbytes) + 2 * LINE


def pin_candidates(step: LoweredStep) -> list[PinCandidate]:
    """Every weight entry the step reads, with its value per SRAM byte."""
    c = step.config
    out: dict[str, PinCandidate] = {}
    for call in step.calls:
        a = call.args
        if isinstance(a, EmbedQ4) and a.table.layout == "q4x4":
            m = a.table
            out[m.name] = PinCandidate(m.name, "q4x4", q4x4_bytes_of(m.rows, m.cols, m.group), 1 / -(-m.rows // 4))
        elif isinstance(a, (MatvecQ4x4, ArgmaxClassifier, TopKClassifier)):
            m = a.matrix
            out[m.name] = PinCandidate(m.name, "q4x4", q4x4_bytes_of(m.rows, m.cols, m.group), 1.0)
        for v in refs_of(a, VectorRef):
            out[v.name] = PinCandidate(v.name, "f32", 4 * v.count, 1.0)
    rope = 4 * step.max_seq * (c.head_dim // 2)
    for name in ("rope.cos", "rope.sin"):
        out[name] = PinCandidate(name, "f32", rope, 1 / step.max_seq)
    return sorted(out.values(), key=lambda p: (-p.value, -p.nbytes, p.name))


def choose_pinned(candidates: list[PinCandidate], sram_bytes: int) -> frozenset:
    """Most value first, then largest first; each taken if its slot still fits."""
    left, chosen = sram_bytes, set()
    for p in candidates:
        if slot_bytes(p.nbytes) <= left:
            chosen.add(p.name)
            left -= slot_bytes(p.nbytes)
    return frozenset(chosen)


def stream_step(step: LoweredStep, opts: StreamOptions | None) -> LoweredStep:
    """Replace the step's weight reads by stream calls; declare the stream
    buffers and the pinned arena.  opts None or mode "off": unchanged."""
    if opts is None or opts.mode == "off":
        return step
    if opts.mode not in MODES:
        raise UserError(f"--stream {opts.mode} is not known: choose {', '.join(MODES)}")
    if step.kernels != "cortex-m7":
        raise UserError("--stream streams the q4x4 (Cortex-M7) matrices: use --kernels cortex-m7 "
                        "(the default on Cortex-M7 boards)")
    pinned = opts.pinned
    calls, n_chunks, biggest = [], 0, 0
    for call in step.calls:
        a = call.args
        new = a
        if isinstance(a, MatvecQ4x4) and a.matrix.name not in pinned:
            rows, chunks = chunks_of(a.matrix, opts.chunk_bytes)
            new = StreamedMatvecQ4x4(a, rows, chunks)
        elif isinstance(a, ArgmaxClassifier) and isinstance(a.matvec, MatvecQ4x4) and a.matrix.name not in pinned:
            rows, chunks = chunks_of(a.matrix, opts.chunk_bytes)
            new = StreamedArgmaxQ4x4(a, rows, chunks)
        elif isinstance(a, TopKClassifier) and isinstance(a.matvec, MatvecQ4x4) and a.matrix.name not in pinned:
            rows, chunks = chunks_of(a.matrix, opts.chunk_bytes)
            new = StreamedTopKQ4x4(a, rows, chunks)
        elif isinstance(a, EmbedQ4) and a.table.layout == "q4x4" and a.table.name not in pinned:
            tb = tile_bytes(a.table)
            new = StreamedEmbedQ4x4(a, tb, line_up(tb))
            biggest = max(biggest, new.copy_bytes)
        if isinstance(new, STREAMED_MATRIX_CALLS):
            n_chunks += len(new.chunks)
            biggest = max(biggest, max(ch.copy_bytes for ch in new.chunks))
        calls.append(KernelCall(new, call.layer, call.label))
    decls = list(step.decls)
    if biggest:
        decls += [BufferDecl(b, "uint8_t", biggest, "stream", "always", "dma", LINE) for b in BUFFERS]
    names = {p.name: p for p in pin_candidates(step)}
    unknown = sorted(pinned - set(names))
    if unknown:
        raise AssertionError(f"pinned entries the step does not read: {unknown[:3]}")
    slots = tuple((n, slot_bytes(names[n].nbytes)) for n in sorted(pinned, key=lambda n: (-names[n].nbytes, n)))
    if slots:
        decls.append(BufferDecl(PINNED, "uint8_t", sum(b for _, b in slots), "pinned", "always", "bulk", LINE))
    plan = StreamPlan(opts, biggest, slots, n_chunks)
    return dataclasses.replace(step, calls=tuple(calls), decls=tuple(decls), stream=plan)


# --- after bind: the schedule and the pin table with blob offsets --------------

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


def schedule_of(program) -> list[ScheduledChunk]:
    out = []
    for i, call in enumerate(program.calls):
        a = call.args
        if isinstance(a, STREAMED_MATRIX_CALLS):
            for ch in a.chunks:
                k = len(out)
                out.append(ScheduledChunk(k, i, call.label if call.layer is None else f"layer {call.layer} {call.label}",
                                          a.matrix.name, a.matrix.packed_offset + ch.offset, ch.nbytes,
                                          ch.copy_bytes, ch.row0, ch.rows, k % 2))
    total = len(program.blob.data)
    for ch in out:
        if ch.src + ch.copy_bytes > total:
            raise AssertionError(f"chunk {ch.index} reads past the blob ({ch.src + ch.copy_bytes} > {total})")
    for call in program.calls:  # the embedding's last tile, rounded up to a line, too
        a = call.args
        if isinstance(a, StreamedEmbedQ4x4):
            m = a.table
            last = m.packed_offset + q4x4_bytes_of(m.rows, m.cols, m.group) - a.tile_bytes
            if last + a.copy_bytes > total:
                raise AssertionError(f"the embedding's last tile reads past the blob ({last + a.copy_bytes} > {total})")
    return out


def head_chunk(program) -> int:
    """Index of the head's first chunk (the classifier's, after every layer's):
    a step without logits skips from there to the next step's chunk 0
    (tllm_stream_begin_step).  The chunk count when the head streams nothing."""
    sched = schedule_of(program)
    n = sum(c.call < program.head_start for c in sched)
    assert all(c.call >= program.head_start for c in sched[n:]), "chunks are in call order: body, then head"
    return n


def pin_table(program) -> list[Pin]:
    plan: StreamPlan | None = program.stream
    if plan is None:
        return []
    total = len(program.blob.data)
    by_name = {e.name: e for e in program.blob.entries if e.kind in ("q4x4", "f32")}
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


def pinned_at(program) -> dict[str, int]:
    """Entry name -> its offset in stream.pinned (the C descriptors point there)."""
    return {p.name: p.at for p in pin_table(program)}


def schedule_json(program) -> dict | None:
    plan: StreamPlan | None = program.stream
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


# --- choosing chunk size and pins against the plan ------------------------------

CHUNK_FALLBACK = (16 * 1024, 8 * 1024, 4 * 1024, 2 * 1024, 1024)
CHUNK_CANDIDATES = (1024, 2048, 4096, 8192, 16 * 1024, 32 * 1024)
CHUNK_TOLERANCE = 0.005  # a chunk within 0.5% of the best predicted tokens/s is as good: the smallest such wins


def chunk_sizes(shape, board) -> tuple[int, ...]:
    """The chunk sizes to try, first choice first.  On a board that streams
    from QUADSPI the timing model decides (timing.mode_seconds, DWUP): per
    chunk the larger of compute and transfer, plus one command per chunk and
    the pipeline fill, so small chunks pay commands and large ones a longer
    fill.  The first choice is the smallest chunk within CHUNK_TOLERANCE of
    the best predicted decode tokens/s (the SRAM it saves goes to the
    context), then the halvings below it for plans that are short of SRAM.
    Elsewhere (host, QEMU: no link to model) 16 KiB, halved.  Two buffers:
    one transfer is in flight at a time (tllm_board.h), so a third buffer
    would hold a chunk nobody can start yet."""
    if board.qspi_flash is None:
        return CHUNK_FALLBACK
    from . import timing

    w = timing.estimated_workload(shape.config, shape.group_size)
    tok = {c: timing.predict(board, w, chunk_bytes=c)["modes"]["dwup"]["tokens_per_s"] for c in CHUNK_CANDIDATES}
    best = max(tok.values())
    first = min(c for c, t in tok.items() if t >= best * (1 - CHUNK_TOLERANCE))
    return tuple(c for c in sorted(CHUNK_CANDIDATES, reverse=True) if c <= first)


def _free_bytes(plan, board) -> int:
    """SRAM the plan leaves: under the budget, and inside one bulk region
    (the pinned buffer is one buffer)."""
    from .plan.regions import board_memory

    mem = board_memory(board)
    used = {r.name: r.used_bytes for r in plan.regions}
    bulk = mem.placement.get("bulk", ())
    room = max((mem.region(n).size - used.get(n, 0) for n in bulk), default=0)
    return max(0, min(plan.budget_bytes - plan.total_bytes, room))


def plan_streamed(shape, requested_seq, budget: int, board, mode: str, chunk_bytes: int | None = None):
    """planning.plan_for with the stream pass in the plan: `off` unchanged;
    `all` streams every q4x4 matrix; `auto` streams on boards whose weights
    are external and pins what fits in the SRAM left.  The chunk size is
    `chunk_bytes` or chunk_sizes' first choice (the timing model's), halved
    (down to 1 KiB) while the plan does not fit.  Returns (PlanResult, StreamOptions | None)."""
    from dataclasses import replace

    from .planning import plan_for

    if mode not in MODES:
        raise UserError(f"--stream {mode} is not known: choose {', '.join(MODES)}")
    if mode != "off" and shape.method == "per-channel":
        raise UserError(f"--stream {mode} streams the group scheme's q4x4 matrices; --quant per-channel reads its "
                        "layers in place: drop one of them")
    if mode == "off" or (mode == "auto" and board.weights.storage != "external"):
        return plan_for(shape, requested_seq, budget, board), None
    sizes = (chunk_bytes,) if chunk_bytes else chunk_sizes(shape, board)
    err = None
    for size in sizes:
        opts = StreamOptions(mode, size)
        try:
            planned = plan_for(replace(shape, stream=opts), requested_seq, budget, board)
            break
        except UserError as e:
            err = e
    else:
        raise err
    if mode != "auto":
        return planned, opts
    from .lower import lower_step

    seq = planned.plan.max_seq
    candidates = pin_candidates(lower_step(shape, seq, shape.sampler))
    left = _free_bytes(planned.plan, board)
    for _ in range(8):  # the pinned buffer changes the placement: shrink until it fits
        pins = choose_pinned(candidates, left)
        if not pins:
            break
        pinned_opts = replace(opts, pinned=pins)
        try:
            return plan_for(replace(shape, stream=pinned_opts), seq, budget, board), pinned_opts
        except UserError:
            left = left * 7 // 8
    return planned, opts


TRADE_OFF_CHUNKS = (4 * 1024, 8 * 1024, 16 * 1024, 32 * 1024)


def trade_off_rows(shape, budget: int, board) -> list[dict]:
    """`plan --stream`: per chunk size, the two stream buffers' bytes, the
    longest context that still fits beside them, and the predicted DWUP
    tokens/s (timing.py; one pipeline fill per token, since the prefetch
    crosses matrices)."""
    from dataclasses import replace

    from .lower import lower_step
    from .plan.memory import largest_fitting_seq
    from .plan.regions import board_memory
    from . import timing

    w = timing.estimated_workload(shape.config, shape.group_size) if board.qspi_flash is not None else None
    rows = []
    for size in TRADE_OFF_CHUNKS:
        s = replace(shape, stream=StreamOptions("all", size))
        step = stream_step(lower_step(shape, 8, shape.sampler), s.stream)
        seq = largest_fitting_seq(s, budget, board.stack_bytes, shape.config.max_seq, board_memory(board))
        tok_s = timing.predict(board, w, chunk_bytes=size)["modes"]["dwup"]["tokens_per_s"] if w else None
        rows.append({"chunk_bytes": size, "stream_buffer_bytes": 2 * step.stream.buffer_bytes,
                     "max_seq": seq, "dwup_tokens_per_s": tok_s})
    return rows


def trade_off_text(rows: list[dict]) -> str:
    lines = ["  weight stream trade-off (two buffers, the prefetch crossing matrices):",
             f"  {'chunk':>8} {'buffers':>9} {'max_seq':>8} {'DWUP tok/s':>11}"]
    for r in rows:
        tok = f"{r['dwup_tokens_per_s']:.2f}" if r["dwup_tokens_per_s"] is not None else "-"
        lines.append(f"  {r['chunk_bytes']:>8,} {r['stream_buffer_bytes']:>9,} {r['max_seq'] or 'none':>8} {tok:>11}")
    return "\n".join(lines) + "\n"
