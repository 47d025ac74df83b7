"""What a training run needs beside its arithmetic: a fingerprint of its
inputs (so a checkpoint or a cache made from other inputs is never resumed
silently) and a progress bar (tqdm's when it is there)."""
from __future__ import annotations

import hashlib
import sys
from typing import Sequence

import numpy as np


def fingerprint_of(models, seqs: Sequence[Sequence[int]], extra: str = "") -> str:
    """sha256 of the models' weights (names and bytes), the sequences and `extra`."""
    h = hashlib.sha256()
    for model in models:
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().cpu().numpy().tobytes())
    h.update(extra.encode())
    for s in seqs:
        ids = np.asarray(s, dtype="<i4")
        h.update(len(ids).to_bytes(4, "little"))
        h.update(ids.tobytes())
    return h.hexdigest()


def progress_bar(total: int, initial: int, enabled: bool, desc: str = "distill"):
    try:
        from tqdm import tqdm
    except ImportError:  # transformers depends on tqdm, but stay usable without it
        return _Plain(total, initial, enabled, desc)
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, disable=not enabled,
                dynamic_ncols=True)


class _Plain:
    def __init__(self, total, initial, enabled, desc):
        self.total, self.n, self.enabled, self.desc = total, initial, enabled, desc

    def update(self, k):
        self.n += k
        if self.enabled and (self.n % 50 == 0 or self.n == self.total):
            print(f"{self.desc} {self.n}/{self.total}", file=sys.stderr, flush=True)

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass
