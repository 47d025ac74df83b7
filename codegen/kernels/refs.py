"""What a kernel call's arguments point at: planned buffers and the weights
blob's entries.

Lowering makes them symbolic (offset -1, region ""); binding writes the
plan's and the blob's offsets into them (bind.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from ..quant.formats import GGUF_BLOCK, GGUF_TILED


@dataclass(frozen=True)
class BufferRef:
    """A planned arena buffer: `count` elements of `ctype` for one token."""

    name: str
    ctype: str
    count: int
    offset: int = -1
    region: str = ""  # the memory region whose arena holds it


@dataclass(frozen=True)
class Q4Ref:
    """A Q4 matrix in the weights blob: packed nibbles + scales ("q4"), or
    one stream in the Cortex-M7 layout ("q4x4", scales_offset unused)."""

    name: str
    rows: int
    cols: int
    group: int
    packed_offset: int = -1
    scales_offset: int = -1
    layout: str = "q4"


@dataclass(frozen=True)
class GGUFRef:
    """A matrix kept in one of llama.cpp's block formats (quant/formats.py
    GGUFMatrix): its blocks exactly as in the GGUF file, in the file's row
    order ("blocks", the portable kernels) or in 4-row tiles ("tiled":
    q40x4/q41x4/q80x4, the Cortex-M7 kernels; the same bytes, moved)."""

    name: str
    qtype: str  # "Q4_0" | "Q4_1" | "Q8_0"
    rows: int
    cols: int
    offset: int = -1
    layout: str = "blocks"  # "blocks" | "tiled"

    @property
    def group(self) -> int:
        return GGUF_BLOCK

    @property
    def tiled(self) -> bool:
        return self.layout == "tiled"

    @property
    def suffix(self) -> str:
        """The C kernels' name part: tllm_matvec_q41, or tllm_matvec_q41x4 for the tiled layout."""
        return GGUF_TILED[self.qtype] if self.tiled else self.qtype.lower().replace("_", "")

    @property
    def blob_kind(self) -> str:
        """Its entry's kind in the weights blob (lower/blob.py)."""
        return ("ggufx4." if self.tiled else "gguf.") + self.qtype.lower()


@dataclass(frozen=True)
class VectorRef:
    """A float32 vector (norm weight, bias, RoPE table) in the weights blob."""

    name: str
    count: int
    offset: int = -1


@dataclass(frozen=True)
class FcS4PcRef:
    """One per-channel int4 layer's constants in the weights blob."""

    name: str  # the linear's output value
    weight: Q4Ref
    bias_offset: int = -1
    multipliers_offset: int = -1
    shifts_offset: int = -1
    out_scale: float = 1.0


MatrixRef = Q4Ref | GGUFRef


def blob_offset(m: MatrixRef) -> int:
    """Where a bound matrix starts in the weights blob."""
    return m.packed_offset if isinstance(m, Q4Ref) else m.offset


def refs_of(obj, kind: type) -> Iterator:
    """Every `kind` record (BufferRef, VectorRef ...) inside a call's argument record, nested records too."""
    if isinstance(obj, kind):
        yield obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from refs_of(getattr(obj, f.name), kind)
