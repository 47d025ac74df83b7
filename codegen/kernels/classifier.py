"""The classifier without a [vocab] logits vector: greedy argmax and top-K.

`--sampler greedy` and `--sampler topk:K` builds run the classifier's
matvec `chunk_rows` rows at a time into a small logits buffer and keep,
over all chunks, the first maximum (tllm_argmax_*'s order) or the running
set of the K largest logits (tllm_topk_push: value descending, id
ascending; the sampler draws from the set, reference/sampler.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Chunk, Kernel, PinCandidate, WeightRead
from .c_text import CCall, buf, chunk_rows_param, fixed, matrix, shape, vec
from .chunks import chunks_of, stream_kernel
from .matvec import Matvec, MatvecGGUFx4, MatvecQ4x4, streamed_note
from .refs import BufferRef, GGUFRef, Q4Ref

CHUNK_ROWS = 64  # classifier rows per chunk (a multiple of the 4-row tile)
TILED = (MatvecQ4x4, MatvecGGUFx4)  # the layouts the weight stream cuts into chunks


def chunk_rows_for(vocab_size: int) -> int:
    """Rows of the logits buffer of a chunked classifier."""
    return min(vocab_size, CHUNK_ROWS)


def _what(mv: Matvec, rows: int, keeps: str) -> str:
    m = mv.matrix
    return f"{mv.layout_name} classifier {m.rows}x{m.cols} g{m.group}, {keeps} over {rows}-row chunks"


@dataclass(frozen=True)
class StreamedArgmax(Kernel):
    """The greedy classifier over the stream: per chunk, argmax_rows rows at
    a time into the logits chunk, one running first maximum over all."""

    argmax: ArgmaxClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.argmax.matrix

    def c_call(self) -> CCall:
        mv = self.argmax.matvec
        fn, kernels = stream_kernel(mv.matrix, "argmax")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), vec(mv.bias), buf(mv.out),
                          shape(self.argmax.chunk_rows)), "greedy_token = ")

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.argmax.describe()
        return what + streamed_note(self.chunks, self.chunk_rows), out

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.argmax.weight_reads()

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.argmax.code_parts()


@dataclass(frozen=True)
class StreamedTopK(Kernel):
    """The top-K classifier over the stream: per chunk, chunk_rows rows at a
    time into the logits chunk, each pushed into the running K-entry set."""

    topk: TopKClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.topk.matrix

    def c_call(self) -> CCall:
        mv = self.topk.matvec
        fn, kernels = stream_kernel(mv.matrix, "topk")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), vec(mv.bias), buf(mv.out),
                          shape(self.topk.chunk_rows), fixed("&topk_set")))

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.topk.describe()
        return what + streamed_note(self.chunks, self.chunk_rows), out

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.topk.weight_reads()

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.topk.code_parts()


class _ChunkedClassifier(Kernel):
    """What the argmax and the top-K classifier share: the matvec they run
    chunk by chunk, its reads, its pin, and their streamed form (STREAMED)."""

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.matvec.matrix

    def streamed(self, chunk_bytes: int) -> "Kernel | None":
        if not isinstance(self.matvec, TILED):
            return None
        rows, chunks = chunks_of(self.matrix, chunk_bytes)
        return self.STREAMED(self, rows, chunks)

    def pin_candidate(self) -> PinCandidate | None:
        return self.matvec.pin_candidate() if isinstance(self.matvec, TILED) else None

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.matvec.weight_reads()

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return ((self.code_key(), self.CODE_BYTES),) + self.matvec.code_parts()


@dataclass(frozen=True)
class ArgmaxClassifier(_ChunkedClassifier):
    """Greedy-only builds: the token, without a [vocab] logits vector."""

    CODE_BYTES: ClassVar[int] = 256  # the argmax over chunks (measured)
    STREAMED: ClassVar[type] = StreamedArgmax
    matvec: Matvec
    chunk_rows: int

    def c_call(self) -> CCall:
        return CCall(f"tllm_argmax_{self.matvec.layout}", tuple(self.matvec.c_args() + [shape(self.chunk_rows)]),
                     "greedy_token = ")

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, "argmax"), self.matvec.out


@dataclass(frozen=True)
class TopKClassifier(_ChunkedClassifier):
    """`--sampler topk:K` builds: each chunk pushed into the running K-entry
    set held in `value` / `ids`."""

    STREAMED: ClassVar[type] = StreamedTopK
    matvec: Matvec
    chunk_rows: int
    k: int  # entries of the set (K <= vocab, lowering checks)
    value: BufferRef  # float[k]
    ids: BufferRef  # uint16_t[k]

    def c_call(self) -> CCall:
        return CCall(f"tllm_topk_{self.matvec.layout}",
                     tuple(self.matvec.c_args() + [shape(self.chunk_rows), fixed("&topk_set")]))

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, f"top-{self.k} set"), self.value
