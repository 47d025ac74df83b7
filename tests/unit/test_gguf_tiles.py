"""llama.cpp's blocks in 4-row tiles (quant/formats.py "q40x4" / "q41x4" /
"q80x4"): the packer against the layout's prose, the round trip, the sizes
(Python and the C header), the padded last tile, and Q4_1's min term.  The
kernels are checked against their twins in the kernel registry
(entries_gguf_m7.py, host and Cortex-M7)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.quant.formats import (GGUF_BLOCK, GGUF_BLOCK_BYTES, GGUF_TILE, GGUF_TILE_BLOCK_BYTES, GGUF_TILED,
                                       GGUFMatrix, dequantize_gguf, dequantize_gguf_tiled, gguf_row_bytes,
                                       gguf_tile_bytes, gguf_tiled_bytes_of, pack_gguf_tiled, unpack_gguf_tiled)
from tinyllm_gen.reference import exact
from tinyllm_gen.resources import firmware_dir
from tinyllm_gen.timing import KERNEL_RATES

QTYPES = tuple(GGUF_TILED)


def random_matrix(qtype: str, rows: int, cols: int, seed: int) -> GGUFMatrix:
    """Every byte random: nibbles, int8, and fp16 fields of any bit pattern (NaNs and infinities too)."""
    data = np.random.default_rng(seed).integers(0, 256, (rows, gguf_row_bytes(qtype, cols)), dtype=np.uint8)
    return GGUFMatrix("w", qtype, data, cols)


def element_from_prose(data: bytes, qtype: str, cols: int, r: int, i: int) -> int:
    """q of row r, input i, read back by the layout's own words (not by the unpacker)."""
    t, s, b, k, e = r // 4, r % 4, i // 32, (i % 32) // 8, i % 8
    at = (t * (cols // 32) + b) * GGUF_TILE_BLOCK_BYTES[qtype]
    if qtype == "Q8_0":
        byte = data[at + 32 * k + 8 * s + [0, 2, 1, 3, 4, 6, 5, 7].index(e)]
        return byte - 256 if byte > 127 else byte
    word = int.from_bytes(data[at + 16 * k + 4 * s: at + 16 * k + 4 * s + 4], "little")
    j, lane = e // 2, e % 2
    return (word >> (4 * j + 16 * lane)) & 0xF


def scales_from_prose(data: bytes, qtype: str, cols: int, r: int, b: int) -> tuple[int, int | None]:
    """fp16 bits of (d, m) of row r, block b, read from the tile-block's scale area."""
    t, s = r // 4, r % 4
    at = (t * (cols // 32) + b) * GGUF_TILE_BLOCK_BYTES[qtype]
    h = lambda o: int.from_bytes(data[o: o + 2], "little")  # noqa: E731
    if qtype == "Q4_1":
        return h(at + 64 + 4 * s), h(at + 66 + 4 * s)
    return h(at + (128 if qtype == "Q8_0" else 64) + 2 * s), None


@pytest.mark.parametrize("qtype", QTYPES)
def test_every_element_and_scale_sits_where_the_layout_says(qtype):
    rows, cols = 7, 96  # a padded last tile, three blocks
    t = random_matrix(qtype, rows, cols, 1)
    data = pack_gguf_tiled(t)
    _, _, q = t.fields()
    raw = t.data.reshape(rows, cols // 32, -1)
    for r in range(rows):
        assert [element_from_prose(data, qtype, cols, r, i) for i in range(cols)] == list(q[r].astype(int))
        for b in range(cols // 32):
            d, m = scales_from_prose(data, qtype, cols, r, b)
            assert d == int.from_bytes(raw[r, b, 0:2].tobytes(), "little")
            if qtype == "Q4_1":
                assert m == int.from_bytes(raw[r, b, 2:4].tobytes(), "little")


@settings(max_examples=60, deadline=None)
@given(qtype=st.sampled_from(QTYPES), rows=st.integers(1, 21), blocks=st.integers(1, 8), seed=st.integers(0, 2**31))
def test_round_trip_and_sizes(qtype, rows, blocks, seed):
    cols = blocks * GGUF_BLOCK
    t = random_matrix(qtype, rows, cols, seed)
    data = pack_gguf_tiled(t)
    tiles = -(-rows // GGUF_TILE)
    assert len(data) == gguf_tiled_bytes_of(qtype, rows, cols) == tiles * gguf_tile_bytes(qtype, cols)
    assert gguf_tile_bytes(qtype, cols) == GGUF_TILE * gguf_row_bytes(qtype, cols)  # a tile is 4 file rows' bytes
    if rows % GGUF_TILE == 0:
        assert len(data) == t.data.size  # whole tiles: the file's size exactly
    back = unpack_gguf_tiled("w", qtype, data, rows, cols)
    assert back.qtype == qtype and np.array_equal(back.data, t.data)
    assert pack_gguf_tiled(back) == data
    # the last tile is its rows and then rows of zero bytes (q = 0, d = m = +0.0)
    last = data[(tiles - 1) * gguf_tile_bytes(qtype, cols):]
    padded = np.pad(t.data[(tiles - 1) * GGUF_TILE:], ((0, tiles * GGUF_TILE - rows), (0, 0)))
    assert last == pack_gguf_tiled(GGUFMatrix("w", qtype, padded, cols))


@pytest.mark.parametrize("qtype", QTYPES)
def test_dequantization_equals_the_files(qtype):
    t = random_matrix(qtype, 9, 64, 3)
    with np.errstate(invalid="ignore", over="ignore"):
        ours = dequantize_gguf_tiled(qtype, pack_gguf_tiled(t), 9, 64)
        theirs = dequantize_gguf(qtype, t.data, 64)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_size_and_padding_checks():
    t = random_matrix("Q4_1", 5, 64, 4)
    data = pack_gguf_tiled(t)
    with pytest.raises(ValueError, match="319 B is not the 320 B"):
        unpack_gguf_tiled("w", "Q4_1", data[:-1], 5, 64)
    bad = bytearray(data)
    bad[-1] ^= 0x01  # a byte of the last tile's padding rows (row 7's (d, m) of the last block)
    with pytest.raises(ValueError, match="padding rows"):
        unpack_gguf_tiled("w", "Q4_1", bytes(bad), 5, 64)
    with pytest.raises(ValueError, match="does not exist"):
        unpack_gguf_tiled("w", "Q4_1", data, 5, 60)
    with pytest.raises(ValueError, match="does not exist"):
        unpack_gguf_tiled("w", "Q5_0", data, 5, 64)


def test_the_c_header_states_the_same_sizes():
    text = (firmware_dir() / "tllm_kernels_gguf_m7.h").read_text()
    defined = dict(re.findall(r"#define (TLLM_\w+) (\d+)", text))
    assert int(defined["TLLM_GGUF_TILE"]) == GGUF_TILE
    for qtype, layout in GGUF_TILED.items():
        assert int(defined[f"TLLM_{layout.upper()}_TILE_BLOCK"]) == GGUF_TILE_BLOCK_BYTES[qtype] == \
            GGUF_TILE * GGUF_BLOCK_BYTES[qtype]
        for fn in ("tile_bytes", "matvec", "matmat", "argmax", "embed"):
            name = f"tllm_{layout}_{fn}" if fn == "tile_bytes" else f"tllm_{fn}_{layout}"
            assert re.search(rf"\b{name}\(", text), f"{name} is not declared"


def test_q4_1_min_term_is_m_times_the_block_sum():
    """A Q4_1 matrix whose quants are all 0 and whose d are 0: every output is
    the sum over blocks of (m * sx) * xsum, the activation block's sum shared by
    every row (in the kept build's order: 0 + ((d*sx)*isum + (m*sx)*xsum))."""
    rows, cols, rng = 6, 96, np.random.default_rng(5)
    m = (rng.standard_normal((rows, cols // 32)) * 0.1).astype(np.float16)
    raw = np.zeros((rows, cols // 32, 20), np.uint8)
    raw[:, :, 2:4] = m.view(np.uint8).reshape(rows, cols // 32, 2)
    t = unpack_gguf_tiled("w", "Q4_1", pack_gguf_tiled(GGUFMatrix("w", "Q4_1", raw.reshape(rows, -1), cols)),
                          rows, cols)
    xq, xs = exact.quantize_groups_i8(rng.standard_normal(cols).astype(np.float32), 32)
    d, mm, q = t.fields()
    got = exact.matvec_gguf("Q4_1", d, mm, q, xq, xs)
    want = np.zeros(rows, np.float32)
    for b in range(cols // 32):
        xsum = np.float32(xq[32 * b: 32 * b + 32].astype(np.int32).sum())
        t0 = np.zeros(rows, np.float32)  # (d * sx) * (float)isum with d = +0.0 and isum = 0
        want = want + (t0 + (m[:, b].astype(np.float32) * xs[b]) * xsum)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_timing_table_has_every_tiled_layout():
    for layout in GGUF_TILED.values():
        assert set(KERNEL_RATES[layout]) == {1, 2, 3, 4}
