"""The weight stream pass (DWUP): LoweredStep -> LoweredStep, between
lowering and planning.

Boards keep the weights blob in external flash (the H750's QUADSPI window).
Instead of letting the kernels read it in place through the D-cache, the
compiler turns the step's weight reads into a *stream schedule*: every
tiled matrix the step reads (each linear, the fused gate/up matrix, the
classifier) is split into chunks of whole 4-row tiles (kernels/chunks.py),
in execution order.  The firmware (firmware/tllm_stream.h) keeps one
transfer in flight: per chunk it waits for chunk k, starts chunk k+1 into
the other of two stream buffers and computes on chunk k.  The table wraps
around, so the step's last chunk starts the next step's first, and a
matrix's last chunk starts the next matrix's first (across layers too): the
link never idles on a matrix boundary.  The embedding row (its tile
depends on the token, so it cannot be prefetched) is fetched synchronously
into the free buffer.  Which kernel streams, and how, is its own record's
`streamed` (kernels/).

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
space).

Bit-identical by construction: a streamed matvec is the same kernel on the
same bytes, one row range at a time, and each row's arithmetic does not
depend on the others.  Norm weights and biases that are not pinned are read
in place (a few hundred bytes per layer)."""
from __future__ import annotations

import dataclasses

from ..errors import UserError
from ..kernels import PinCandidate
from ..kernels.chunks import LINE, line_up
from ..kernels.refs import VectorRef, refs_of
from .records import BufferDecl, KernelCall, LoweredStep, StreamOptions, StreamPlan

MODES = ("off", "all", "auto")
BUFFERS = ("stream.buf0", "stream.buf1")
PINNED = "stream.pinned"
DEFAULT_CHUNK_BYTES = StreamOptions().chunk_bytes  # two buffers, 1.6% over the flash bound (docs/dwup.md)


def slot_bytes(nbytes: int) -> int:
    """A pinned entry's slot: its copy starts on a line at or below the
    entry and ends on a line (emit/stream_tables.pin_table), so up to 63 bytes more."""
    return line_up(nbytes) + 2 * LINE


def pin_candidates(step: LoweredStep, max_seq: int) -> list[PinCandidate]:
    """Every weight entry the step reads, with its value per SRAM byte."""
    c = step.config
    out: dict[str, PinCandidate] = {}
    for call in step.calls:
        a = call.args
        p = a.pin_candidate()
        if p is not None:
            out[p.name] = p
        for v in refs_of(a, VectorRef):
            out[v.name] = PinCandidate(v.name, "f32", 4 * v.count, 1.0)
    rope = 4 * max_seq * (c.head_dim // 2)
    for name in ("rope.cos", "rope.sin"):
        out[name] = PinCandidate(name, "f32", rope, 1 / max_seq)
    return sorted(out.values(), key=lambda p: (-p.value, -p.nbytes, p.name))


def choose_pinned(candidates: list[PinCandidate], sram_bytes: int) -> frozenset:
    """Most value first, then largest first; each taken if its slot still fits."""
    left, chosen = sram_bytes, set()
    for p in candidates:
        if slot_bytes(p.nbytes) <= left:
            chosen.add(p.name)
            left -= slot_bytes(p.nbytes)
    return frozenset(chosen)


def stream_step(step: LoweredStep, opts: StreamOptions | None, max_seq: int) -> LoweredStep:
    """Replace the step's weight reads by stream calls; declare the stream
    buffers and the pinned arena (whose RoPE slots depend on max_seq).
    opts None or mode "off": unchanged."""
    if opts is None or opts.mode == "off":
        return step
    if opts.mode not in MODES:
        raise UserError(f"--stream {opts.mode} is not known: choose {', '.join(MODES)}")
    if step.kernels != "cortex-m7":
        raise UserError("--stream streams the q4x4 (Cortex-M7) matrices: use --kernels cortex-m7 "
                        "(the default on Cortex-M7 boards)")
    pinned = opts.pinned
    calls, n_chunks, n_runs, biggest = [], 0, 0, 0
    for call in step.calls:
        a = call.args
        p = a.pin_candidate()
        new = a.streamed(opts.chunk_bytes) if p is not None and p.name not in pinned else None
        if new is not None:
            n_chunks += len(new.stream_chunks())
            n_runs += bool(new.stream_chunks())
            biggest = max(biggest, new.stream_buffer_bytes())
        calls.append(KernelCall(new or a, call.layer, call.label))
    decls = list(step.decls)
    if biggest:
        decls += [BufferDecl(b, "uint8_t", biggest, "stream", "always", "dma", LINE) for b in BUFFERS]
    names = {p.name: p for p in pin_candidates(step, max_seq)}
    unknown = sorted(pinned - set(names))
    if unknown:
        raise AssertionError(f"pinned entries the step does not read: {unknown[:3]}")
    slots = tuple((n, slot_bytes(names[n].nbytes)) for n in sorted(pinned, key=lambda n: (-names[n].nbytes, n)))
    if slots:
        decls.append(BufferDecl(PINNED, "uint8_t", sum(b for _, b in slots), "pinned", "always", "bulk", LINE))
    plan = StreamPlan(opts, biggest, slots, n_chunks, n_runs)
    return dataclasses.replace(step, calls=tuple(calls), decls=tuple(decls), stream=plan)
