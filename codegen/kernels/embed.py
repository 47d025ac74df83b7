"""The embedding row lookup: the token's row of the table, dequantized to float.

From a Q4 table (tllm_embed_q4, or tllm_embed_q4x4 reading the token's
4-row tile), or from llama.cpp's kept blocks (tllm_embed_q40/q41/q80, or
tllm_embed_q41x4 etc. from their 4-row tiles).  Streamed, the token's tile
cannot be prefetched (the token is known only when the step starts): it is
copied synchronously into the free stream buffer (tllm_stream_embed_*)."""
from __future__ import annotations

from dataclasses import dataclass

from ..abi import Q4X4_TILE
from .base import Kernel, PinCandidate, WeightRead
from .c_text import CCall, buf, fixed, matrix, param
from .chunks import line_up, stream_kernel, whole_matrix_bytes
from .refs import BufferRef, GGUFRef, Q4Ref
from .sizes import is_tiled, layout_of, lookup_bytes, tile_bytes


def lookup_read(table: Q4Ref | GGUFRef) -> tuple[WeightRead, ...]:
    """The token's row of the table (its 4-row tile in a tiled layout)."""
    return (WeightRead(table.name, layout_of(table), lookup_bytes(table), 0),)


class _Embedding(Kernel):
    """What the two table formats share: one row (or tile) read per token,
    and, for a tiled table, its streamed form and its pin."""

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return lookup_read(self.table)

    def streamed(self, chunk_bytes: int) -> "StreamedEmbed | None":
        if not is_tiled(self.table):
            return None
        tb = tile_bytes(self.table)
        return StreamedEmbed(self, tb, line_up(tb))

    def pin_candidate(self) -> PinCandidate | None:
        """One 4-row tile of the table is read per token."""
        t = self.table
        if not is_tiled(t):
            return None
        kind = t.blob_kind if isinstance(t, GGUFRef) else "q4x4"
        return PinCandidate(t.name, kind, whole_matrix_bytes(t), 1 / -(-t.rows // Q4X4_TILE))


@dataclass(frozen=True)
class EmbedQ4(_Embedding):
    table: Q4Ref
    out: BufferRef

    def c_call(self) -> CCall:
        fn = "tllm_embed_q4x4" if self.table.layout == "q4x4" else "tllm_embed_q4"
        return CCall(fn, (matrix(self.table), fixed("token"), buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"embed_q4 {self.table.rows}x{self.table.cols}", self.out


@dataclass(frozen=True)
class EmbedGGUF(_Embedding):
    """Embedding row lookup from a GGUF block table (tllm_embed_q40/q41/q80, tiled: _q40x4 ...)."""

    table: GGUFRef
    out: BufferRef

    def c_call(self) -> CCall:
        return CCall(f"tllm_embed_{self.table.suffix}", (matrix(self.table), fixed("token"), buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        t = self.table
        return f"embed {t.qtype} {t.rows}x{t.cols} (GGUF blocks{' in 4-row tiles' if t.tiled else ''})", self.out


@dataclass(frozen=True)
class StreamedEmbed(Kernel):
    """The embedding row: its 4-row tile, known only once the token is,
    copied synchronously into the free stream buffer."""

    embed: EmbedQ4 | EmbedGGUF
    tile_bytes: int
    copy_bytes: int

    @property
    def table(self) -> Q4Ref | GGUFRef:
        return self.embed.table

    def c_call(self) -> CCall:
        fn, kernels = stream_kernel(self.table, "embed")
        copy = param(f"{self.copy_bytes}u", self.copy_bytes, "uint32_t", self.table.name + ".copy_bytes")
        return CCall(fn, (fixed("&weight_stream"), *kernels, matrix(self.table), copy, fixed("token"),
                          buf(self.embed.out)))

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.embed.describe()
        return what + f", its tile fetched ({self.copy_bytes} B)", out

    def stream_buffer_bytes(self) -> int:
        return self.copy_bytes

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.embed.weight_reads()

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        return self.embed.code_parts()
