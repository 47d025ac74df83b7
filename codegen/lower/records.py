"""What lowering produces: the decode step as kernel calls over declared
buffers (LoweredStep), and what it reads (StepSource).

A LoweredStep is made once per compile.  Its buffers are declared with the
element count of one token at any context: a buffer that grows with the
context (the KV cache, attention scores, token ids, the request) states
its count as `count + per_seq x max_seq`, so the context searches plan the
same step at every candidate length (fit/search.py) instead of lowering
the graph again."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..abi import TILE_SPILL
from ..ir import Graph, ModelConfig
from ..kernels import Kernel
from ..kernels.refs import BufferRef
from ..quant.formats import QuantizedGraph
from ..quant.kv import KVBits, parse_kv_bits


@dataclass(frozen=True)
class StepSource:
    """What lowering reads: the graph and how its weights are laid out.
    Made from a QuantizedGraph (compile) or from the graph and the options
    alone (`tinyllm-gen plan`, which quantizes nothing): no weight data is
    read, only names and shapes."""

    graph: Graph
    group_size: int
    kv_bits: KVBits  # quant/kv.py (an int or "8:4" given here is parsed)
    kernels: str = "portable"  # "portable" | "cortex-m7": the weight layout and the activation scratch
    method: str = "rtn"  # the weight scheme (quant/formats.WEIGHT_QUANTS, or "per-channel")
    kept: tuple[tuple[str, str], ...] = ()  # (weight, GGUF qtype) of matrices whose llama.cpp blocks are kept
    static: Mapping[str, object] = field(default_factory=dict)  # per-channel: output value -> StaticLinear
    kv_rotate: str = "off"  # the int4 cache's rotation, resolved (quant/kv.kv_rotation): "hadamard" | "off"
    kv_center: bool = False  # the rotated int4 cache stores k - c_k and v - c_v (quant/kv_center.py)

    def __post_init__(self):
        object.__setattr__(self, "kv_bits", parse_kv_bits(self.kv_bits))

    @property
    def config(self) -> ModelConfig:
        return self.graph.config

    @property
    def kept_types(self) -> dict[str, str]:
        return dict(self.kept)


def source_of(qg: QuantizedGraph) -> StepSource:
    """A quantized graph's lowering input."""
    kept = tuple(sorted((name, t.qtype) for name, t in qg.gguf.items()))
    return StepSource(qg.graph, qg.group_size, qg.kv_bits, qg.kernels, qg.method, kept, qg.static, qg.kv_rotate,
                      qg.kv_centers is not None)


@dataclass(frozen=True)
class KernelCall:
    args: Kernel
    layer: int | None
    label: str  # e.g. "attn.wq"


@dataclass(frozen=True)
class BufferDecl:
    """A run-time buffer a lowered step needs, before planning: what the
    planner places.  `span` pins a live range the calls do not show:
    "always" (KV cache, tokens, generation state: the whole generation),
    "sampler" (after the last call), "start" (before the first call: a
    UART request is parsed before the first step); None = the calls that
    use it, plus the sampler for the logits."""

    name: str
    ctype: str
    count: int  # elements for one token, plus per_seq x max_seq
    kind: str  # activation | scratch | kv | state | tokens | logits | sampler | topk | verify | request | stream | pinned
    span: str | None = None
    placement: str = ""  # hot | bulk | dma; "" = by kind (plan/lifetimes.placement_of)
    align: int = 16  # stream buffers: 32 (whole D-cache lines for the H750's MDMA)
    per_seq: int = 0  # elements per token of context

    def elements(self, max_seq: int) -> int:
        return self.count + self.per_seq * max_seq


@dataclass(frozen=True)
class StreamOptions:
    """What `compile --stream` asked for, plus the pinned entries chosen (fit/search.py)."""

    mode: str = "off"  # off | all | auto
    chunk_bytes: int = 16 * 1024  # at most this many bytes per chunk (whole tiles)
    pinned: frozenset = frozenset()  # blob entry names copied to SRAM at boot


@dataclass(frozen=True)
class StreamPlan:
    """The stream pass's decisions (lower/stream.py)."""

    options: StreamOptions
    buffer_bytes: int  # each of the two stream buffers (0: nothing streamed)
    pinned: tuple[tuple[str, int], ...]  # (entry name, slot bytes) in slot order
    n_chunks: int
    n_runs: int = 0  # streamed matrices: one run of chunks each in the firmware's table (tllm_stream.h)

    @property
    def pinned_bytes(self) -> int:
        return sum(b for _, b in self.pinned)


