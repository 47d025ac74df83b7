"""`--classifier-quant q4`: a kept GGUF's classifier re-rounded to 4 bits.

SmolLM2's tied embedding/classifier is Q8_0: 30.1 MB of the 96.4 MB a
decoded token reads from flash (31%).  This re-rounds that one matrix into
llama.cpp's Q4_0 blocks (value = d * (q - 8), fp16 d, 4.5 bits per weight:
15.9 MB), so every kernel, the tiled layout and the weight stream stay the
kept build's.  A tied embedding's rows come from the same bytes (one table
serves both, as in the file).

The scales are calibrated: each 32-weight block's scale is the clip
search's (quant/clip.py: clipping ratios on a grid, the scale refitted by
least squares, the smallest error kept), weighted by the classifier
input's second moment E[x_j^2] on calibration text (the float model's
final-norm output), so the columns that see large activations are kept
closest; then rounded to fp16 and the integers re-rounded to it over
Q4_0's full range [-8, 7].  Lossy by construction: `eval --classifier-quant
q4` measures what it costs; the default (`keep`) stays lossless."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..errors import UserError
from ..ir import output_weight_name
from .calibrated import linear_inputs
from .clip import quantize_q4_clip
from .formats import GGUF_BLOCK, GGUF_BLOCK_BYTES, GGUFMatrix, QuantizedGraph

CLASSIFIER_QUANTS = ("keep", "q4")


def q4_0_blocks(name: str, w: np.ndarray, h: np.ndarray | None) -> GGUFMatrix:
    """w [rows, cols] (cols a multiple of 32) as Q4_0 blocks with clip-searched scales weighted by h."""
    rows, cols = w.shape
    t = quantize_q4_clip(name, w, GGUF_BLOCK, h)
    d = t.scales.astype(np.float16)  # [rows, blocks]: the stored precision
    d32 = d.astype(np.float32)
    blocks = w.reshape(rows, cols // GGUF_BLOCK, GGUF_BLOCK).astype(np.float32)
    safe = np.where(d32 > 0, d32, np.float32(1))[:, :, None]
    q = np.where(d32[:, :, None] > 0, np.clip(np.floor(blocks / safe + np.float32(0.5)), -8, 7), 0).astype(np.int16)
    u = (q + 8).astype(np.uint8)  # 0..15
    nib = (u[:, :, :16] | (u[:, :, 16:] << 4)).astype(np.uint8)  # byte j: element j low, j + 16 high
    raw = np.concatenate([d.view(np.uint8).reshape(rows, -1, 2), nib], axis=2)
    assert raw.shape[2] == GGUF_BLOCK_BYTES["Q4_0"]
    return GGUFMatrix(name, "Q4_0", raw.reshape(rows, -1), cols)


def requantize_classifier(qg: QuantizedGraph, docs: Sequence[Sequence[int]] | None) -> QuantizedGraph:
    """The kept build with its classifier's blocks re-rounded to Q4_0 (docs: calibration token lists)."""
    name = output_weight_name(qg.config)
    kept = qg.gguf.get(name)
    if kept is None:
        raise UserError("--classifier-quant q4 re-rounds a kept GGUF classifier; this model's classifier is not "
                        "kept llama.cpp blocks: drop the option")
    if kept.qtype == "Q4_0":
        return qg  # already 4 bits in this format
    classifier_input = next(n.inputs[0] for n in qg.graph.nodes if n.op == "linear" and n.inputs[1] == name)
    h = None
    if docs:
        x = linear_inputs(qg.graph, docs)[classifier_input]
        h = (x * x).mean(axis=0)
    w = np.asarray(qg.graph.weights[name], np.float32)  # the file's values (the frontend dequantized them)
    return replace(qg, gguf={**qg.gguf, name: q4_0_blocks(name, w, h)})
