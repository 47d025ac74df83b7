"""Second-order INT4 rounding (GPTQ-style, `--weight-quant gptq`): Graph matrix
+ its input's second moment -> Q4Tensor.

Round-to-nearest and clipping (quant/clip.py) treat every weight on its own.
A linear's output error on inputs x is (W - Q) x, so what matters is
tr((W - Q) H (W - Q)^T) with H = E[x x^T] measured on calibration text:
correlated input channels let the rounding error of one column be cancelled
by adjusting the columns not yet rounded.  Following Frantar et al. (GPTQ,
2022), the columns are rounded left to right; after rounding column j its
error e_j (scaled by the Cholesky factor of H^-1) is spread over the columns
to its right, which is the exact least-squares correction given those columns
are still free.  Our grid decides the details:

* groups of `group_size` consecutive columns share one float32 scale per
  row; a group's scales are chosen (clip search weighted by diag H, as in
  quant/clip.py) when the sweep reaches the group's first column, from the
  weights as the corrections of the earlier groups left them;
* q = round-half-away(w / s) clamped to [-7, 7], s the stored float32 scale,
  so value = q * scale exactly as every other Q4Tensor;
* H is damped by 1% of its mean diagonal (a column no token exercises gets
  weight 1), which keeps the Cholesky factor well defined on short
  calibration text;
* the inputs come from the float model (calibrated.linear_inputs), not from
  the partly quantized one: one calibration pass for every matrix.

With a diagonal H nothing is spread: the result is clip's scales with every
weight rounded to the nearest point of its grid, never worse than clip
(tests/unit/test_gptq.py checks that, and that on correlated inputs the
H-weighted output error is well below clip's and RTN's).  The output is an ordinary
Q4Tensor: lowering, firmware and reference are unchanged.
"""
from __future__ import annotations

import numpy as np

from .clip import quantize_q4_clip
from .formats import Q4_MAX, Q4Tensor, n_groups

DAMP = 0.01
BLOCK_COLUMNS = 128  # lazy-update block: corrections inside it per column, to the right of it as one matmul


def damped(h: np.ndarray) -> np.ndarray:
    """H + DAMP * mean(diag H) * I, with unexercised columns given weight 1."""
    h = np.array(h, np.float64, copy=True)
    d = np.diag(h).copy()
    dead = d <= 0
    h[dead, :] = 0.0
    h[:, dead] = 0.0
    d[dead] = 1.0
    h[np.diag_indices_from(h)] = d
    h[np.diag_indices_from(h)] += DAMP * float(d.mean())
    return h


def inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """U upper-triangular with H^-1 = U^T U (row j of U spreads column j's error)."""
    lower = np.linalg.cholesky(h)
    eye = np.eye(h.shape[0])
    h_inv = np.linalg.solve(lower.T, np.linalg.solve(lower, eye))
    return np.linalg.cholesky((h_inv + h_inv.T) / 2).T


def _round(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s > 0, np.sign(w) * np.floor(np.abs(w) / np.where(s > 0, s, 1.0) + 0.5), 0.0)
    return np.clip(q, -Q4_MAX, Q4_MAX)


def quantize_q4_gptq(name: str, w: np.ndarray, group_size: int, h: np.ndarray) -> Q4Tensor:
    """`h`: [cols, cols] E[x x^T] of the matrix's input on calibration text."""
    rows, cols = w.shape
    if h.shape != (cols, cols):
        raise ValueError(f"{name}: second moment is {h.shape}, expected ({cols}, {cols})")
    hd = damped(h)
    u = inverse_cholesky_upper(hd)
    weight_of_column = np.diag(hd)
    work = np.array(w, np.float64, copy=True)
    q = np.zeros((rows, cols), np.int8)
    scales = np.zeros((rows, n_groups(cols, group_size)), np.float32)
    block = max(BLOCK_COLUMNS // group_size, 1) * group_size
    for b0 in range(0, cols, block):
        b1 = min(b0 + block, cols)
        err_block = np.zeros((rows, b1 - b0))
        for j in range(b0, b1):
            if j % group_size == 0:
                g1 = min(j + group_size, cols)
                chosen = quantize_q4_clip(name, work[:, j:g1], g1 - j, weight_of_column[j:g1])
                scales[:, j // group_size] = chosen.scales[:, 0]
            s = scales[:, j // group_size].astype(np.float64)
            qj = _round(work[:, j], s)
            q[:, j] = qj.astype(np.int8)
            e = (work[:, j] - qj * s) / u[j, j]
            work[:, j + 1:b1] -= np.outer(e, u[j, j + 1:b1])
            err_block[:, j - b0] = e
        work[:, b1:] -= err_block @ u[b0:b1, b1:]
    return Q4Tensor(name=name, q=np.ascontiguousarray(q), scales=scales, group_size=group_size)


def output_error(w: np.ndarray, t: Q4Tensor, h: np.ndarray) -> float:
    """tr((W - Q) H (W - Q)^T): the expected squared output error on inputs with E[x x^T] = H."""
    d = np.asarray(w, np.float64) - t.dequantized().astype(np.float64)
    return float(np.einsum("ij,jk,ik->", d, np.asarray(h, np.float64), d))