@dataclass(frozen=True)
class PrefillPlan:
    """The prefill pass's decisions (lower/prefill.py)."""

    batch: int  # P: prompt tokens per weight pass (1: token by token)
    batched: frozenset  # buffer names that hold P tokens' values (token p at p x the one-token count)
    why: str  # one sentence: why this P
    padded: frozenset = frozenset()  # batched linear outputs whose rows are not whole 4-row tiles: +spill

    def planned_count(self, name: str, count: int) -> int:
        """A buffer's element count in the plan, from its one-token count."""
        if name not in self.batched:
            return count
        return self.batch * count + (TILE_SPILL if name in self.padded else 0)


@dataclass(frozen=True)
class SpeculatePlan:
    """The speculation pass's decisions (lower/speculate.py): the
    verification pass (tllm_model_verify) runs `k` guesses with the last
    accepted token, P = k + 1 positions, through the layers on the batched
    prefill's P-token buffers and then the head on every position: the
    head's buffers hold P positions' values (position p at p x the one-token
    count), the classifier's verification outputs one entry per position."""

    draft: str  # "lookup": the prompt-lookup draft (firmware/tllm_draft.h)
    k: int  # guesses per pass at most (1 .. abi.SPECULATE_MAX_K, and below the prefill batch)
    batched: frozenset  # the head's buffers that hold P positions' values in the verification pass
    why: str  # one sentence: what the verification pass does (its C comment)
    padded: frozenset = frozenset()  # of them, written in whole 4-row tiles: + TILE_SPILL floats
    choice: str = ""  # how the search chose k (fit/search.py: the timing model's figures, or "asked")

    @property
    def positions(self) -> int:
        return self.k + 1

    def planned_count(self, name: str, count: int) -> int:
        if name not in self.batched:
            return count
        return self.positions * count + (TILE_SPILL if name in self.padded else 0)


@dataclass(frozen=True)
class LoweredStep:
    """The decode step as kernel calls whose buffers are symbolic
    (BufferRef offset -1, region "") and whose weights are named but not yet
    in a blob (offsets -1).  The planner derives every buffer and live range
    from it (plan/lifetimes.py); bind.py then writes the planned offsets and
    the blob's offsets back (analysis -> algorithm -> transform).  The
    stream and prefill passes (lower/stream.py, lower/prefill.py) return
    new steps with their decisions in `stream` and `prefill`."""

    config: ModelConfig
    calls: tuple[KernelCall, ...]
    decls: tuple[BufferDecl, ...]  # every buffer, in order of first use
    logits: BufferRef
    group_size: int
    kv_bits: KVBits
    kernels: str
    sampler: str
    # calls[head_start:] are the head: the final norm and the classifier, the
    # calls of the graph's nodes after the last layer (reference.executor.head_start_node).
    # Only the last prompt token's logits are read, so the firmware's step
    # skips them for the others (tllm_model_step's need_logits).
    head_start: int
    top_k: int = 0  # --sampler topk:K (TopKClassifier); 0: full or greedy
    stream: StreamPlan | None = None  # weights streamed or pinned (lower/stream.py); None: read in place
    prefill: PrefillPlan | None = None  # prompt tokens per weight pass (lower/prefill.py); None: not decided
    speculate: SpeculatePlan | None = None  # the verification pass (lower/speculate.py); None: plain decoding

    @property
    def prefill_batch(self) -> int:
        return self.prefill.batch if self.prefill is not None else 1

    def planned_count(self, name: str, count: int) -> int:
        """A buffer's element count in the plan from its one-token count (P-token buffers hold P)."""
        return planned_count(self.prefill, self.speculate, name, count)

    @property
    def greedy(self) -> bool:
        """The classifier ends in an argmax: no logits vector, no sampler."""
        return self.sampler == "greedy"

    @property
    def body_calls(self) -> tuple[KernelCall, ...]:
        return self.calls[:self.head_start]

    @property
    def head_calls(self) -> tuple[KernelCall, ...]:
        return self.calls[self.head_start:]

    def decl(self, name: str) -> BufferDecl:
        for d in self.decls:
            if d.name == name:
                return d
        raise KeyError(name)


def planned_count(prefill: PrefillPlan | None, speculate: SpeculatePlan | None, name: str, count: int) -> int:
    """A buffer's element count in the plan: the body's P-token buffers (the
    prefill pass's), the head's P-position ones (the speculation pass's),
    else its one-token count."""
    if prefill is not None and name in prefill.batched:
        return prefill.planned_count(name, count)
    if speculate is not None:
        return speculate.planned_count(name, count)
    return count
