"""The torch side of compression: loading and saving Hugging Face checkpoints,
documents as training sequences, batches, perplexity.

torch and transformers are optional (`pip install -e '.[train]'`): only
`compress`/`prune`/`distill` import this module, and they fail with one line
when torch is missing.  The core install still compiles models.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import UserError


def require_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("compression trains with torch: pip install -e '.[train]' (torch and transformers)") from None
    return torch


SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # separate q/k/v and gate/up projections


def load_torch_model(model_dir: Path):
    """A Hugging Face folder -> (transformers model in float32, eval mode)."""
    require_torch()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per user error; our own bar reports progress

    model_dir = Path(model_dir)
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{model_dir}: no config.json; compression takes a Hugging Face model directory")
    archs = json.loads(cfg_path.read_text(encoding="utf-8")).get("architectures") or ["?"]
    if archs[0] not in SUPPORTED:
        raise UserError(f"{model_dir}: compression supports {', '.join(SUPPORTED)}, not {archs[0]} "
                        "(fused projections cannot be pruned per head yet)")
    if not any(model_dir.glob("*.safetensors")):
        raise UserError(f"{model_dir}: no *.safetensors weights; torch training needs the Hugging Face "
                        "directory (save_pretrained) the model came from")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.eval()


def save_model_dir(model, tokenizer_json: Path, out: Path, tokenizer_config: Path | None = None) -> Path:
    """save_pretrained + tokenizer.json (+ tokenizer_config.json: BOS/EOS names,
    add_bos, chat template), swapped into place atomically; the config also
    gets transformers-4 spellings (rope_theta) like the bundled model."""
    import torch

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        shutil.copyfile(tokenizer_json, tmp / "tokenizer.json")
        if tokenizer_config is not None and Path(tokenizer_config).is_file():
            shutil.copyfile(tokenizer_config, tmp / "tokenizer_config.json")
        (tmp / "generation_config.json").unlink(missing_ok=True)
        cfg = json.loads((tmp / "config.json").read_text())
        rope = cfg.get("rope_parameters") or {}
        if "rope_theta" in rope:
            cfg["rope_theta"] = float(rope["rope_theta"])
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def encode_docs(tokenizer, docs: Sequence[str], max_len: int) -> list[list[int]]:
    """BOS + document + EOS (our Tokenizer prepends BOS), cut at the context."""
    out = []
    for d in docs:
        ids = tokenizer.encode(d)
        if tokenizer.eos_id is not None:
            ids = ids + [tokenizer.eos_id]
        out.append(ids[:max_len])
    return [s for s in out if len(s) >= 2]


PAD_MULTIPLE = 32  # few distinct widths: the CPU kernels re-plan per shape


def make_batch(seqs: Sequence[Sequence[int]], pad_id: int):
    """Right padding needs no attention mask under causal attention; -100 labels skip it."""
    import torch

    width = -(-max(len(s) for s in seqs) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s)
        labels[r, :len(s)] = torch.tensor(s)
    return ids, labels


def index_stream(n: int, batch_size: int, seed: int) -> Iterator[list]:
    """Endless, deterministic: epoch e is a permutation seeded by (seed, e), so
    batch k (a list of sequence indices) is the same whether a run was
    interrupted or not."""
    import torch

    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1000 + epoch)
        order = torch.randperm(n, generator=g).tolist()
        for i in range(0, n - batch_size + 1, batch_size):
            yield order[i:i + batch_size]
        epoch += 1


def batch_stream(seqs: Sequence[Sequence[int]], batch_size: int, seed: int, pad_id: int) -> Iterator:
    """The batches of `index_stream`, padded (ids, labels)."""
    for idx in index_stream(len(seqs), batch_size, seed):
        yield make_batch([seqs[j] for j in idx], pad_id)


def _scored_batches(model, seqs: Sequence[Sequence[int]], pad_id: int, batch_size: int):
    """Per batch: next-token logits after each position and their targets
    (-100 on padding), in eval mode without gradients."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(seqs), batch_size):
                ids, labels = make_batch(seqs[i:i + batch_size], pad_id)
                yield model(input_ids=ids).logits[:, :-1], labels[:, 1:]
    finally:
        model.train(was_training)


def perplexity(model, seqs: Sequence[Sequence[int]], pad_id: int, batch_size: int = 32) -> float:
    """Per token after BOS (EOS included), like scripts/train_default_model.py."""
    import torch

    nll, count = 0.0, 0
    for logits, tgt in _scored_batches(model, seqs, pad_id, batch_size):
        nll += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1),
                                                 ignore_index=-100, reduction="sum").item()
        count += int((tgt != -100).sum())
    return math.exp(nll / max(1, count))


def sequence_nll(model, seqs: Sequence[Sequence[int]], pad_id: int, batch_size: int = 32) -> list[float]:
    """Summed next-token NLL (nats) of each sequence, in order."""
    import torch

    out: list[float] = []
    for logits, tgt in _scored_batches(model, seqs, pad_id, batch_size):
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=-100, reduction="none")
        out += loss.sum(dim=1).tolist()
    return out


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
