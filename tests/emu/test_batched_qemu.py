"""Emulator tier: the Cortex-M7 assembly of the batched prefill kernel in
QEMU, against the numpy twin's bits. bench/micro.c fills its operands from a
xorshift generator (replayed here), runs tllm_matmat_q4x4 at P = 1..4, exits
non-zero unless each token's output equals tllm_matvec_q4x4 bit for bit and
the P = 4 output equals the portable twin, and prints an FNV-1a hash of every
P x rows output, which must equal the hash of exact.matmat_q4x4's bits.
Shapes with partial 4-row tiles, short last groups, a single row, every
group size."""
import shutil
import struct

import numpy as np
import pytest

from tinyllm_gen.reference import exact
from tinyllm_gen.bench.bench import run_micro

pytestmark = pytest.mark.emu

SHAPES = [(13, 172), (1, 40), (7, 256), (64, 64), (6, 20), (5, 3), (2, 8), (3, 200)]
SHIFTS = (0, 16, 4, 20, 8, 24, 12, 28)  # input k+i of a q4x4 word (quant/formats.py)
F32 = np.float32


@pytest.fixture(autouse=True)
def tools():
    for t in ("arm-none-eabi-gcc", "qemu-system-arm", "gcc"):
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


class XorShift:  # micro.c's next()
    def __init__(self):
        self.s = 0x12345678

    def __call__(self) -> int:
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.s = s
        return s


def fill(rng, rows, cols, group):
    """micro.c's fill(): the token activations and the q4x4 matrix as q / scales."""
    for _ in range(rows * ((cols + 1) // 2) + rows * cols + cols):  # q4 packed, f32 weights, x
        rng()
    xt = np.array([[F32((rng() % 2001) - 1000) * F32(0.001) for _ in range(cols)] for _ in range(4)], F32)
    tiles, ng = -(-rows // 4), -(-cols // group)
    q = np.zeros((4 * tiles, ng * group + 8), np.int8)
    scales = np.zeros((4 * tiles, ng), F32)
    for t in range(tiles):
        for g, g0 in enumerate(range(0, cols, group)):
            nb = (min(group, cols - g0) + 7) // 8
            for b in range(4 * nb):
                word, slot, k = rng(), b % 4, g0 + 8 * (b // 4)
                for i, sh in enumerate(SHIFTS):
                    q[4 * t + slot, k + i] = ((word >> sh) & 0xF) - 8
            for s in range(4):
                scales[4 * t + s, g] = F32(0.01) + F32(0.001) * F32(s)
    return xt, q[:rows, :cols], scales[:rows]


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


@pytest.mark.parametrize("group", [32, 64, 128])
def test_batched_assembly_bits_equal_numpy(group):
    snaps = run_micro(SHAPES, group)  # raises unless the asm equals the matvec and its twin
    got = {}
    for line in snaps.console.splitlines():
        if line.startswith("@BENCH out "):
            s, P, h = line.split()[2:]
            got[(int(s), int(P))] = int(h, 16)
    rng = XorShift()
    for s, (rows, cols) in enumerate(SHAPES):
        xt, q, scales = fill(rng, rows, cols, group)
        quant = [exact.quantize_groups_i8(v, group) for v in xt]
        for P in range(1, 5):
            want = exact.matmat_q4x4(q, scales, group, np.stack([a for a, _ in quant[:P]]),
                                     np.stack([b for _, b in quant[:P]]))
            assert got[(s, P)] == fnv1a(struct.pack(f"<{P * rows}f", *want.reshape(-1))), (rows, cols, P)
