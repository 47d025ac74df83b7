"""numpy twins of the byte layouts some kernels write or read that have no
encoder in codegen yet: the x16 activation stream and its batched x16b form
(quant/formats.py states them; tllm_kernels_m7.h), nibble packing that runs
continuously across rows (the int4 KV cache, CMSIS-NN's s4 filter), and the
fused gate/up tile order.  Each is written from the layout's prose, not
from the C, so a test that passes means the two readings agree."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.abi import Q4X4_BLOCK
from tinyllm_gen.quant.formats import x16_stream_bytes

F32 = np.float32


@dataclass(frozen=True)
class X16Group:
    q: np.ndarray  # int16, padded with zeros to a multiple of 8
    sum8: int  # 8 * sum(q)
    scale: np.float32


def x16_groups(q: np.ndarray, scales: np.ndarray, group: int) -> list[X16Group]:
    out = []
    for gi, (a, b) in enumerate(exact.group_bounds(len(q), group)):
        padded = -(-(b - a) // Q4X4_BLOCK) * Q4X4_BLOCK
        g = np.zeros(padded, np.int16)
        g[: b - a] = q[a:b]
        out.append(X16Group(g, 8 * int(q[a:b].astype(np.int64).sum()), F32(scales[gi])))
    return out


def x16_of_quantized(q: np.ndarray, scales: np.ndarray, group: int) -> bytes:
    """Per group: the int16 values padded to a multiple of 8, int32 8*sum, float32 scale."""
    out = bytearray()
    for g in x16_groups(q, scales, group):
        out += g.q.astype("<i2").tobytes() + np.int32(g.sum8).astype("<i4").tobytes()
        out += np.asarray(g.scale, "<f4").tobytes()
    return bytes(out)


def x16_of(x: np.ndarray, group: int) -> bytes:
    """tllm_quantize_x16's stream of x: exact.quantize_groups_i8, laid out."""
    return x16_of_quantized(*exact.quantize_groups_i8(x, group), group)


def parse_x16(stream: bytes, n: int, group: int) -> list[X16Group]:
    groups, at = [], 0
    for a, b in exact.group_bounds(n, group):
        padded = -(-(b - a) // Q4X4_BLOCK) * Q4X4_BLOCK
        q = np.frombuffer(stream, "<i2", padded, at).astype(np.int16)
        at += 2 * padded
        sum8 = int(np.frombuffer(stream, "<i4", 1, at)[0])
        scale = np.frombuffer(stream, "<f4", 1, at + 4)[0]
        at += 8
        groups.append(X16Group(q, sum8, F32(scale)))
    assert at == x16_stream_bytes(n, group)
    return groups


def x16b_of(streams: list[list[X16Group]]) -> tuple[bytes, np.ndarray]:
    """The x16b stream of P tokens' x16 groups, and which token owns each
    byte.  P = 1: the x16 stream itself.  P >= 2, per group: P int32
    -8*sum, then per block of 8 inputs and lane pair j the P words
    (x_p[k+2j], x_p[k+2j+1]), then P float32 scales."""
    P = len(streams)
    out, owner = bytearray(), []

    def put(data: bytes, p: int):
        out.extend(data)
        owner.extend([p] * len(data))

    if P == 1:
        for g in streams[0]:
            put(g.q.astype("<i2").tobytes() + np.int32(g.sum8).astype("<i4").tobytes()
                + np.asarray(g.scale, "<f4").tobytes(), 0)
        return bytes(out), np.array(owner)
    for gi in range(len(streams[0])):
        for p in range(P):
            put(np.int32(-streams[p][gi].sum8).astype("<i4").tobytes(), p)
        for k in range(0, len(streams[0][gi].q), Q4X4_BLOCK):
            for j in range(4):
                for p in range(P):
                    put(streams[p][gi].q[k + 2 * j: k + 2 * j + 2].astype("<i2").tobytes(), p)
        for p in range(P):
            put(np.asarray(streams[p][gi].scale, "<f4").tobytes(), p)
    return bytes(out), np.array(owner)


def x16b_write_token(xb: np.ndarray, x16: bytes, n: int, group: int, P: int, p: int) -> np.ndarray:
    """xb with token p's places replaced by its x16 stream's values (what the
    x16b producers write; other tokens' bytes stay as they were)."""
    mine = parse_x16(x16, n, group)
    zero = [X16Group(np.zeros_like(g.q), 0, F32(0)) for g in mine]
    full, owner = x16b_of([mine if t == p else zero for t in range(P)])
    out = np.array(xb, np.uint8, copy=True)
    sel = owner == p
    out[sel] = np.frombuffer(full, np.uint8)[sel]
    return out


def split_gate_up_tiles(gu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fused gate/up matvec's output, per tile t: gate 2t, gate 2t+1, up 2t, up 2t+1."""
    t = np.asarray(gu, F32).reshape(-1, 4)
    return t[:, :2].reshape(-1), t[:, 2:].reshape(-1)


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """int4 values in a continuous nibble stream, element 2j in the LOW nibble
    of byte j (an odd count ends with a high nibble of 0)."""
    v = (np.asarray(q, np.int16).reshape(-1) & 0xF).astype(np.uint8)
    if len(v) % 2:
        v = np.append(v, np.uint8(0))
    return (v[0::2] | (v[1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray, n: int) -> np.ndarray:
    b = np.asarray(packed, np.uint8)
    v = np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)[:n].astype(np.int8)
    return np.where(v > 7, v - 16, v).astype(np.int8)


def parse_x16b(xb: bytes, n: int, group: int, P: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each token's (q int8 [n], scales) back from an x16b stream (x16b_of's inverse on the values)."""
    if P == 1:
        groups = [parse_x16(xb, n, group)]
    else:
        groups, at = [[] for _ in range(P)], 0
        for a, b in exact.group_bounds(n, group):
            padded = -(-(b - a) // Q4X4_BLOCK) * Q4X4_BLOCK
            neg = np.frombuffer(xb, "<i4", P, at)
            at += 4 * P
            words = np.frombuffer(xb, "<i2", 2 * P * padded // 2, at).reshape(padded // 8, 4, P, 2)
            at += 2 * P * padded
            scales = np.frombuffer(xb, "<f4", P, at)
            at += 4 * P
            for p in range(P):
                groups[p].append(X16Group(words[:, :, p, :].reshape(-1).astype(np.int16), -int(neg[p]),
                                          F32(scales[p])))
    out = []
    for gs in groups:
        q = np.concatenate([g.q[: b - a] for g, (a, b) in zip(gs, exact.group_bounds(n, group))]).astype(np.int8)
        out.append((q, np.array([g.scale for g in gs], F32)))
    return out
