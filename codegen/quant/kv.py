"""KV-cache storage formats (the KV half of quant/formats.py's statement).

int8 (`--kv-bits 8`): per (position, kv head) one row of head_dim int8
values and one float32 scale, rounding as exact.quantize_rows_i8.

int4 (`--kv-bits 4`): per (position, kv head) head_dim int4 values in
[-7, 7], packed two per byte, element 2j in the LOW nibble of byte j (the
weights' order), and one float32 scale per group of `group` consecutive
elements along head_dim (exact.quantize_rows_i4).  The group is the largest
divisor of head_dim that is <= 32, so groups never straddle heads and a
scale costs at most a quarter of the bits it describes in the common
head_dim=64/128 case.

Layout of one layer's cache (C: tllm_kv4_layer):
    k, v        uint8  [max_seq][n_kv_heads][head_dim / 2]
    k_scale, v_scale float [max_seq][n_kv_heads][head_dim / group]
"""
from __future__ import annotations

from dataclasses import dataclass

KV4_GROUP_MAX = 32


def kv4_group(head_dim: int) -> int:
    return max(d for d in range(1, min(head_dim, KV4_GROUP_MAX) + 1) if head_dim % d == 0)


@dataclass(frozen=True)
class KVLayout:
    bits: int
    ctype: str  # element type of the value buffer
    bytes_per_pos: int  # value bytes of one position (all kv heads)
    scales_per_pos: int  # float32 scales of one position (all kv heads)
    group: int  # elements per scale

    def bytes_per_token(self, n_layers: int) -> int:
        """K and V, values and scales, all layers: the cost of one more token of context."""
        return n_layers * 2 * (self.bytes_per_pos + 4 * self.scales_per_pos)


def kv_layout(config, bits: int) -> KVLayout:
    hd, nkv = config.head_dim, config.n_kv_heads
    if bits == 8:
        return KVLayout(8, "int8_t", nkv * hd, nkv, hd)
    if bits == 4:
        assert hd % 2 == 0, "int4 KV packs head_dim in pairs (RoPE already needs an even head_dim)"
        g = kv4_group(hd)
        return KVLayout(4, "uint8_t", nkv * hd // 2, nkv * (hd // g), g)
    raise AssertionError(f"no KV layout for {bits} bits")
