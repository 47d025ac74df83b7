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
from .chunks import chunks_of
from .matvec import Matvec, MatvecQ4x4, streamed_note
from .refs import BufferRef, GGUFRef, Q4Ref

CHUNK_ROWS = 64  # classifier rows per chunk (a multiple of the q4x4 tile)
VERIFY_BEST, VERIFY_BEST_V, VERIFY_HELD = "verify.best", "verify.best_v", "verify.held"
ROW0 = fixed("0")  # a whole matrix: the q4x4 batch kernels' first row (a stream chunk's in tllm_stream.h)


def chunk_rows_for(vocab_size: int) -> int:
    """Rows of the logits buffer of a chunked classifier."""
    return min(vocab_size, CHUNK_ROWS)


def _what(mv: Matvec, rows: int, keeps: str) -> str:
    m = mv.matrix
    return f"{mv.layout_name} classifier {m.rows}x{m.cols} g{m.group}, {keeps} over {rows}-row chunks"


@dataclass(frozen=True)
class ArgmaxClassifier(Kernel):
    """Greedy-only builds: the token, without a [vocab] logits vector."""

    CODE_BYTES: ClassVar[int] = 256  # the argmax over chunks (measured)
    VERIFY_CODE_BYTES: ClassVar[int] = 512  # tllm_argmax_batch_* (tllm_verify.h) inlined
    matvec: Matvec
    chunk_rows: int
    best: BufferRef | None = None  # int32_t[P]: each position's token in the verification pass (lower/speculate.py)
    best_v: BufferRef | None = None  # float[P]: its logit, the race's state

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.matvec.matrix

    def c_call(self) -> CCall:
        return CCall(f"tllm_argmax_{self.matvec.layout}", tuple(self.matvec.c_args() + [shape(self.chunk_rows)]),
                     "greedy_token = ")

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass: every position's first maximum (tllm_argmax_batch_*)."""
        mv = self.matvec
        row0 = [ROW0] if mv.layout == "q4x4" else []
        return CCall(f"tllm_argmax_batch_{mv.layout}", tuple(
            mv.batch_inputs() + [fixed("n"), vec(mv.bias), buf(mv.out), shape(self.chunk_rows)] + row0
            + [buf(self.best), buf(self.best_v)]))

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return VerifyOutput(VERIFY_BEST, "int32_t"), VerifyOutput(VERIFY_BEST_V, "float")

    def with_verify_outputs(self, refs: dict) -> "ArgmaxClassifier":
        return dataclasses.replace(self, best=refs[VERIFY_BEST], best_v=refs[VERIFY_BEST_V])

    def tile_output(self) -> BufferRef | None:
        return self.matvec.tile_output()

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, "argmax"), self.matvec.out

    def streamed(self, chunk_bytes: int) -> "StreamedArgmaxQ4x4 | None":
        if not isinstance(self.matvec, MatvecQ4x4):
            return None
        rows, chunks = chunks_of(self.matrix, chunk_bytes)
        return StreamedArgmaxQ4x4(self, rows, chunks)

    def pin_candidate(self) -> PinCandidate | None:
        return self.matvec.pin_candidate() if isinstance(self.matvec, MatvecQ4x4) else None

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.matvec.weight_reads()


@dataclass(frozen=True)
class TopKClassifier(Kernel):
    """`--sampler topk:K` builds: each chunk pushed into the running K-entry
    set held in `value` / `ids`."""

    VERIFY_CODE_BYTES: ClassVar[int] = 512  # tllm_topk_batch_* (tllm_verify.h) inlined
    matvec: Matvec
    chunk_rows: int
    k: int  # entries of the set (K <= vocab, lowering checks)
    value: BufferRef  # float[k] (the verification pass: position p's set at p x k)
    ids: BufferRef  # uint16_t[k]
    held: BufferRef | None = None  # int32_t[P]: each position's entries in the verification pass

    @property
    def matrix(self) -> Q4Ref | GGUFRef:
        return self.matvec.matrix

    def c_call(self) -> CCall:
        return CCall(f"tllm_topk_{self.matvec.layout}",
                     tuple(self.matvec.c_args() + [shape(self.chunk_rows), fixed("&topk_set")]))

    def set_args(self) -> list:
        """Every position's set: values, ids, K, counts (tllm_topk_batch_*)."""
        return [buf(self.value), buf(self.ids), fixed("TLLM_TOP_K"), buf(self.held)]

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass: every position's K-entry set (tllm_topk_batch_*)."""
        mv = self.matvec
        row0 = [ROW0] if mv.layout == "q4x4" else []
        return CCall(f"tllm_topk_batch_{mv.layout}", tuple(
            mv.batch_inputs() + [fixed("n"), vec(mv.bias), buf(mv.out), shape(self.chunk_rows)] + row0
            + self.set_args()))

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return (VerifyOutput(VERIFY_HELD, "int32_t"),)

    def with_verify_outputs(self, refs: dict) -> "TopKClassifier":
        return dataclasses.replace(self, held=refs[VERIFY_HELD])

    def tile_output(self) -> BufferRef | None:
        return self.matvec.tile_output()

    def describe(self) -> tuple[str, BufferRef]:
        return _what(self.matvec, self.chunk_rows, f"top-{self.k} set"), self.value

    def streamed(self, chunk_bytes: int) -> "StreamedTopKQ4x4 | None":
        if not isinstance(self.matvec, MatvecQ4x4):
            return None
        rows, chunks = chunks_of(self.matrix, chunk_bytes)
        return StreamedTopKQ4x4(self, rows, chunks)

    def pin_candidate(self) -> PinCandidate | None:
        return self.matvec.pin_candidate() if isinstance(self.matvec, MatvecQ4x4) else None

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.matvec.weight_reads()


