"""The weights blob: every constant the firmware reads, in one binary image.

Layout (little-endian; offsets aligned to 16 so scales and tables can be
read as float32 directly):

    0   8  magic b"TLLMWTS1"
    8   4  blob format version (BLOB_VERSION)
   12   4  total bytes
   16   4  checksum of bytes [HEADER_BYTES, total) (blob_checksum)
   20   4  number of tensors
   24  32  sha256 of the payload (the model identity in banners/manifest)
   56   8  reserved (0)
   64  ..  tensors, in sorted name order

Q4 tensors store packed nibbles then scales, or one q4x4 stream for the
Cortex-M7 kernels (quant/formats.py says how); matrices kept in a GGUF
block format (Q4_0/Q4_1/Q8_0) store the file's blocks byte for byte;
float vectors and RoPE tables are float32 arrays.  The firmware checks
magic, version, size and checksum at boot, so a stale or missing weights
file is caught before it produces garbage.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..abi import BLOB_HEADER_BYTES, BLOB_MAGIC, BLOB_VERSION
from ..ir import ModelConfig, build_decoder_graph, expected_weight_shapes
from ..quant.formats import (GGUFMatrix, Q4Tensor, QuantizedGraph, pack_gguf, pack_gguf_tiled, pack_q4x4, unpack_gguf,
                             unpack_gguf_tiled, unpack_q4, unpack_q4x4)
from ..quant.kv_center import centers_from_blob, parse_center_name
from .fusion import FUSED_SUFFIX, fused_gate_up, interleave_gate_up, interleave_gate_up_blocks

HEADER_BYTES = BLOB_HEADER_BYTES
ALIGN = 16


@dataclass(frozen=True)
class BlobEntry:
    name: str
    # "q4.packed" | "q4.scales" | "q4x4" | "gguf.q4_0"/"gguf.q4_1"/"gguf.q8_0" (the file's blocks) |
    # "ggufx4.q4_0"/... (the same blocks in 4-row tiles) | "f32" | "u32"/"u8" (the vocabulary, vocab.py)
    kind: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightsBlob:
    data: bytes
    entries: tuple[BlobEntry, ...]
    checksum: int
    sha256: str

    def entry(self, name: str, kind: str) -> BlobEntry:
        for e in self.entries:
            if e.name == name and e.kind == kind:
                return e
        raise KeyError((name, kind))


def blob_layout(items: Sequence[tuple[str, str, int]]) -> tuple[tuple[BlobEntry, ...], int]:
    """Where each (name, kind, nbytes) goes, in this order, each at the next
    multiple of ALIGN after the header, and the blob's total bytes (padded
    to ALIGN).  build_blob places its data with it and `plan` sizes the blob
    with it (plan/weights_size.py), so the two cannot disagree."""
    entries = []
    offset = HEADER_BYTES
    for name, kind, nbytes in items:
        offset += (-offset) % ALIGN
        entries.append(BlobEntry(name, kind, offset, nbytes))
        offset += nbytes
    return tuple(entries), offset + (-offset) % ALIGN


def build_blob(qg: QuantizedGraph, rope_cos: np.ndarray, rope_sin: np.ndarray,
               vocab_text: bytes | None = None, vocab_offsets: np.ndarray | None = None) -> WeightsBlob:
    """`vocab_text`/`vocab_offsets`: the vocabulary table, when it lives in
    external flash with the weights (vocab.py) rather than in the image."""
    items: list[tuple[str, str, bytes]] = []

    def put(name: str, kind: str, data: bytes) -> None:
        items.append((name, kind, data))

    kept = {name: t.qtype for name, t in qg.gguf.items()}
    pairs = {f.w_gate: f for f in fused_gate_up(qg.graph, qg.kernels, qg.method, kept).values()}
    in_pairs = {w for f in pairs.values() for w in (f.w_gate, f.w_up)}
    tiled = qg.kernels == "cortex-m7"  # kept blocks in 4-row tiles for the M7 kernels
    for name in sorted(qg.q4):
        t = qg.q4[name]
        if name in pairs:  # gate and up as one interleaved matrix (fusion.py)
            f = pairs[name]
            put(f.combined, "q4x4", pack_q4x4(interleave_gate_up(t, qg.q4[f.w_up], f.combined)))
        elif name in in_pairs:
            continue
        elif qg.kernels == "cortex-m7" and qg.method != "per-channel":
            put(name, "q4x4", pack_q4x4(t))
        else:
            put(name, "q4.packed", t.packed())
            put(name, "q4.scales", np.ascontiguousarray(t.scales, "<f4").tobytes())
    for name in sorted(qg.gguf):  # llama.cpp blocks, byte for byte or tiled (quant/formats.py)
        t = qg.gguf[name]
        if name in pairs:  # gate and up's blocks as one interleaved tiled matrix (fusion.py)
            f = pairs[name]
            both = interleave_gate_up_blocks(t, qg.gguf[f.w_up], f.combined)
            put(f.combined, gguf_blob_kind(t.qtype, True), pack_gguf_tiled(both))
        elif name in in_pairs:
            continue
        else:
            put(name, gguf_blob_kind(t.qtype, tiled), pack_gguf_tiled(t) if tiled else pack_gguf(t))
    for name in sorted(qg.static):  # per-channel scheme: int32 bias, multipliers, shifts per linear
        st = qg.static[name]
        for kind, arr in (("s4pc.bias", st.bias), ("s4pc.multipliers", st.multipliers), ("s4pc.shifts", st.shifts)):
            put(name, kind, np.ascontiguousarray(arr, "<i4").tobytes())
    for name in sorted(qg.vectors):
        put(name, "f32", np.ascontiguousarray(qg.vectors[name], "<f4").tobytes())
    if qg.kv_centers is not None:  # the centred int4 cache's centres (quant/kv_center.py)
        for name, c in qg.kv_centers.blob_items():
            put(name, "f32", np.ascontiguousarray(c, "<f4").tobytes())
    put("rope.cos", "f32", np.ascontiguousarray(rope_cos, "<f4").tobytes())
    put("rope.sin", "f32", np.ascontiguousarray(rope_sin, "<f4").tobytes())
    if vocab_text is not None:
        put("vocab", "u32", np.ascontiguousarray(vocab_offsets, "<u4").tobytes())
        put("vocab", "u8", vocab_text)
    entries, total = blob_layout([(name, kind, len(data)) for name, kind, data in items])
    payload = bytearray(total - HEADER_BYTES)
    for e, (_, _, data) in zip(entries, items):
        payload[e.offset - HEADER_BYTES:e.offset - HEADER_BYTES + e.nbytes] = data
    payload = bytes(payload)
    checksum = blob_checksum(payload)
    sha = hashlib.sha256(payload).digest()
    header = struct.pack("<8sIIII32s8x", BLOB_MAGIC, BLOB_VERSION, total, checksum, len(entries), sha)
    assert len(header) == HEADER_BYTES
    return WeightsBlob(data=header + payload, entries=entries, checksum=checksum, sha256=sha.hex())


def gguf_blob_kind(qtype: str, tiled: bool = False) -> str:
    """The entry kind of a matrix kept in llama.cpp's block format `qtype`, in the file's row order
    or in 4-row tiles (kernels.refs.GGUFRef.blob_kind names the same)."""
    return ("ggufx4." if tiled else "gguf.") + qtype.lower()


def blob_checksum(payload: bytes) -> int:
    """Weighted word sum mod 2^32: sum_i w_i * m_i with odd m_i = (i*0x9E3779B1+1)|1.

    Any change to one word changes the sum (odd multipliers are invertible
    mod 2^32) and swapping words changes it too; it vectorises in numpy and
    costs the firmware one multiply-add per word (firmware/tllm_weights.c)."""
    w = np.frombuffer(payload, "<u4")
    m = np.arange(len(w), dtype=np.uint32) * np.uint32(0x9E3779B1)  # uint32 products wrap: mod 2^32
    m += np.uint32(1)
    m |= np.uint32(1)
    m *= w
    return int(np.sum(m, dtype=np.uint64) & np.uint64(0xFFFFFFFF))


# --- reading a blob back -------------------------------------------------------

def split_interleaved(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fusion.interleaved_rows's inverse: (gate, up) from rows (g 2t, g 2t+1, u 2t, u 2t+1)."""
    half = rows.shape[0] // 2
    gate, up = np.empty((half,) + rows.shape[1:], rows.dtype), np.empty((half,) + rows.shape[1:], rows.dtype)
    for dst, offset in ((gate, 0), (up, 2)):
        for j in (0, 1):
            dst[j::2] = rows[offset + j::4]
    return gate, up


