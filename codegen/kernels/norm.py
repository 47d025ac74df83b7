"""RMSNorm: x / rms(x) * weight, alone or fused with the int8 quantization
of its output into the Cortex-M7 x16 stream (lower/fusion.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..reference.exact import c_float_literal
from .base import BatchContext, Kernel
from .c_text import CArg, CCall, buf, fixed, group_arg, vec, x16_batched
from .refs import BufferRef, VectorRef


def _eps(eps: np.float32, eps_name: str) -> CArg:
    return fixed(eps_name or c_float_literal(eps))


@dataclass(frozen=True)
class RmsNorm(Kernel):
    x: BufferRef
    weight: VectorRef
    n: int
    eps: np.float32
    out: BufferRef
    eps_name: str = ""  # the C constant holding eps (TLLM_NORM_EPS) when it is the model's, "" for a literal

    def c_call(self) -> CCall:
        return CCall("tllm_rmsnorm", (buf(self.x), vec(self.weight), fixed("TLLM_DIM"), _eps(self.eps, self.eps_name),
                                      buf(self.out)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"rmsnorm {self.n}", self.out


@dataclass(frozen=True)
class RmsNormX16(Kernel):
    """RMSNorm fused with the int8 quantization of its output into the
    Cortex-M7 int16 stream (lower/fusion.py)."""

    x: BufferRef
    weight: VectorRef
    n: int
    eps: np.float32
    group: int
    stream: BufferRef
    eps_name: str = ""  # as RmsNorm.eps_name

    def c_call(self) -> CCall:
        return CCall("tllm_rmsnorm_x16", (buf(self.x), vec(self.weight), fixed("TLLM_DIM"),
                                          _eps(self.eps, self.eps_name), group_arg(self.group), buf(self.stream)))

    def describe(self) -> tuple[str, BufferRef]:
        return f"rmsnorm {self.n} + int8 (as int16 stream) g{self.group}", self.stream

    def batched(self, ctx: BatchContext) -> CCall:
        return x16_batched(self.c_call(), ctx.batched)