@dataclass(frozen=True)
class StreamedArgmaxQ4x4(Kernel):
    """The greedy classifier over the stream: per chunk, argmax_rows rows at
    a time into the logits chunk, one running first maximum over all."""

    CODE_BYTES: ClassVar[int] = 256
    VERIFY_CODE_BYTES: ClassVar[int] = 768  # tllm_stream_argmax_batch_q4x4 inlined
    argmax: ArgmaxClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref:
        return self.argmax.matrix

    def c_call(self) -> CCall:
        mv = self.argmax.matvec
        return CCall("tllm_stream_argmax_q4x4", (fixed("&weight_stream"), matrix(mv.matrix),
                                                 chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream),
                                                 vec(mv.bias), buf(mv.out), shape(self.argmax.chunk_rows)),
                     "greedy_token = ")

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.argmax.describe()
        return what + streamed_note(self.chunks, self.chunk_rows), out

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass over the stream (tllm_stream_argmax_batch_q4x4)."""
        a = self.argmax
        mv = a.matvec
        return CCall("tllm_stream_argmax_batch_q4x4", (
            fixed("&weight_stream"), matrix(mv.matrix), chunk_rows_param(mv.matrix, self.chunk_rows),
            buf(mv.x_stream), fixed("n"), vec(mv.bias), buf(mv.out), shape(a.chunk_rows), buf(a.best),
            buf(a.best_v)), "")

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return self.argmax.verify_outputs()

    def with_verify_outputs(self, refs: dict) -> "StreamedArgmaxQ4x4":
        return dataclasses.replace(self, argmax=self.argmax.with_verify_outputs(refs))

    def tile_output(self) -> BufferRef | None:
        return self.argmax.tile_output()

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.argmax.weight_reads()


@dataclass(frozen=True)
class StreamedTopKQ4x4(Kernel):
    """The top-K classifier over the stream: per chunk, chunk_rows rows at a
    time into the logits chunk, each pushed into the running K-entry set."""

    VERIFY_CODE_BYTES: ClassVar[int] = 768  # tllm_stream_topk_batch_q4x4 inlined
    topk: TopKClassifier
    chunk_rows: int
    chunks: tuple[Chunk, ...]

    @property
    def matrix(self) -> Q4Ref:
        return self.topk.matrix

    def c_call(self) -> CCall:
        mv = self.topk.matvec
        return CCall("tllm_stream_topk_q4x4", (fixed("&weight_stream"), matrix(mv.matrix),
                                               chunk_rows_param(mv.matrix, self.chunk_rows), buf(mv.x_stream),
                                               vec(mv.bias), buf(mv.out), shape(self.topk.chunk_rows),
                                               fixed("&topk_set")))

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.topk.describe()
        return what + streamed_note(self.chunks, self.chunk_rows), out

    def batched(self, ctx: BatchContext) -> CCall:
        """The verification pass over the stream (tllm_stream_topk_batch_q4x4)."""
        t = self.topk
        mv = t.matvec
        return CCall("tllm_stream_topk_batch_q4x4", tuple(
            [fixed("&weight_stream"), matrix(mv.matrix), chunk_rows_param(mv.matrix, self.chunk_rows),
             buf(mv.x_stream), fixed("n"), vec(mv.bias), buf(mv.out), shape(t.chunk_rows)] + t.set_args()))

    def verify_outputs(self) -> tuple[VerifyOutput, ...]:
        return self.topk.verify_outputs()

    def with_verify_outputs(self, refs: dict) -> "StreamedTopKQ4x4":
        return dataclasses.replace(self, topk=self.topk.with_verify_outputs(refs))

    def tile_output(self) -> BufferRef | None:
        return self.topk.tile_output()

    def stream_chunks(self) -> tuple[Chunk, ...]:
        return self.chunks

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.topk.weight_reads()
