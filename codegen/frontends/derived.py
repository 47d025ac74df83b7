"""Tensors a model file carries that the compiler derives itself.

RoPE is computed from the config (rope_theta, head_dim: reference.executor.
rope_tables, whose tables the firmware reads from flash), so a file's own
RoPE tensors are never read as weights.  They still say what the model was
trained or exported with, so each frontend checks them against what the
compiler computes, or, where the format's own runtime ignores them too,
names them as ignored (`ImportedModel.ignored`, shown by `inspect`):

* Hugging Face `*rotary_emb.inv_freq` buffers and the ONNX initializer an
  export keeps of them (which the ONNX graph computes its cos/sin from):
  :func:`check_inv_freq`, within the precision of the stored dtype;
* GGUF `rope_freqs.weight` (and Phi-3's `rope_factors_*`), llama.cpp's RoPE
  frequency factors: :func:`check_freq_factors`, plain RoPE only (all 1);
* llama2.c v0's freq_cis tables, which llama2.c's run.c skips:
  :func:`rope_table_note`, listed as ignored with whether they agree."""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..ir import ModelConfig

# |stored - exact| <= RTOL * |exact| + ATOL, by the dtype the value was stored in:
# a float32 buffer is computed in float32 (transformers: theta ** (arange / d) in
# float32), a half-precision checkpoint rounds it further.
_INV_FREQ_TOL = {"F64": (1e-5, 0.0), "F32": (1e-5, 0.0), "F16": (2e-3, 6e-8), "BF16": (8e-3, 0.0)}


def rope_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """The inverse frequencies the compiler's RoPE uses (float64), as
    rope_tables computes them: 1 / theta^(2i / head_dim), i < head_dim / 2."""
    return 1.0 / (float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))


def _num(v) -> str:
    v = float(v)
    return "NaN" if v != v else f"{v:.6g}"


def _first_off(arr: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> int | None:
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(arr.astype(np.float64) - want) <= rtol * np.abs(want) + atol
    bad = np.flatnonzero(~ok)  # NaN compares false: never ok
    return int(bad[0]) if bad.size else None


def check_inv_freq(where: object, name: str, arr: np.ndarray, c: ModelConfig, dtype: str = "F32",
                   fix: str = "set rope_theta in config.json to the one the model was trained with") -> None:
    """A stored RoPE inv_freq must be the one the compiler computes from the
    config, within the stored dtype's precision; else one line naming it."""
    a = np.asarray(arr)
    want = rope_inv_freq(c.head_dim, c.rope_theta)
    what = f"tensor {name} (RoPE inverse frequencies)"
    if a.size != want.size:
        raise UserError(f"{where}: {what} has shape {tuple(a.shape)}, but head_dim {c.head_dim} gives "
                        f"{want.size} frequencies; {fix}")
    a = a.reshape(-1)
    rtol, atol = _INV_FREQ_TOL.get(dtype, _INV_FREQ_TOL["BF16"])
    i = _first_off(a, want, rtol, atol)
    if i is not None:
        raise UserError(f"{where}: {what} does not match the RoPE the compiler computes from rope_theta "
                        f"{c.rope_theta:g} and head_dim {c.head_dim}: value {i} is {_num(a[i])}, expected "
                        f"{want[i]:.6g}; {fix}")


def check_freq_factors(where: object, name: str, arr: np.ndarray, c: ModelConfig) -> None:
    """llama.cpp's RoPE frequency factors (each frequency divided by its
    factor): only all-ones, plain RoPE, is what the compiler computes."""
    a = np.asarray(arr).reshape(-1)
    if a.size != c.head_dim // 2:
        raise UserError(f"{where}: tensor {name} (RoPE frequency factors) has {a.size} values, but head "
                        f"dimension {c.head_dim} gives {c.head_dim // 2}; the file is corrupt")
    i = _first_off(a, np.ones(a.size), 1e-6, 0.0)
    if i is not None:
        raise UserError(f"{where}: tensor {name} holds RoPE frequency factors other than 1 (factor {i} is "
                        f"{_num(a[i])}: RoPE scaling, as Llama 3.1's); not supported, only plain RoPE "
                        "(use a model without RoPE scaling)")


def rope_table_note(names: str, cos: np.ndarray, sin: np.ndarray, c: ModelConfig) -> str:
    """An `ignored` entry for stored RoPE cos/sin tables [positions, head_dim / 2],
    saying whether they agree with the compiler's RoPE (float32 tables
    computed by torch drift by about 1e-7 rad per position)."""
    pos = np.arange(cos.shape[0], dtype=np.float64)[:, None]
    angles = pos * rope_inv_freq(c.head_dim, c.rope_theta)[None, :]
    tol = 1e-5 + 3e-7 * pos
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.maximum(np.abs(cos.astype(np.float64) - np.cos(angles)),
                          np.abs(sin.astype(np.float64) - np.sin(angles)))
        agree = bool(np.all(diff <= tol))  # NaN: False
    head = f"{names}: RoPE tables, not read (the compiler computes RoPE from rope_theta {c.rope_theta:g})"
    if agree:
        return head + "; they agree with it"
    worst = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
    return head + (f"; they do NOT agree with it (largest difference {worst:.3g}"
                   f"{', NaN present' if np.isnan(diff).any() else ''})")
