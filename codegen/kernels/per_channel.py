"""The per-channel scheme's linear: CMSIS-NN arithmetic (int4 weights with
one scale per output channel, static int8 activations, requantized int8
output dequantized to float), tllm_fc_s4pc (tllm_cmsis.h)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..quant.formats import q4_row_bytes
from .base import Kernel, WeightRead
from .c_text import CCall, buf, fc
from .refs import BufferRef, FcS4PcRef


@dataclass(frozen=True)
class FcS4PerChannel(Kernel):
    UNBATCHABLE: ClassVar[str] = "the per-channel scheme's CMSIS-NN layers have no batched kernel"
    layer: FcS4PcRef
    xq: BufferRef
    q_out: BufferRef
    out: BufferRef

    def c_call(self) -> CCall:
        return CCall("tllm_fc_s4pc", (fc(self.layer), buf(self.xq), buf(self.q_out), buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        w = self.layer.weight
        return f"s4 per-channel fc {w.rows}x{w.cols} (CMSIS-NN arithmetic)", self.out

    def weight_reads(self) -> tuple[WeightRead, ...]:
        w = self.layer.weight
        # the packed nibbles, one float scale per row, then int32 bias, multiplier and shift per row
        return (WeightRead(self.layer.name, "s4pc", w.rows * q4_row_bytes(w.cols) + 16 * w.rows, w.rows * w.cols),)

    def descriptors(self) -> tuple:
        return ()  # its weight is in its own tllm_fc_s4pc_layer descriptor
