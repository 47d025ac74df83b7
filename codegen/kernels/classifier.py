"""The classifier without a [vocab] logits vector: greedy argmax and top-K.

`--sampler greedy` and `--sampler topk:K` builds run the classifier's
matvec `chunk_rows` rows at a time into a small logits buffer and keep,
over all chunks, the first maximum (tllm_argmax_*'s order) or the running
set of the K largest logits (tllm_topk_push: value descending, id
ascending; the sampler draws from the set, reference/sampler.py).

Speculative decoding's verification pass (lower/speculate.py) runs them
batched (their `batched` form, firmware/tllm_verify.h): each row chunk's
weights read once for the P positions, each position's argmax or set kept
as the single-token classifier keeps it, into per-position outputs the
speculation pass declares (`verify_outputs`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .base import BatchContext, Chunk, Kernel, PinCandidate, VerifyOutput, WeightRead
from .c_text import CCall, buf, chunk_rows_param, fixed, matrix, shape, vec
from .chunks import chunks_of, stream_kernel
from .matvec import Matvec, MatvecGGUFx4, MatvecQ4x4, streamed_note
from .refs import BufferRef, GGUFRef, Q4Ref

CHUNK_ROWS = 64  # classifier rows per chunk (a multiple of the 4-row tile)
TILED = (MatvecQ4x4, MatvecGGUFx4)  # the layouts the weight stream cuts into chunks
VERIFY_BEST, VERIFY_BEST_V, VERIFY_HELD = "verify.best", "verify.best_v", "verify.held"
ROW0 = fixed("0")  # a whole matrix: the tiled batch kernels' first row (a stream chunk's in tllm_stream.h)


def chunk_rows_for(vocab_size: int) -> int:
    """Rows of the logits buffer of a chunked classifier."""
    return min(vocab_size, CHUNK_ROWS)


def _what(mv: Matvec, rows: int, keeps: str) -> str:
    m = mv.matrix
    return f"{mv.layout_name} classifier {m.rows}x{m.cols} g{m.group}, {keeps} over {rows}-row chunks"


def _verify_tail(mv: Matvec, chunk_rows: int) -> list:
    """What every batched classifier (tllm_verify.h) takes after its matrix
    and activations; a tiled matrix's first row (a stream chunk's differs)."""
    return [fixed("n"), vec(mv.bias), buf(mv.out), shape(chunk_rows)] + ([ROW0] if isinstance(mv, TILED) else [])


class _StreamedClassifier(Kernel):
    """What the streamed argmax and top-K classifiers share in the
    verification pass: the wrapped classifier's per-position outputs
    (field INNER) and their own streamed batched code."""

    INNER: ClassVar[str]

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return getattr(self, self.INNER).verify_outputs()

    def with_verify_outputs(self, refs: dict) -> "_StreamedClassifier":
        return dataclasses.replace(self, **{self.INNER: getattr(self, self.INNER).with_verify_outputs(refs)})

    def tile_output(self) -> BufferRef | None:
        return getattr(self, self.INNER).tile_output()

    def verify_code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return ((("verify stream",) + getattr(self, self.INNER).code_key(), self.VERIFY_CODE_BYTES),)


@dataclass(frozen=True)
class StreamedArgmax(_StreamedClassifier):
    """The greedy classifier over the stream: per chunk, argmax_rows rows at
    a time into the logits chunk, one running first maximum over all."""

    VERIFY_CODE_BYTES: ClassVar[int] = 768  # tllm_stream_argmax_batch_* inlined
    INNER: ClassVar[str] = "argmax"
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

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass over the stream (tllm_stream_argmax_batch_*)."""
        a = self.argmax
        mv = a.matvec
        fn, kernels = stream_kernel(mv.matrix, "argmax_batch")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), fixed("n"), vec(mv.bias),
                          buf(mv.out), shape(a.chunk_rows), buf(a.best), buf(a.best_v)))

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.argmax.weight_reads()

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.argmax.code_parts()


