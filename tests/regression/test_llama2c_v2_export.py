"""Issue 12: llama2.c version-2 (Q8_0) checkpoints were misread.

llama2.c's export.py (version2_export) writes, after the fp32 norms, each
quantized tensor's int8 values immediately followed by that tensor's float32
group scales; runq.c (init_quantized_tensors) reads them the same way.  The
importer read all int8 values first, then all scales, so a real v2 file
loaded without error and generated garbage (token 0 forever).

Two tests:

* `test_v2_from_llama2c_export`: llama2.c's own model.py builds a random
  model and its export.py writes v1 and v2 files; our v2 import must be the
  Q8_0 round trip of our v1 import, exactly.  Needs a llama2.c checkout in
  $LLAMA2C_ROOT (CI has no network; nothing of llama2.c is committed) and is
  skipped otherwise.
* `test_v2_layout_interleaves_values_and_scales`: no checkout needed.  A file
  written with the byte layout verified against that exporter (values then
  scales, per tensor), with distinct scales per tensor, so reading the old
  way (all values, then all scales) cannot give the same weights.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tinyllm_gen.frontends.llama2c import load_llama2c

ROOT = os.environ.get("LLAMA2C_ROOT")

_EXPORT = textwrap.dedent("""
    import sys
    import torch
    sys.path.insert(0, sys.argv[1])
    from model import ModelArgs, Transformer
    from export import model_export

    torch.manual_seed(int(sys.argv[3]))
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, hidden_dim=96,
                     multiple_of=32, max_seq_len=32)
    m = Transformer(args).eval()
    if sys.argv[4] == "untied":
        m.output.weight = torch.nn.Parameter(torch.randn_like(m.output.weight) * 0.05)
    out = sys.argv[2]
    model_export(m, out + "/v1.bin", version=1)
    model_export(m, out + "/v2.bin", version=2)
""")


def _q80_roundtrip(w: np.ndarray, group: int) -> np.ndarray:
    """export.py's quantize_q80 then dequantization, in float32."""
    g = w.astype(np.float32).reshape(-1, group)
    scale = (np.abs(g).max(axis=1) / np.float32(127.0)).astype(np.float32)
    q = np.round(g / scale[:, None]).astype(np.int8)
    return (q.astype(np.float32) * scale[:, None]).reshape(w.shape)


@pytest.mark.skipif(not ROOT, reason="LLAMA2C_ROOT is not set: needs a checkout of karpathy/llama2.c "
                    "(its model.py and export.py write the checkpoints)")
@pytest.mark.parametrize("tied", ["tied", "untied"])
def test_v2_from_llama2c_export(tmp_path, tied):
    script = tmp_path / "export_both.py"
    script.write_text(_EXPORT)
    proc = subprocess.run([sys.executable, str(script), ROOT, str(tmp_path), "7", tied], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    v1 = load_llama2c(tmp_path / "v1.bin").graph
    v2 = load_llama2c(tmp_path / "v2.bin").graph
    assert v2.config == v1.config and v2.config.tied_embeddings == (tied == "tied")
    group = struct.unpack_from("<i", (tmp_path / "v2.bin").read_bytes(), 37)[0]
    assert group == 64
    for name, w in v1.weights.items():
        if w.ndim == 1:  # norms stay fp32 in v2
            np.testing.assert_array_equal(v2.weights[name], w, err_msg=name)
        else:  # a group is one row here (group 64 = dim), so our row un-permutation of wq/wk commutes
            np.testing.assert_array_equal(v2.weights[name], _q80_roundtrip(w, group), err_msg=name)


def test_v2_layout_interleaves_values_and_scales(tmp_path):
    dim, hidden, layers, heads, kv, vocab, seq, group = 16, 32, 1, 2, 1, 32, 8, 16
    rng = np.random.default_rng(3)
    shapes = [(vocab, dim), (dim, dim), (kv * dim // heads, dim), (kv * dim // heads, dim), (dim, dim),
              (hidden, dim), (dim, hidden), (hidden, dim)]  # tok, wq, wk, wv, wo, w1, w2, w3 (1 layer)
    header = struct.pack("<Ii7iBi", 0x616B3432, 2, dim, hidden, layers, heads, kv, vocab, seq, 1, group)
    body = np.ones((2 * layers + 1) * dim, "<f4").tobytes()
    expect = []
    for k, shape in enumerate(shapes):
        q = rng.integers(-127, 128, size=shape, dtype=np.int8)
        s = np.full(q.size // group, 0.01 * (k + 1), "<f4")  # a different scale per tensor
        body += q.tobytes() + s.tobytes()
        expect.append(q.astype(np.float32) * np.float32(0.01 * (k + 1)))
    path = tmp_path / "v2.bin"
    path.write_bytes(header + b"\0" * (256 - len(header)) + body)
    w = load_llama2c(path).graph.weights
    np.testing.assert_array_equal(w["tok_embeddings"], expect[0])
    np.testing.assert_array_equal(w["layers.0.wv"], expect[3])
    np.testing.assert_array_equal(w["layers.0.w_down"], expect[6])
    np.testing.assert_array_equal(w["layers.0.w_up"], expect[7])
