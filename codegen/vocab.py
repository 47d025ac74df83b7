"""Where the vocabulary (the bytes the board prints for each token) lives.

The firmware prints text itself, so every token's bytes ship with it: a
byte string and vocab_size + 1 uint32 offsets.  For the bundled 512-token
model that is 3 KB of .rodata; for a 49,152-token real model it is about
530 KB, four times the STM32H750's 128 KiB internal flash.  So the table
goes into the internal (code) flash when it fits beside the runtime's code,
and otherwise into the weights blob in external flash (QSPI), read through
the same memory-mapped window as the weights.  A board whose weights are
linked into the image (the host) keeps it in .rodata, whatever its size."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .board import Board
from .errors import UserError
from .frontends.tokenizer import Tokenizer

# Code flash kept for the runtime, the generated step and the board code
# (measured: 23 KB for the bundled model on the QEMU board; larger models
# add only descriptors, so 64 KiB leaves room and never decides close calls).
CODE_RESERVE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Vocabulary:
    pieces: tuple[bytes, ...]  # token id -> the bytes the board prints

    @property
    def text(self) -> bytes:
        return b"".join(self.pieces)

    @property
    def offsets(self) -> np.ndarray:
        """vocab_size + 1 offsets into `text`: token i is text[off[i]:off[i+1]]."""
        return np.concatenate([[0], np.cumsum([len(p) for p in self.pieces])]).astype("<u4")

    @property
    def nbytes(self) -> int:
        return vocab_nbytes(len(self.pieces), len(self.text))

    @property
    def size(self) -> tuple[int, int]:
        """(tokens, text bytes): what the searches need (fit.search.FitRequest.vocab)."""
        return len(self.pieces), len(self.text)


def vocabulary_of(tokenizer: Tokenizer, vocab_size: int) -> Vocabulary:
    return Vocabulary(tuple(tokenizer.token_bytes(i) if i < tokenizer.vocab_size else b""
                            for i in range(vocab_size)))


def vocab_nbytes(tokens: int, text_bytes: int) -> int:
    """Bytes of the table: the text and tokens + 1 uint32 offsets (Vocabulary.nbytes)."""
    return text_bytes + 4 * (tokens + 1)


def vocab_goes_to_weights(board: Board, nbytes: int, code_bytes: int = 0) -> bool:
    """True when a table of `nbytes` goes into the weights blob (external
    flash): when it leaves less than CODE_RESERVE_BYTES of the code flash, or
    does not fit beside `code_bytes`, the code-flash estimate
    (plan/codesize.py) of everything else."""
    if board.weights.storage != "external":
        return False  # linked into the image with the weights (host)
    code = next((r for r in board.memory.regions if r.use == "code" and r.kind == "flash"), None)
    if code is None:
        return False
    return nbytes + max(CODE_RESERVE_BYTES, code_bytes) > code.size


def vocab_in_weights(board: Board, vocab: Vocabulary) -> bool:
    """True when the table goes into the weights blob (external flash)."""
    return vocab_goes_to_weights(board, vocab.nbytes)


def check_vocab_fits(board: Board, vocab: Vocabulary, weights_bytes: int, in_weights: bool | None = None) -> None:
    """One line when the vocabulary fits neither the code flash nor the weights
    storage (`in_weights`: where the plan put it; None: vocab_in_weights)."""
    external = vocab_in_weights(board, vocab) if in_weights is None else in_weights
    if external and board.weights.max_bytes is not None \
            and weights_bytes > board.weights.max_bytes:
        raise UserError(f"weights and vocabulary are {weights_bytes:,} B but board {board.name} holds "
                        f"{board.weights.max_bytes:,} B of external flash (over by "
                        f"{weights_bytes - board.weights.max_bytes:,} B): use a smaller model")
