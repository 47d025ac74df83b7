"""Teacher logits computed once over the distillation text and kept on disk.

Distilling a 135M-parameter teacher into a small student on 2 CPU cores, the
teacher's forward (2 x N_teacher FLOPs per token) costs far more than the
student's step; paid at every step it dominates every epoch.  The cache pays
it once per token of the text.

Per predicted position (sequence s of length L gives L - 1 rows, the
positions whose next token is scored, as distill.py) it stores, at the
distillation temperature T:
- ids[k]     the teacher's top-k token ids (int32), largest logit first;
- logits[k]  their raw logits (float32);
- lse        logsumexp(all logits / T) (float32, computed in float64);
- log_rest   log of the probability mass outside the top k at T (float32,
             computed in float64 from the full logits; -inf when nothing
             is left).
So the teacher's distribution over the k + 1 buckets "each top-k token" and
"everything else" is exact, and `cached_kl` is the KL divergence of those
buckets: the full KL when the rest holds one token, a lower bound otherwise.

Files (in the cache directory): meta.json (what the cache is of: teacher
and data fingerprint, k, T, row offsets), ids.npy, logits.npy, lse.npy,
log_rest.npy (numpy memory maps: memory stays one batch of full logits
whatever the text size), progress.json (sequences done).  Batches of
sequences are written, flushed, and only then counted done (atomic replace),
so a killed run redoes at most one batch and ends with the same bytes as an
uninterrupted one.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UserError
from .runs import fingerprint_of, progress_bar
from .torch_io import make_batch

FORMAT = 1
ARRAYS = ("ids", "logits", "lse", "log_rest")


@dataclass(frozen=True)
class CacheStats:
    sequences: int
    positions: int
    tokens: int  # tokens the teacher's forward ran over (all positions of every sequence): its compute
    seconds: float  # wall time of the teacher pass, over all runs that built it
    resumed_from: int  # sequences already done when this call started
    bytes: int  # size of the arrays on disk


class TeacherCache:
    """A finished cache, read-only; `batch` gathers the rows of a padded batch."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.k, self.temperature = self.meta["k"], self.meta["temperature"]
        self.fingerprint = self.meta["fingerprint"]
        self.offsets = np.asarray(self.meta["offsets"], dtype=np.int64)
        self.arrays = {a: np.load(self.path / f"{a}.npy", mmap_mode="r") for a in ARRAYS}

    def batch(self, indices: Sequence[int], width: int):
        """Tensors [B, width - 1, k] (ids, logits) and [B, width - 1] (lse,
        log_rest) aligned with `make_batch` of those sequences; rows past a
        sequence's end are zero (their labels are -100)."""
        import torch

        b, w = len(indices), width - 1
        out = {"ids": np.zeros((b, w, self.k), np.int64), "logits": np.zeros((b, w, self.k), np.float32),
               "lse": np.zeros((b, w), np.float32), "log_rest": np.zeros((b, w), np.float32)}
        for r, i in enumerate(indices):
            lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
            for a in ARRAYS:
                out[a][r, :hi - lo] = self.arrays[a][lo:hi]
        return tuple(torch.from_numpy(out[a]) for a in ARRAYS)


def check_top_k(k: int, vocab: int) -> None:
    if not 1 <= k < vocab:
        raise UserError(f"--teacher-top-k {k} must be in [1, {vocab - 1}]: below the vocabulary size "
                        f"({vocab}), so the rest bucket exists")


def cache_fingerprint(teacher, seqs: Sequence[Sequence[int]], k: int, temperature: float) -> str:

    return fingerprint_of([teacher], seqs, f"teacher-cache v{FORMAT} k={k} T={temperature!r}")


