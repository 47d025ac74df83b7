"""The activations' int8 quantization before a linear layer: one copy shared
by every linear reading the same value (q, k and v share one; so do gate
and up).  Group-wise with float scales (tllm_quantize_i8), into the
Cortex-M7 x16 stream (tllm_quantize_x16), or with the per-channel scheme's
calibrated static scale (tllm_quantize_static_s8)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import BatchContext, Kernel
from .c_text import CCall, buf, float_param, group_arg, shape, x16_batched
from .refs import BufferRef


@dataclass(frozen=True)
class QuantizeI8(Kernel):
    LABELLED: ClassVar[bool] = False  # its label names the value, the comment says it
    x: BufferRef
    n: int
    group: int
    q: BufferRef
    scales: BufferRef

    def c_call(self) -> CCall:
        return CCall("tllm_quantize_i8", (buf(self.x), shape(self.n), group_arg(self.group), buf(self.q),
                                          buf(self.scales)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"int8 x{self.n} g{self.group}", self.q


@dataclass(frozen=True)
class QuantizeX16(Kernel):
    """int8 quantization into the Cortex-M7 int16 activation stream."""

    LABELLED: ClassVar[bool] = False
    x: BufferRef
    n: int
    group: int
    stream: BufferRef

    def c_call(self) -> CCall:
        return CCall("tllm_quantize_x16", (buf(self.x), shape(self.n), group_arg(self.group), buf(self.stream)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"int8 (as int16 stream) x{self.n} g{self.group}", self.stream

    def batched(self, ctx: BatchContext) -> CCall:
        return x16_batched(self.c_call(), ctx.batched)


@dataclass(frozen=True)
class QuantizeStaticS8(Kernel):
    """Per-channel scheme: int8 with a calibrated static scale."""

    LABELLED: ClassVar[bool] = False
    x: BufferRef
    n: int
    inv_scale: np.float32
    q: BufferRef

    def c_call(self) -> CCall:
        return CCall("tllm_quantize_static_s8", (buf(self.x), shape(self.n),
                                                 float_param(self.inv_scale, self.x.name + ".inv_scale"), buf(self.q)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"int8 static x{self.n}", self.q
