"""RoPE and attention over the KV cache.

Attention stores this position's k and v (int8 with one scale per head,
tllm_attention_i8, group-wise int4, tllm_attention_kv4, or int8 k with
group-wise int4 v, tllm_attention_k8v4: quant/kv.py), then attends over
positions 0..pos.  In a batched prefill it runs token by token in order, so
its query and score scratch hold one token's values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..quant.kv import KV4, KV8, KV8V4, KVBits
from .base import Kernel
from .c_text import CArg, CCall, KV, buf, fixed, shape
from .refs import BufferRef, VectorRef


@dataclass(frozen=True)
class Rope(Kernel):
    x: BufferRef
    n_heads: int
    head_dim: int

    def c_call(self) -> CCall:
        return CCall("tllm_rope", (buf(self.x), shape(self.n_heads), shape(self.head_dim), fixed("rope_cos"),
                                   fixed("rope_sin")))

    def describe(self) -> tuple[str, BufferRef]:
        return f"rope {self.n_heads}x{self.head_dim} in place", self.x


@dataclass(frozen=True)
class Attention(Kernel):
    """Attention over the KV cache: int8 (tllm_attention_i8) or group-wise
    int4 (tllm_attention_kv4, quant/kv.py), with `rotate` the int4 form over
    Hadamard-rotated k and q (tllm_attention_kv4_hadamard); the scratch is
    the same (the rotation works in the output buffer)."""

    # the int4 KV kernels (measured), with the rotation: both entry points share one body that holds
    # tllm_hadamard_heads inlined, so rotated and unrotated images are the same size; the keys' clipped-scale
    # quantizer (tllm_quantize_i4_clip and its ratio table) adds 412 B (arm-none-eabi-size of tllm_kernels.o),
    # the centred cache's subtractions and add-back (--kv-center) 168 B of attention_kv4
    KV4_CODE_BYTES: ClassVar[int] = 1_184 + 412 + 168
    # tllm_attention_k8v4 (the int8 key pass, the int4 value passes, tllm_quantize_i4) in place of
    # tllm_attention_i8: measured +980 B of text over the int8 build of story-260k on the DK
    K8V4_CODE_BYTES: ClassVar[int] = 980
    layer: int
    q: BufferRef
    k: BufferRef
    v: BufferRef
    k_cache: BufferRef
    v_cache: BufferRef
    k_scale: BufferRef
    v_scale: BufferRef
    q8: BufferRef
    scores: BufferRef
    out: BufferRef
    kv_bits: KVBits = KV8
    group: int = 0  # int4 elements per scale along head_dim (an int4 V: kv_bits 4 or 8:4)
    rotate: bool = False  # int4 only: k and q Hadamard-rotated per head before quantizing (--kv-rotate)
    # int4 only: the centres the cache subtracts (quant/kv_center.py), passed in the KV table (tllm_kv4_layer)
    k_center: VectorRef | None = None
    v_center: VectorRef | None = None

    def c_call(self) -> CCall:
        fn, table = self.c_function()
        if self.rotate:
            fn += "_hadamard"
        kv = CArg(f"&{table}[{self.layer}]", KV, self.layer, name=table)  # name: the table the loop indexes with l
        return CCall(fn, (fixed("&ATTENTION_SHAPE"), buf(self.q), buf(self.k), buf(self.v), kv, fixed("pos"),
                          buf(self.q8), buf(self.scores), buf(self.out)))

    def c_function(self) -> tuple[str, str]:
        """The C kernel (before any _hadamard) and the layer table it reads (tllm_model.c.j2)."""
        if self.kv_bits == 4:
            return "tllm_attention_kv4", "KV4"
        if self.kv_bits == KV8V4:
            return "tllm_attention_k8v4", "KV8V4"
        return "tllm_attention_i8", "KV"

    def describe(self) -> tuple[str, BufferRef]:
        kv = {KV4: f"int4 KV g{self.group}", KV8V4: f"int8 K int4 V g{self.group}"}.get(self.kv_bits, "int8 KV")
        if self.rotate:
            kv += " Hadamard-rotated, K scales clipped"
        if self.k_center is not None:
            kv += ", centred, V scales clipped"
        return f"attention over {kv} (stores k,v at pos)", self.out

    def per_token_scratch(self) -> frozenset:
        return frozenset((self.q8.name, self.scores.name))
