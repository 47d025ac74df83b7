"""Perplexity of the float model and of the quantized reference on held-out text.

Documents are separated by a blank line (the corpus format of
scripts/make_corpus.py); each is scored on its own from BOS, like training
and like the MCU, which always starts a story at position 0.  EOS is
appended (when the tokenizer has one) and scored, so a model is also judged
on knowing where a story ends, and the float figure equals the training
script's held-out perplexity.

The quantized path is `reference_seq.SeqQuantKernels`: bit-identical to
`QuantKernels`, i.e. to the firmware's logits (the test proves it), but run
a whole document at a time.  Cross-entropy is computed in float64 from those
float32 logits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from ..frontends import ImportedModel
from ..reference.sequence import SeqFloatKernels, SeqQuantKernels, run_sequence
from ..quant.calibrated import calibration_documents, quantize_calibrated
from ..quant.classifier_q4 import requantize_classifier
from ..quant.gguf_keep import quantize_gguf
from ..quant.kv import KVBits, parse_kv_bits
from ..quant.kv_center import kv_calibration_documents, kv_centers

DOC_SEPARATOR = "\n\n"
DEFAULT_MAX_TOKENS = 20000


def read_documents(path: Path) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read text ({getattr(e, 'strerror', None) or e})") from None
    docs = [d.strip() for d in text.split(DOC_SEPARATOR) if d.strip()]
    if not docs:
        raise UserError(f"{path}: no text to evaluate (documents are separated by blank lines)")
    return docs


def encode_documents(model: ImportedModel, docs: Sequence[str], max_tokens: int | None,
                     max_seq: int | None = None) -> list[list[int]]:
    """BOS + document (+ EOS), cut at the context; whole documents until
    `max_tokens` scored tokens (at least one document)."""
    tok = model.tokenizer
    if tok is None:
        raise UserError(f"{model.source}: no tokenizer found: add tokenizer.json to the model directory "
                        "or pass --tokenizer tokenizer.bin")
    if tok.bos_id is None:
        raise UserError(f"{model.source}: the tokenizer has no BOS token; documents are scored from BOS")
    ctx = max_seq or model.graph.config.max_seq
    out, total = [], 0
    for d in docs:
        ids = tok.encode(d)
        if not ids or ids[0] != tok.bos_id:
            ids = [tok.bos_id] + ids
        if tok.eos_id is not None:
            ids = ids + [tok.eos_id]
        ids = ids[:ctx]
        if len(ids) < 2:
            continue
        if out and max_tokens and total + len(ids) - 1 > max_tokens:
            break
        out.append(ids)
        total += len(ids) - 1
    if not out:
        raise UserError("no document is at least one token long after BOS")
    return out


@dataclass
class Score:
    """Summed statistics of one configuration over all documents."""

    nll: float = 0.0
    tokens: int = 0
    agree: int = 0  # positions whose argmax equals the float model's
    argmax: list = field(default_factory=list)  # per document, for agreement

    @property
    def ce(self) -> float:
        return self.nll / max(1, self.tokens)

    @property
    def ppl(self) -> float:
        return math.exp(self.ce)


def _nll(logits: np.ndarray, targets: np.ndarray) -> float:
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    return float((lse - z[np.arange(len(targets)), targets]).sum())


def score(graph, kernels, docs: Sequence[Sequence[int]], reference: Score | None = None,
          progress: Callable[[int], None] | None = None) -> Score:
    s = Score()
    for i, ids in enumerate(docs):
        logits, _ = run_sequence(graph, kernels, ids[:-1])
        targets = np.asarray(ids[1:])
        s.nll += _nll(logits, targets)
        s.tokens += len(targets)
        am = logits.argmax(axis=1)
        s.argmax.append(am)
        if reference is not None:
            s.agree += int((am == reference.argmax[i]).sum())
        if progress:
            progress(len(targets))
    return s


@dataclass(frozen=True)
class QuantConfig:
    weight_quant: str  # "gguf" (quant/gguf_keep.py) | "rtn" | "clip" | "awq" (quant/calibrated.py)
    group_size: int
    kv_bits: KVBits  # quant/kv.py: 8, 4 or 8:4
    classifier_quant: str = "keep"  # gguf only: "q4" re-rounds the kept classifier (quant/classifier_q4.py)
    kv_rotate: str = "off"  # the int4 cache's rotation, resolved (quant/kv.kv_rotation): hadamard | off
    kv_center: bool = False  # the rotated int4 cache centred on calibration text (quant/kv_center.py)

    @property
    def name(self) -> str:
        cls = "" if self.classifier_quant == "keep" else f"-classifier-{self.classifier_quant}"
        rot = "-hadamard" if self.kv_rotate == "hadamard" else ""
        rot += "-centred" if self.kv_center else ""
        return f"{self.weight_quant}-g{self.group_size}-kv{self.kv_bits}{rot}{cls}"


def evaluate(model: ImportedModel, docs: Sequence[Sequence[int]], configs: Sequence[QuantConfig],
             quantizer: Callable[[QuantConfig], object], progress: Callable[[int], None] | None = None) -> dict:
    """{"fp32": {...}, "configs": {name: {...}}}: the JSON `eval` prints."""
    g = model.graph
    ctx = max(len(d) for d in docs)
    fp = score(g, SeqFloatKernels(g, ctx), docs, progress=progress)
    result = {"documents": len(docs), "tokens": fp.tokens,
              "fp32": {"ce": fp.ce, "ppl": fp.ppl}, "configs": {}}
    for cfg in configs:
        qs = score(g, SeqQuantKernels(quantizer(cfg), ctx), docs, reference=fp, progress=progress)
        result["configs"][cfg.name] = {
            "weight_quant": cfg.weight_quant, "group_size": cfg.group_size,
            "kv_bits": parse_kv_bits(cfg.kv_bits).json_value(),
            "kv_rotate": cfg.kv_rotate, "kv_center": "calibrated" if cfg.kv_center else "off",
            "classifier_quant": cfg.classifier_quant,
            "ce": qs.ce, "ppl": qs.ppl, "ppl_delta_pct": 100.0 * (qs.ppl / fp.ppl - 1.0),
            "top1_agreement": qs.agree / max(1, qs.tokens)}
    return result


def format_table(result: dict) -> str:
    lines = [f"{result['documents']} documents, {result['tokens']:,} scored tokens",
             f"{'configuration':<30} {'CE (nats)':>10} {'ppl':>8} {'Δppl':>8} {'top-1 =fp32':>12}",
             f"{'fp32':<30} {result['fp32']['ce']:>10.5f} {result['fp32']['ppl']:>8.4f} {'':>8} {'':>12}"]
    for name, r in result["configs"].items():
        lines.append(f"{name:<30} {r['ce']:>10.5f} {r['ppl']:>8.4f} {r['ppl_delta_pct']:>+7.2f}% "
                     f"{100 * r['top1_agreement']:>11.2f}%")
    return "\n".join(lines)


def make_quantizer(model: ImportedModel, calibration: Path | None, max_seq: int | None = None):
    """QuantConfig -> QuantizedGraph, calibrated on the text file (None: the
    built-in samples: the weights' and the KV centres', as compile takes them);
    a centred cache's centres for a context of max_seq (None: the model's)."""
    docs: list = []
    kv_docs: list = []

    def load():
        if not docs:
            docs.extend(calibration_documents(model.tokenizer, calibration, model.graph.config.max_seq))
        return docs

    def load_kv():
        if not kv_docs:
            kv_docs.extend(kv_calibration_documents(model.tokenizer, calibration, model.graph.config.max_seq))
        return kv_docs

    return make_quantizer_from_docs(model, load, load_kv, max_seq)


def make_quantizer_from_docs(model: ImportedModel, docs, kv_docs=None, max_seq: int | None = None):
    """`docs`: calibration token lists, or a function returning them (read only
    when a calibrated method is asked for); `kv_docs` likewise for the KV
    centres (None: `docs`), for a context of max_seq (None: the model's).
    Calibrates once per (method, group size): the KV precision does not change
    the weights; the centres once per weight method."""
    cache: dict = {}
    centres: dict = {}

    def centred(qg, cfg: QuantConfig):
        if not cfg.kv_center:
            return None
        key = (cfg.weight_quant, cfg.group_size, cfg.classifier_quant)
        if key not in centres:
            source = docs if kv_docs is None else kv_docs
            centres[key] = kv_centers(qg.graph, source() if callable(source) else source,
                                      max_seq or model.graph.config.max_seq)
        return centres[key]

    def quantizer(cfg: QuantConfig):
        key = (cfg.weight_quant, cfg.group_size, cfg.classifier_quant)
        if key not in cache and cfg.weight_quant == "gguf":  # the GGUF's own blocks (quant/gguf_keep.py)
            qg = quantize_gguf(model.graph, model.blocks, cfg.group_size, 8)
            if cfg.classifier_quant == "q4":
                qg = requantize_classifier(qg, docs() if callable(docs) else docs)
            cache[key] = qg
        if key not in cache:
            d = [] if cfg.weight_quant == "rtn" else (docs() if callable(docs) else docs)
            cache[key] = quantize_calibrated(model.graph, d, cfg.weight_quant, cfg.group_size, 8)
        return replace(cache[key], kv_bits=cfg.kv_bits, kv_rotate=cfg.kv_rotate, kv_centers=centred(cache[key], cfg))

    return quantizer
