"""Elementwise kernels, in place on their first input: the residual add and
SwiGLU's silu(gate) * up (alone, or from the fused gate/up matvec's
(g, g, u, u) tiles straight into the down projection's x16 stream)."""
from __future__ import annotations

from dataclasses import dataclass

from .base import BatchContext, Kernel
from .c_text import CCall, buf, group_arg, shape, x16_batched
from .refs import BufferRef


@dataclass(frozen=True)
class Add(Kernel):
    a: BufferRef
    b: BufferRef
    n: int

    def c_call(self) -> CCall:
        return CCall("tllm_add", (buf(self.a), buf(self.b), shape(self.n)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"add {self.n} in place", self.a


@dataclass(frozen=True)
class SiluMul(Kernel):
    gate: BufferRef
    up: BufferRef
    n: int

    def c_call(self) -> CCall:
        return CCall("tllm_silu_mul", (buf(self.gate), buf(self.up), shape(self.n)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"silu(gate)*up {self.n} in place", self.gate


@dataclass(frozen=True)
class SiluMulPairsX16(Kernel):
    """SiLU(gate) * up from a fused gate/up matvec's (g, g, u, u) tiles,
    quantized straight into the next linear's int16 stream (lower/fusion.py)."""

    gu: BufferRef
    n: int
    group: int
    stream: BufferRef

    def c_call(self) -> CCall:
        return CCall("tllm_silu_mul_pairs_x16", (buf(self.gu), shape(self.n), group_arg(self.group),
                                                 buf(self.stream)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"silu(gate)*up {self.n} + int8 (as int16 stream) g{self.group}", self.stream

    def batched(self, ctx: BatchContext) -> CCall:
        return x16_batched(self.c_call(), ctx.batched)
