"""Random-weight llama2.c checkpoints of a given shape, for planner tests
(planning reads only the shape, so the weights are noise)."""
import struct

import numpy as np


def write_llama2c_v0(path, dim, hidden, layers, heads, kv_heads, vocab, seq):
    """A tied v0 checkpoint with random float32 weights of the right count."""
    hd = dim // heads
    n = (vocab * dim + layers * (2 * dim + dim * dim * 2 + 2 * dim * kv_heads * hd + 3 * dim * hidden)
         + dim + seq * hd)
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq))
        f.write((rng.standard_normal(n, dtype=np.float32) * 0.02).tobytes())
    return path
