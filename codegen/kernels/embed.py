"""The embedding row lookup: the token's row of the table, dequantized to float.

From a Q4 table (tllm_embed_q4, or tllm_embed_q4x4 reading the token's
4-row tile), or from llama.cpp's kept blocks (tllm_embed_q40/q41/q80).
Streamed, the token's tile cannot be prefetched (the token is known only
when the step starts): it is copied synchronously into the free stream
buffer (tllm_stream_embed_q4x4)."""
from __future__ import annotations

from dataclasses import dataclass

from ..abi import Q4X4_TILE
from .base import Kernel, PinCandidate, WeightRead
from .c_text import CCall, buf, fixed, matrix, param
from .chunks import line_up, tile_bytes, whole_matrix_bytes
from .refs import BufferRef, GGUFRef, Q4Ref
from .sizes import layout_of, lookup_bytes


def lookup_read(table: Q4Ref | GGUFRef) -> tuple[WeightRead, ...]:
    """The token's row of the table (its 4-row tile in q4x4)."""
    return (WeightRead(table.name, layout_of(table), lookup_bytes(table), 0),)


@dataclass(frozen=True)
class EmbedQ4(Kernel):
    table: Q4Ref
    out: BufferRef

    def c_call(self) -> CCall:
        fn = "tllm_embed_q4x4" if self.table.layout == "q4x4" else "tllm_embed_q4"
        return CCall(fn, (matrix(self.table), fixed("token"), buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"embed_q4 {self.table.rows}x{self.table.cols}", self.out

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return lookup_read(self.table)

    def streamed(self, chunk_bytes: int) -> "StreamedEmbedQ4x4 | None":
        if self.table.layout != "q4x4":
            return None
        tb = tile_bytes(self.table)
        return StreamedEmbedQ4x4(self, tb, line_up(tb))

    def pin_candidate(self) -> PinCandidate | None:
        """One 4-row tile of the table is read per token."""
        if self.table.layout != "q4x4":
            return None
        t = self.table
        return PinCandidate(t.name, "q4x4", whole_matrix_bytes(t), 1 / -(-t.rows // Q4X4_TILE))


@dataclass(frozen=True)
class EmbedGGUF(Kernel):
    """Embedding row lookup from a GGUF block table (tllm_embed_q40/q41/q80)."""

    table: GGUFRef
    out: BufferRef

    def c_call(self) -> CCall:
        return CCall(f"tllm_embed_{self.table.suffix}", (matrix(self.table), fixed("token"), buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"embed {self.table.qtype} {self.table.rows}x{self.table.cols} (GGUF blocks)", self.out

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return lookup_read(self.table)


@dataclass(frozen=True)
class StreamedEmbedQ4x4(Kernel):
    """The embedding row: its 4-row tile, known only once the token is,
    copied synchronously into the free stream buffer."""

    embed: EmbedQ4
    tile_bytes: int
    copy_bytes: int

    @property
    def table(self) -> Q4Ref:
        return self.embed.table

    def c_call(self) -> CCall:
        copy = param(f"{self.copy_bytes}u", self.copy_bytes, "uint32_t", self.table.name + ".copy_bytes")
        return CCall("tllm_stream_embed_q4x4", (fixed("&weight_stream"), matrix(self.table), copy, fixed("token"),
                                                buf(self.embed.out)))

    def describe(self) -> tuple[str, BufferRef]:
        what, out = self.embed.describe()
        return what + f", its tile fetched ({self.copy_bytes} B)", out

    def stream_buffer_bytes(self) -> int:
        return self.copy_bytes

    def weight_reads(self) -> tuple[WeightRead, ...]:
        return self.embed.weight_reads()