def read_blob(data: bytes, entries: Sequence[BlobEntry], config: ModelConfig, group_size: int, kv_bits,
              kernels: str) -> QuantizedGraph:
    """build_blob's inverse for the group-wise schemes: the QuantizedGraph whose
    blob `data` is (entries: its table, as the manifest records it), so the
    reference of exactly what a firmware runs can be rebuilt from its tree."""
    shapes = expected_weight_shapes(config)
    q4: dict[str, Q4Tensor] = {}
    gg: dict[str, GGUFMatrix] = {}
    vectors: dict[str, np.ndarray] = {}
    centers: dict[str, np.ndarray] = {}
    for e in entries:
        raw = data[e.offset:e.offset + e.nbytes]
        fused = e.name.endswith(FUSED_SUFFIX)
        gate = e.name[:-len(FUSED_SUFFIX)] if fused else e.name
        rows, cols = shapes[gate] if gate in shapes and len(shapes[gate]) == 2 else (0, 0)
        if fused:
            rows *= 2
        if e.kind == "q4x4":
            t = unpack_q4x4(raw, rows, cols, group_size, e.name)
            parts = {gate: t} if not fused else _split_q4(t, gate)
            q4.update(parts)
        elif e.kind == "q4.packed":
            scales = next(x for x in entries if x.name == e.name and x.kind == "q4.scales")
            s = np.frombuffer(data[scales.offset:scales.offset + scales.nbytes], "<f4").reshape(rows, -1)
            q4[e.name] = Q4Tensor(e.name, unpack_q4(raw, rows, cols), s.astype(np.float32), group_size)
        elif e.kind.startswith(("gguf.", "ggufx4.")):
            qtype = e.kind.split(".")[1].upper()
            m = unpack_gguf_tiled(e.name, qtype, raw, rows, cols) if e.kind.startswith("ggufx4.") else \
                unpack_gguf(e.name, qtype, raw, rows, cols)
            if fused:
                g_rows, u_rows = split_interleaved(m.data)
                gg[gate] = GGUFMatrix(gate, qtype, g_rows.copy(), cols)
                up = gate.replace("w_gate", "w_up")
                gg[up] = GGUFMatrix(up, qtype, u_rows.copy(), cols)
            else:
                gg[e.name] = m
        elif e.kind == "f32" and e.name in shapes:
            vectors[e.name] = np.frombuffer(raw, "<f4").astype(np.float32)
        elif e.kind == "f32" and parse_center_name(e.name) is not None:
            centers[e.name] = np.frombuffer(raw, "<f4").astype(np.float32)
        elif e.kind not in ("q4.scales", "f32", "u32", "u8"):
            raise ValueError(f"blob entry {e.name} of kind {e.kind}: read_blob reads the group-wise schemes only")
    weights = {n: (q4[n].dequantized() if n in q4 else gg[n].dequantized() if n in gg else vectors[n])
               for n in shapes}
    graph = build_decoder_graph(config, weights)
    method = "gguf" if gg else "rtn"
    return QuantizedGraph(graph=graph, q4=q4, vectors=vectors, group_size=group_size, kv_bits=kv_bits,
                          method=method, kernels=kernels, gguf=gg,
                          kv_centers=centers_from_blob(centers, config.n_layers))


def _split_q4(t: Q4Tensor, gate: str) -> dict[str, Q4Tensor]:
    up = gate.replace("w_gate", "w_up")
    gq, uq = split_interleaved(t.q)
    gs, us = split_interleaved(t.scales)
    return {gate: Q4Tensor(gate, gq, gs, t.group_size), up: Q4Tensor(up, uq, us, t.group_size)}
