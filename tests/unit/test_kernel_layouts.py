"""The layout encoders the kernel registry compares with
(tests/kernel_registry/layouts.py): each against the layout's statement in
quant/formats.py, and their inverses."""
import numpy as np
import pytest

from kernel_registry.layouts import (pack_nibbles, parse_x16, parse_x16b, split_gate_up_tiles, unpack_nibbles, x16_of,
                                     x16b_of, x16b_write_token)
from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import pack_q4, x16_batch_bytes, x16_stream_bytes


def test_x16_stream_size_formula():
    assert x16_stream_bytes(64, 32) == 2 * (32 * 2 + 8)
    assert x16_stream_bytes(172, 64) == (64 * 2 + 8) * 2 + (48 * 2 + 8)  # 44 -> padded to 48


def test_x16_stream_bytes_by_hand():
    x = np.float32([1.0, -2.0, 0.5] + [0.0] * 7)  # n 10, group 8: groups of 8 and 2
    s = x16_of(x, 8)
    assert len(s) == x16_stream_bytes(10, 8) == (16 + 8) * 2
    q = np.frombuffer(s[:16], "<i2")
    assert q.tolist() == [64, -127, 32, 0, 0, 0, 0, 0]  # round(x * 127 / 2), ties away from zero
    assert np.frombuffer(s[16:20], "<i4")[0] == 8 * (64 - 127 + 32)
    assert np.frombuffer(s[20:24], "<f4")[0] == np.float32(2.0) / np.float32(127.0)
    assert s[24:] == bytes(24)  # an all-zero group: zeros, sum 0, scale 0


@pytest.mark.parametrize("n,group,P", [(64, 32, 1), (37, 32, 2), (101, 64, 3), (172, 64, 4), (96, 128, 5)])
def test_x16b_round_trip_and_owners(n, group, P):
    rng = np.random.default_rng(n + P)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(P)]
    streams = [parse_x16(x16_of(x, group), n, group) for x in xs]
    xb, owner = x16b_of(streams)
    assert len(xb) == x16_batch_bytes(n, group, P) and len(owner) == len(xb)
    for p, (q, s) in enumerate(parse_x16b(xb, n, group, P)):
        q_ref, s_ref = exact.quantize_groups_i8(xs[p], group)
        assert q.tolist() == q_ref.tolist() and s.view(np.uint32).tolist() == s_ref.view(np.uint32).tolist()
        assert (owner == p).sum() == x16_stream_bytes(n, group)
    junk = rng.integers(0, 256, len(xb), dtype=np.uint8)
    for p in range(P):  # token by token over junk gives the whole stream
        junk = x16b_write_token(junk, x16_of(xs[p], group), n, group, P, p)
    assert junk.tobytes() == xb


def test_x16b_group_starts_with_negated_sums():
    xs = [np.float32([1.0, 1.0]), np.float32([2.0, -1.0])]
    xb, _ = x16b_of([parse_x16(x16_of(x, 32), 2, 32) for x in xs])
    assert np.frombuffer(xb[:8], "<i4").tolist() == [-8 * 254, -8 * (127 - 64)]  # -1 * 127/2 = -63.5 -> -64


def test_nibbles_low_first_and_continuous():
    q = np.int8([1, 2, 3, 4, -7])
    assert pack_nibbles(q).tobytes() == pack_q4(q[None, :]) == bytes([0x21, 0x43, 0x09])
    rng = np.random.default_rng(0)
    v = rng.integers(-8, 8, 33).astype(np.int8)
    assert unpack_nibbles(pack_nibbles(v), 33).tolist() == v.tolist()
    rows = rng.integers(-7, 8, (3, 5)).astype(np.int8)  # odd rows share a byte (CMSIS-NN s4)
    assert len(pack_nibbles(rows)) == 8 and unpack_nibbles(pack_nibbles(rows), 15).reshape(3, 5).tolist() == rows.tolist()


def test_gate_up_tiles():
    gate, up = split_gate_up_tiles(np.arange(8, dtype=np.float32))
    assert gate.tolist() == [0, 1, 4, 5] and up.tolist() == [2, 3, 6, 7]
