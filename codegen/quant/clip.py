"""Error-minimising INT4 group scales ("clip"): Graph matrix -> Q4Tensor.

Round-to-nearest sets each group's scale from its largest weight (max|w|/7),
which spends the 15 levels on one outlier.  Here every (row, group) tries a
grid of clipping ratios r (scale0 = r * max|w| / 7, q = round(w / scale0)),
then refits the scale to that q by weighted least squares
(s = sum h w q / sum h q^2), and keeps the candidate with the smallest
weighted squared error sum_j h_j (w_j - q_j s)^2.

`h` (one weight per input column) is the diagonal of the layer's input
second moment E[x_j^2] on calibration text, so columns that see large
activations are reproduced more carefully; h = 1 is plain MSE.  The result is
an ordinary Q4Tensor (same format, same kernels): nothing downstream changes.
"""
from __future__ import annotations

import numpy as np

from .formats import Q4_MAX, Q4Tensor, n_groups

CLIP_RATIOS = np.linspace(1.0, 0.55, 19)


def quantize_q4_clip(name: str, w: np.ndarray, group_size: int, h: np.ndarray | None = None) -> Q4Tensor:
    rows, cols = w.shape
    ng = n_groups(cols, group_size)
    pad = ng * group_size - cols
    wp = np.pad(w.astype(np.float64), ((0, 0), (0, pad))).reshape(rows, ng, group_size)
    hv = np.ones(cols) if h is None else np.maximum(np.asarray(h, np.float64), 1e-12)
    hp = np.pad(hv, (0, pad)).reshape(1, ng, group_size)  # padding columns weigh nothing
    amax = np.abs(wp).max(axis=2, keepdims=True)
    best_err = np.full((rows, ng), np.inf)
    best_q = np.zeros(wp.shape, np.int8)
    best_s = np.zeros((rows, ng), np.float32)
    for r in CLIP_RATIOS:
        s0 = np.where(amax > 0, r * amax / Q4_MAX, 1.0)
        q = np.clip(np.sign(wp) * np.floor(np.abs(wp) / s0 + 0.5), -Q4_MAX, Q4_MAX)
        num, den = (hp * wp * q).sum(axis=2), (hp * q * q).sum(axis=2)
        s = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0).astype(np.float32)  # stored precision
        err = (hp * (wp - q * s.astype(np.float64)[:, :, None]) ** 2).sum(axis=2)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s, best_s)
        best_q = np.where(better[:, :, None], q, best_q).astype(np.int8)
    # A refitted scale can come out negative only for q = 0 groups (den = 0 -> 0): keep it >= 0.
    neg = best_s < 0
    best_q = np.where(neg[:, :, None], -best_q, best_q).astype(np.int8)
    best_s = np.abs(best_s)
    q = best_q.reshape(rows, ng * group_size)[:, :cols]
    return Q4Tensor(name=name, q=np.ascontiguousarray(q), scales=best_s.astype(np.float32), group_size=group_size)
