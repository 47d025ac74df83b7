"""Knowledge distillation (torch, CPU): train a student on a teacher's logits.

loss = alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * CE(data)

(softmax at temperature T; the T^2 keeps the gradient scale of the soft term
independent of T, as in Hinton et al.).  Padding positions are excluded.
With a teacher cache (teacher_cache.py) the KL is taken over the cached
top-k tokens plus one "rest" bucket and the teacher is never run here.

Runs are deterministic for a seed: batches come from `torch_io.batch_stream`
(batch k depends only on seed and k), the LR schedule only on the step, and
torch runs with deterministic algorithms on a fixed thread count.  Every
`checkpoint_every` steps the student, the optimiser state and the step are
written atomically to `checkpoint.pt`; a rerun with the same options resumes
from it and ends with the same weights as an uninterrupted run.
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UserError
from .runs import fingerprint_of, progress_bar
from .teacher_cache import cached_kl
from .torch_io import index_stream, make_batch

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class DistillOptions:
    steps: int
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 50
    temperature: float = 2.0
    alpha: float = 0.5  # weight of the soft (teacher) term
    seed: int = 1234
    checkpoint_every: int = 100
    threads: int = 2


@dataclass(frozen=True)
class DistillResult:
    steps: int
    resumed_from: int
    tokens: int  # real tokens seen by the student during THIS run's steps
    seconds: float
    total_tokens: int  # ... and during all steps so far, resumed ones included: the compute of the result


def lr_at(step: int, o: DistillOptions) -> float:
    """Linear warmup, cosine decay to 10% (as scripts/train_default_model.py)."""
    if step < o.warmup:
        return o.lr * (step + 1) / o.warmup
    progress = (step - o.warmup) / max(1, o.steps - o.warmup)
    return o.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def distill_loss(student_logits, teacher_logits, labels, temperature: float, alpha: float):
    import torch.nn.functional as F

    mask = labels != -100
    s, t = student_logits[mask], teacher_logits[mask]  # [tokens, vocab]
    kl = F.kl_div(F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1), log_target=True,
                  reduction="batchmean") * temperature ** 2
    ce = F.cross_entropy(s, labels[mask])
    return alpha * kl + (1 - alpha) * ce, kl.item(), ce.item()


def cached_distill_loss(student_logits, cached, labels, temperature: float, alpha: float):
    """distill_loss with the soft term on a TeacherCache batch (teacher_cache.cached_kl)."""
    import torch.nn.functional as F

    mask = labels != -100
    kl = cached_kl(student_logits, cached, mask, temperature)
    ce = F.cross_entropy(student_logits[mask], labels[mask])
    return alpha * kl + (1 - alpha) * ce, kl.item(), ce.item()


def _optimizer(model, lr):
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def run_fingerprint(student, teacher, seqs: Sequence[Sequence[int]]) -> str:
    """What a checkpoint must match besides the options: the starting student,
    the teacher and the data.  Without it a checkpoint left by another teacher
    (same options) would be resumed silently."""
    return fingerprint_of([student, teacher], seqs)


def _save(path: Path, student, opt, step: int, o: DistillOptions, fingerprint: str) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "options": asdict(o), "fingerprint": fingerprint, "student": student.state_dict(),
                "optimizer": opt.state_dict()}, tmp)
    os.replace(tmp, path)  # atomic: an interrupted save leaves the previous checkpoint


def distill(student, teacher, seqs: Sequence[Sequence[int]], pad_id: int, o: DistillOptions, work_dir: Path,
            progress: bool = True, stop_after: int | None = None, cache=None) -> DistillResult:
    """Trains `student` in place.  `stop_after` ends the run early (after that
    many steps of this call) as an interruption would: for tests.

    With `cache` (a teacher_cache.TeacherCache of `seqs` at o.temperature) the
    soft term is the bucketed KL on the cached top-k and `teacher` is not run
    (it may be None).  With neither (alpha 0) this is plain training on the
    data through the same loop: the from-scratch baseline of an experiment."""
    import torch

    if teacher is None and cache is None and o.alpha != 0.0:
        raise UserError("distillation without a teacher or a teacher cache trains on the data only: alpha must be 0")

    if cache is not None and cache.temperature != o.temperature:
        raise UserError(f"the teacher cache was computed at temperature {cache.temperature}, not "
                        f"{o.temperature}; delete {cache.path} or use its temperature")
    if cache is not None and len(cache.offsets) - 1 != len(seqs):
        raise UserError(f"the teacher cache {cache.path} holds {len(cache.offsets) - 1} sequences, not "
                        f"{len(seqs)}; delete it to compute it again")

    if o.steps < 0 or o.batch_size < 1 or o.checkpoint_every < 1:
        raise UserError("--distill-steps must be >= 0 and batch size and checkpoint interval >= 1")
    if len(seqs) < o.batch_size:
        raise UserError(f"distillation data has {len(seqs)} documents, fewer than one batch of {o.batch_size}")
    torch.set_num_threads(o.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(o.seed)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    ckpt = work_dir / CHECKPOINT
    opt = _optimizer(student, o.lr)
    if cache is not None:
        fingerprint = fingerprint_of([student], seqs, "cache " + cache.fingerprint)
    elif teacher is None:
        fingerprint = fingerprint_of([student], seqs, "data only")
    else:
        fingerprint = run_fingerprint(student, teacher, seqs)
    start = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        if state["options"] != asdict(o):
            raise UserError(f"{ckpt} was written with other options; delete it or rerun with the same options")
        if state.get("fingerprint") != fingerprint:
            raise UserError(f"{ckpt} was written for another teacher, pruning or data; delete {work_dir} "
                            f"to start over")
        student.load_state_dict(state["student"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    stream = index_stream(len(seqs), o.batch_size, o.seed)
    earlier = 0
    for _ in range(start):  # batch k is a pure function of (seed, k): skip what was done
        earlier += sum(len(seqs[j]) for j in next(stream))
    if teacher is not None:
        teacher.eval()
    student.train()
    bar = progress_bar(o.steps, start, progress)
    t0, tokens, done = time.perf_counter(), 0, start
    for step in range(start, o.steps):
        if stop_after is not None and step - start >= stop_after:
            break
        idx = next(stream)
        ids, labels = make_batch([seqs[j] for j in idx], pad_id)
        s_logits = student(input_ids=ids).logits[:, :-1]
        if teacher is None and cache is None:
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(s_logits[target != -100], target[target != -100])
            kl, ce = 0.0, loss.item()
        elif cache is None:
            with torch.no_grad():
                t_logits = teacher(input_ids=ids).logits[:, :-1]
            loss, kl, ce = distill_loss(s_logits, t_logits, labels[:, 1:], o.temperature, o.alpha)
        else:
            loss, kl, ce = cached_distill_loss(s_logits, cache.batch(idx, ids.shape[1]), labels[:, 1:],
                                               o.temperature, o.alpha)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, o)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        tokens += int((labels != -100).sum())
        bar.update(1)
        bar.set_postfix_str(f"kl {kl:.4f} ce {ce:.4f}")
        done = step + 1
        if done % o.checkpoint_every == 0 or done == o.steps:
            _save(ckpt, student, opt, done, o, fingerprint)
    bar.close()
    student.eval()
    return DistillResult(done, start, tokens, time.perf_counter() - t0, earlier + tokens)