@dataclass(frozen=True)
class StreamedTopK(_StreamedClassifier):
    """The top-K classifier over the stream: per chunk, chunk_rows rows at a
    time into the logits chunk, each pushed into the running K-entry set."""

    VERIFY_CODE_BYTES: ClassVar[int] = 768  # tllm_stream_topk_batch_* inlined
    INNER: ClassVar[str] = "topk"
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

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass over the stream (tllm_stream_topk_batch_*)."""
        t = self.topk
        mv = t.matvec
        fn, kernels = stream_kernel(mv.matrix, "topk_batch")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(mv.matrix),
                          chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream), fixed("n"), vec(mv.bias),
                          buf(mv.out), shape(t.chunk_rows), *t.set_args()))

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

    def tile_output(self) -> BufferRef | None:
        return self.matvec.tile_output()


@dataclass(frozen=True)
class ArgmaxClassifier(_ChunkedClassifier):
    """Greedy-only builds: the token, without a [vocab] logits vector."""

    CODE_BYTES: ClassVar[int] = 256  # the argmax over chunks (measured)
    VERIFY_CODE_BYTES: ClassVar[int] = 512  # tllm_argmax_batch_* (tllm_verify.h) inlined
    STREAMED: ClassVar[type] = StreamedArgmax
    matvec: Matvec
    chunk_rows: int
    best: BufferRef | None = None  # int32_t[P]: each position's token in the verification pass (lower/speculate.py)
    best_v: BufferRef | None = None  # float[P]: its logit, the race's state

    def c_call(self) -> CCall:
        return CCall(f"tllm_argmax_{self.matvec.layout}", tuple(self.matvec.c_args() + [shape(self.chunk_rows)]),
                     "greedy_token = ")

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass: every position's first maximum (tllm_argmax_batch_*)."""
        mv = self.matvec
        return CCall(f"tllm_argmax_batch_{mv.layout}", tuple(mv.batch_inputs() + _verify_tail(mv, self.chunk_rows)
                                                             + [buf(self.best), buf(self.best_v)]))

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return VerifyOutput(VERIFY_BEST, "int32_t"), VerifyOutput(VERIFY_BEST_V, "float")

    def with_verify_outputs(self, refs: dict) -> "ArgmaxClassifier":
        return dataclasses.replace(self, best=refs[VERIFY_BEST], best_v=refs[VERIFY_BEST_V])

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, "argmax"), self.matvec.out


@dataclass(frozen=True)
class TopKClassifier(_ChunkedClassifier):
    """`--sampler topk:K` builds: each chunk pushed into the running K-entry
    set held in `value` / `ids`."""

    VERIFY_CODE_BYTES: ClassVar[int] = 512  # tllm_topk_batch_* (tllm_verify.h) inlined
    STREAMED: ClassVar[type] = StreamedTopK
    matvec: Matvec
    chunk_rows: int
    k: int  # entries of the set (K <= vocab, lowering checks)
    value: BufferRef  # float[k] (the verification pass: position p's set at p x k)
    ids: BufferRef  # uint16_t[k]
    held: BufferRef | None = None  # int32_t[P]: each position's entries in the verification pass

    def c_call(self) -> CCall:
        return CCall(f"tllm_topk_{self.matvec.layout}",
                     tuple(self.matvec.c_args() + [shape(self.chunk_rows), fixed("&topk_set")]))

    def set_args(self) -> list:
        """Every position's set: values, ids, K, counts (tllm_topk_batch_*)."""
        return [buf(self.value), buf(self.ids), fixed("TLLM_TOP_K"), buf(self.held)]

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass: every position's K-entry set (tllm_topk_batch_*)."""
        mv = self.matvec
        return CCall(f"tllm_topk_batch_{mv.layout}", tuple(mv.batch_inputs() + _verify_tail(mv, self.chunk_rows)
                                                           + self.set_args()))

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return (VerifyOutput(VERIFY_HELD, "int32_t"),)

    def with_verify_outputs(self, refs: dict) -> "TopKClassifier":
        return dataclasses.replace(self, held=refs[VERIFY_HELD])

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, f"top-{self.k} set"), self.value