def build_teacher_cache(teacher, seqs: Sequence[Sequence[int]], pad_id: int, k: int, temperature: float,
                        path: Path, batch_size: int = 8, progress: bool = True,
                        stop_after: int | None = None) -> tuple:
    """Builds (or resumes) the cache at `path`; returns (TeacherCache, CacheStats).
    `stop_after` ends after that many batches of this call, as a kill would: for tests."""
    import torch

    check_top_k(k, teacher.config.vocab_size)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fingerprint = cache_fingerprint(teacher, seqs, k, temperature)
    lengths = [len(s) - 1 for s in seqs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_rows = int(offsets[-1])
    meta_path, prog_path = path / "meta.json", path / "progress.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != fingerprint:
            raise UserError(f"{path} holds the logits of another teacher, text, --teacher-top-k or "
                            f"--temperature; delete {path} to compute them again")
        state = json.loads(prog_path.read_text())
        arrays = {a: np.load(path / f"{a}.npy", mmap_mode="r+") for a in ARRAYS}
    else:
        meta = {"format": FORMAT, "fingerprint": fingerprint, "k": k, "temperature": temperature,
                "sequences": len(seqs), "rows": n_rows, "offsets": offsets.tolist()}
        shapes = {"ids": ((n_rows, k), np.int32), "logits": ((n_rows, k), np.float32),
                  "lse": ((n_rows,), np.float32), "log_rest": ((n_rows,), np.float32)}
        arrays = {a: np.lib.format.open_memmap(path / f"{a}.npy", mode="w+", dtype=dt, shape=shape)
                  for a, (shape, dt) in shapes.items()}
        state = {"done": 0, "seconds": 0.0}
        _write_atomic(prog_path, state)
        _write_atomic(meta_path, meta)  # last: a cache without meta.json is started over
    start = state["done"]
    bar = _bar(len(seqs), start, progress)
    teacher.eval()
    t0, batches = time.perf_counter(), 0
    with torch.no_grad():
        for i in range(start, len(seqs), batch_size):
            if stop_after is not None and batches >= stop_after:
                break
            chunk = seqs[i:i + batch_size]
            ids, _ = make_batch(chunk, pad_id)
            logits = teacher(input_ids=ids).logits[:, :-1]
            for r, s in enumerate(chunk):
                rows = _rows(logits[r, :len(s) - 1], k, temperature)
                lo = int(offsets[i + r])
                for a in ARRAYS:
                    arrays[a][lo:lo + len(s) - 1] = rows[a]
            for a in ARRAYS:
                arrays[a].flush()
            state = {"done": min(len(seqs), i + batch_size),
                     "seconds": state["seconds"] + time.perf_counter() - t0}
            t0 = time.perf_counter()
            _write_atomic(prog_path, state)  # after the flush: "done" never counts unwritten rows
            batches += 1
            bar.update(len(chunk))
    bar.close()
    del arrays
    stats = CacheStats(len(seqs), n_rows, sum(len(s) for s in seqs[:state["done"]]), state["seconds"], start,
                       sum((path / f"{a}.npy").stat().st_size for a in ARRAYS))
    if state["done"] < len(seqs):
        return None, stats
    return TeacherCache(path), stats


def _rows(logits, k: int, temperature: float) -> dict:
    """Top-k, logsumexp and rest mass of [positions, vocab] logits."""
    import torch

    top = torch.topk(logits, k, dim=-1, sorted=True)
    scaled = logits.double() / temperature
    lse = torch.logsumexp(scaled, dim=-1)
    rest = torch.logsumexp(scaled.scatter(-1, top.indices, float("-inf")), dim=-1) - lse
    return {"ids": top.indices.to(torch.int32).numpy(), "logits": top.values.float().numpy(),
            "lse": lse.float().numpy(), "log_rest": rest.float().numpy()}


def cached_kl(student_logits, cached, mask, temperature: float):
    """T^2 * KL(teacher || student) over the k + 1 buckets (top-k ids, rest),
    averaged over the positions in `mask`.  `cached` = TeacherCache.batch(...)."""
    import torch

    ids, t_logits, t_lse, t_rest = (x[mask] for x in cached)
    s = student_logits[mask] / temperature  # [n, vocab]
    s_lse = torch.logsumexp(s, dim=-1, keepdim=True)
    s_top = s.gather(-1, ids) - s_lse
    s_rest = torch.logsumexp(s.scatter(-1, ids, float("-inf")), dim=-1, keepdim=True) - s_lse
    t_log = torch.cat([t_logits / temperature - t_lse[:, None], t_rest[:, None]], dim=-1)
    s_log = torch.cat([s_top, s_rest], dim=-1)
    q = t_log.exp()  # exp(-inf) = 0: an empty rest bucket adds nothing
    kl = torch.where(q > 0, q * (t_log - s_log), torch.zeros_like(q)).sum(-1)
    return kl.mean() * temperature ** 2


def _write_atomic(p: Path, obj) -> None:
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, p)


def _bar(total: int, initial: int, enabled: bool):

    return progress_bar(total, initial, enabled, desc="teacher logits")
