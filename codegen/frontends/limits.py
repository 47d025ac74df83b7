"""What every frontend checks at its edge, before anything is allocated in
proportion to a number read from a file: each hyper-parameter in range, the
model small enough to be a microcontroller model at all, every weight
finite, and the tokenizer reconciled with the vocabulary.

The ranges are far above anything an STM32H750 runs (its QUADSPI flash holds
at most 128 MB of weights), so they only refuse corrupt or absurd inputs,
by name and in one line."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UserError

# Upper bounds of the config fields (inclusive).
LIMITS = {
    "dim": 1 << 16,
    "hidden_dim": 1 << 18,
    "n_layers": 1 << 10,
    "n_heads": 1 << 10,
    "n_kv_heads": 1 << 10,
    "head_dim": 1 << 12,
    "vocab_size": 1 << 20,
    "max_seq": 1 << 20,
}
# Parameters the config may imply: 2^31 fp32 weights are 8 GiB to hold while
# compiling, 60x what the largest supported board's flash holds at INT4.
MAX_PARAMS = 1 << 31
# Files read whole into memory (tokenizers, configs): far above real ones.
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024


def check_range(where: object, key: str, value: int, limit_key: str | None = None) -> int:
    """`value` must be a positive int not above LIMITS[limit_key or key]."""
    limit = LIMITS[limit_key or key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    if value > limit:
        raise UserError(f"{where}: {key} {value:,} is beyond what tinyllm-gen accepts ({limit:,}); "
                        "the file is corrupt or the model is far too large for a microcontroller")
    return value


def check_model_size(where: object, n_params: int) -> None:
    if n_params > MAX_PARAMS:
        raise UserError(f"{where}: the configuration implies {n_params:,} parameters, more than tinyllm-gen "
                        f"accepts ({MAX_PARAMS:,}); the file is corrupt or the model is far too large "
                        "for a microcontroller")


def check_finite(where: object, name: str, arr: np.ndarray) -> None:
    """Refuse a tensor holding NaN or infinity, naming it."""
    a = np.asarray(arr)
    if a.dtype.kind != "f":
        return
    finite = np.isfinite(a)
    if finite.all():
        return
    bad = int(a.size - np.count_nonzero(finite))
    first = np.unravel_index(int(np.argmin(finite.reshape(-1))), a.shape) if a.ndim else ()
    value = a[first] if a.ndim else a
    raise UserError(f"{where}: tensor {name} holds {bad:,} non-finite value{'s' if bad > 1 else ''} "
                    f"(first: {float(value)} at index {tuple(int(i) for i in first)}); the checkpoint is "
                    "corrupt or diverged in training")


def check_positive_number(where: object, key: str, value: object) -> float:
    """A positive number that survives float32 (the firmware's type): 1e308
    would become infinity there, 1e-300 zero."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or not value > 0:
        raise UserError(f"{where}: {key} must be a positive finite number, got {value!r}")
    f32 = np.finfo(np.float32)
    if not float(f32.tiny) <= value <= float(f32.max):
        raise UserError(f"{where}: {key} {value!r} is outside float32's normal range "
                        f"({float(f32.tiny):.3g} to {float(f32.max):.3g}); fix config.json")
    return float(value)


def check_tokenizer_vocab(where: object, tokenizer_size: int, vocab_size: int) -> None:
    """A tokenizer may have fewer tokens than the model's (padded)
    embedding, never more: its ids would index past the embedding."""
    if tokenizer_size > vocab_size:
        raise UserError(f"{where}: the tokenizer has {tokenizer_size:,} tokens but the model's vocab_size is "
                        f"{vocab_size:,}; use the tokenizer the model was trained with")
