"""Linear layers: a weight matrix times the quantized activations.

Three weight layouts, each with its activation format: "q4" (packed
nibbles and float32 scales, int8 activations with one scale per group:
tllm_matvec_q4), "q4x4" (4-row tiles for the Cortex-M7 SMLAD kernels, the
int16 "x16" activation stream: tllm_matvec_q4x4) and llama.cpp's kept
blocks (Q4_0 / Q4_1 / Q8_0 with int8 activations: tllm_matvec_q40/q41/q80).
Each has a batched form for tllm_model_prefill (tllm_matmat_*: every
weight read once for the batch's tokens); q4x4 also streams."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import BatchContext, Chunk, Kernel, PinCandidate, WeightRead
from .c_text import CCall, buf, chunk_rows_param, fixed, matrix, vec
from .chunks import chunks_of, stream_kernel, whole_matrix_bytes
from .refs import BufferRef, GGUFRef, Q4Ref, VectorRef
from .sizes import layout_of, matrix_bytes


def _bias(bias: VectorRef | None) -> str:
    return " +bias" if bias else ""


def full_read(m: Q4Ref | GGUFRef) -> tuple[WeightRead, ...]:
    """The whole matrix, once per token."""
    return (WeightRead(m.name, layout_of(m), matrix_bytes(m), m.rows * m.cols),)


# What every tiled layout's batched prefill shares, counted once: tllm_model_prefill and the x16b
# (P-token) norm, quantize and SwiGLU writers (measured: a Q4_1 tiled build with and without
# --prefill-batch 1, less its layout's own batched kernels).
TILED_PREFILL_RUNTIME = (("tiled prefill runtime",), 3_584)


class _Matvec(Kernel):
    """What every layout's matvec shares: its call and batched call by layout
    name (tllm_matvec_<layout>, tllm_matmat_<layout>: the arguments are the
    activation format's), the whole matrix read once per token, and its
    description."""

    @property
    def layout(self) -> str:
        """The C kernels' name part: a GGUF matrix's suffix (q41, q41x4); the q4 layouts state theirs."""
        return self.matrix.suffix

    def c_call(self) -> CCall:
        return CCall(f"tllm_matvec_{self.layout}", tuple(self.c_args()))

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return full_read(self.matrix)

    def batched(self, ctx: BatchContext) -> CCall:
        return CCall(f"tllm_matmat_{self.layout}", tuple(self.batch_inputs() + [fixed("n"), vec(self.bias),
                                                                               buf(self.out)]))

    def describe(self) -> tuple[str, BufferRef]:
        m = self.matrix
        if isinstance(m, Q4Ref):
            return f"{self.layout}_matvec {m.rows}x{m.cols} g{m.group}{_bias(self.bias)}", self.out
        blocks = "GGUF blocks in 4-row tiles" if m.tiled else "GGUF blocks"
        return f"{m.qtype} matvec {m.rows}x{m.cols} ({blocks}){_bias(self.bias)}", self.out


class _Int8Matvec(_Matvec):
    """A matrix against int8 activations with one float scale per group
    (QuantizeI8's q8/qs): the q4 layout and the kept GGUF blocks."""

    BATCHED_CODE_BYTES: ClassVar[int] = 2_048  # the portable batched kernels and tllm_model_prefill (measured)

    def code_key(self) -> tuple:
        return (_Int8Matvec,)  # one portable batched runtime for both layouts

    def c_args(self) -> list:
        return [matrix(self.matrix), buf(self.xq), buf(self.xs), vec(self.bias), buf(self.out)]

    def batch_inputs(self) -> list:
        """The matrix and the batch's activations (token p's at p x one token's)."""
        return [matrix(self.matrix), buf(self.xq), buf(self.xs)]


@dataclass(frozen=True)
class MatvecQ4(_Int8Matvec):
    """tllm_matvec_q4: packed nibbles, int8 activations (portable)."""

    matrix: Q4Ref
    xq: BufferRef
    xs: BufferRef
    bias: VectorRef | None
    out: BufferRef

    layout: ClassVar[str] = "q4"
    layout_name: ClassVar[str] = "q4"


@dataclass(frozen=True)
class MatvecGGUF(_Int8Matvec):
    """W4A8 / W8A8 over a GGUF block matrix with the int8 activations of
    QuantizeI8 (group 32 = one block): tllm_matvec_q40/q41/q80."""

    matrix: GGUFRef
    xq: BufferRef
    xs: BufferRef
    bias: VectorRef | None
    out: BufferRef

    @property
    def layout_name(self) -> str:
        return self.matrix.qtype


class _X16Matvec(_Matvec):
    """A matrix in 4-row tiles against the int16 x16 stream (Cortex-M7 SMLAD):
    q4x4 and llama.cpp's blocks in tiles share the arguments (the batch's:
    the P-token x16b stream), the streamed form and the tiled prefill
    runtime; each names its layout and its pinned blob's kind."""

    def c_args(self) -> list:
        return [matrix(self.matrix), buf(self.x_stream), vec(self.bias), buf(self.out)]

    def batch_inputs(self) -> list:
        """The matrix and the batch's x16b stream."""
        return [matrix(self.matrix), buf(self.x_stream)]

    def streamed(self, chunk_bytes: int) -> "StreamedMatvec":
        rows, chunks = chunks_of(self.matrix, chunk_bytes)
        return StreamedMatvec(self, rows, chunks)

    def batched_code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return super().batched_code_parts() + (TILED_PREFILL_RUNTIME,)


@dataclass(frozen=True)
class MatvecQ4x4(_X16Matvec):
    """tllm_matvec_q4x4: 4-row tiles against the x16 stream (Cortex-M7 SMLAD)."""

    # the M7's three assembly variants of tllm_matvec_q4x4 (4, 8, 16 blocks per group), its C and wrapper;
    # the nine of tllm_matmat_q4x4 and its C (measured: arm-none-eabi-size of the kept functions, DK build)
    CODE_BYTES: ClassVar[int] = 6_016
    BATCHED_CODE_BYTES: ClassVar[int] = 12_544
    matrix: Q4Ref
    x_stream: BufferRef
    bias: VectorRef | None
    out: BufferRef

    layout: ClassVar[str] = "q4x4"
    layout_name: ClassVar[str] = "q4x4"

    def pin_candidate(self) -> PinCandidate:
        return PinCandidate(self.matrix.name, "q4x4", whole_matrix_bytes(self.matrix), 1.0)

    def code_key(self) -> tuple:
        return (type(self),)

    def tile_output(self) -> BufferRef:
        return self.out


@dataclass(frozen=True)
class MatvecGGUFx4(_X16Matvec):
    """llama.cpp's blocks in 4-row tiles (q40x4 / q41x4 / q80x4, the same
    bytes as the file, moved) against the x16 stream of group 32:
    tllm_matvec_q41x4 etc. (Cortex-M7 SMLAD, tllm_kernels_gguf_m7.h)."""

    matrix: GGUFRef  # layout "tiled"
    x_stream: BufferRef
    bias: VectorRef | None
    out: BufferRef

    @property
    def layout_name(self) -> str:
        return self.matrix.suffix

    def code_key(self) -> tuple:
        return (type(self), self.matrix.qtype)  # each layout's kernels are their own code

    # one layout's matvec, its tile helpers and the ragged-row dot both forms share; its batched kernels
    # (P = 2..4 assembly and their wrapper); measured: the arm-none-eabi-size of the kept functions, per
    # layout (Q4_1's: 3,500 B against Q4_0's 2,368; its P = 4 kernel takes two blocks per pass, and its
    # wrapper converts the stream's block heads, q41_heads)
    CODE_BYTES: ClassVar[int] = 1_664
    BATCHED_CODE_BYTES_OF: ClassVar[dict[str, int]] = {"Q4_0": 2_560, "Q4_1": 3_520, "Q8_0": 2_560}

    @property
    def BATCHED_CODE_BYTES(self) -> int:  # noqa: N802 (the kernel table's per-class name, here per format)
        return self.BATCHED_CODE_BYTES_OF[self.matrix.qtype]

    def pin_candidate(self) -> PinCandidate:
        return PinCandidate(self.matrix.name, self.matrix.blob_kind, whole_matrix_bytes(self.matrix), 1.0)


TiledMatvec = MatvecQ4x4 | MatvecGGUFx4


@dataclass(frozen=True)
class StreamedMatvec(Kernel):
    """A tiled matvec (a linear or the fused gate/up matrix) over the stream:
    chunk k's rows computed from the stream buffer chunk k landed in."""

    matvec: TiledMatvec
    chunk_rows: int  # rows per chunk (a multiple of 4); the last chunk may be shorter
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.matvec.matrix

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.matvec.code_parts()

    def batched_code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.matvec.batched_code_parts()

    def c_call(self) -> CCall:
        mv = self.matvec
        fn, kernels = stream_kernel(mv.matrix, "matvec")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), vec(mv.bias), buf(mv.out)))

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.matvec.describe()
        return what + streamed_note(self.chunks, self.chunk_rows), out

    def batched(self, ctx: BatchContext) -> CCall:
        mv = self.matvec
        fn, kernels = stream_kernel(mv.matrix, "matmat")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), fixed("n"), vec(mv.bias),
                          buf(ctx.chunk_out), buf(mv.out)))

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.matvec.weight_reads()

    def streamed_rows(self) -> int:
        return self.chunk_rows

    def tile_output(self) -> BufferRef | None:
        return self.matvec.tile_output()


def streamed_note(chunks: tuple[Chunk, ...], rows: int) -> str:
    return f", streamed in {len(chunks)} chunk{'s' if len(chunks) > 1 else ''} of {rows} rows"


Matvec = MatvecQ4 | MatvecQ4x4 | MatvecGGUF | MatvecGGUFx4
