"""The kernel table's entry: one class per firmware kernel.

Each kernel is a frozen dataclass, its fields the call's typed arguments,
and the class states in one place everything the other stages ask of it
(as ggml's type_traits[] does per type): the C call of the decode step, the
description its comment prints, its form in tllm_model_prefill (batched
prefill), its streamed form (the weight stream pass), the weights the
stream may pin, and its code-flash constants.  Lowering creates the
records, the passes and the emitter ask them; adding a kernel touches its
class, its C and its numpy twin."""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from .c_text import CCall, per_token
from .refs import BufferRef, FcS4PcRef, GGUFRef, Q4Ref, refs_of


@dataclass(frozen=True)
class BatchContext:
    """What a batched (tllm_model_prefill) call needs beyond its own record."""

    batched: frozenset  # names of the buffers that hold P tokens' values
    chunk_out: BufferRef | None  # a streamed chunk's P-token rows land here (prefill.CHUNK_OUT)


@dataclass(frozen=True)
class VerifyOutput:
    """A per-position result buffer of the verification pass, declared by
    the speculation pass (lower/speculate.py) with one entry per position."""

    name: str
    ctype: str


@dataclass(frozen=True)
class PinCandidate:
    """A weight entry the stream may copy to SRAM once at boot instead of
    streaming it every token."""

    name: str  # blob entry name
    kind: str  # "q4x4" | "f32"
    nbytes: int
    value: float  # flash bytes per token saved per byte of SRAM


@dataclass(frozen=True)
class WeightRead:
    """A matrix a call reads from the weights blob each token, and the work it does with it."""

    name: str  # blob entry
    layout: str  # q4x4 | q4 | Q4_0 | Q4_1 | Q8_0 | s4pc: which kernel's rate prices it (timing.KERNEL_RATES)
    nbytes: int  # bytes read per token (the whole matrix, or the embedding's one row or tile)
    macs: int  # multiply-accumulates per token (0 for a lookup)


@dataclass(frozen=True)
class Chunk:
    """One transfer of the weight stream: rows [row0, row0 + rows) of a
    matrix, bytes [offset, offset + nbytes) of its stream (copy_bytes:
    nbytes rounded up to a D-cache line; the few extra bytes are never read)."""

    row0: int
    rows: int
    offset: int  # from the matrix's start in the blob
    nbytes: int
    copy_bytes: int


class Kernel(ABC):
    """Base of every kernel call's argument record (see the module docstring)."""

    LABELLED: ClassVar[bool] = True  # its comment starts with the call's label ("attn.wq")
    UNBATCHABLE: ClassVar[str] = ""  # why the layers cannot run P tokens per weight pass with it ("": they can)
    # Code flash (plan/codesize.py): its own kernel code, counted once when a step makes the call; and its
    # batched form's (with tllm_model_prefill), counted once when the prefill is batched.
    CODE_BYTES: ClassVar[int] = 0
    BATCHED_CODE_BYTES: ClassVar[int] = 0
    # The verification pass's form of a head call (speculative decoding), counted once when a step has one.
    VERIFY_CODE_BYTES: ClassVar[int] = 0

    @abstractmethod
    def c_call(self) -> CCall:
        """The decode step's C statement."""

    @abstractmethod
    def describe(self) -> tuple[str, BufferRef]:
        """What the call does (kernel and shape) and the buffer it writes."""

    def batched(self, ctx: BatchContext) -> CCall:
        """The call in tllm_model_prefill (a head call: in tllm_model_verify,
        for every position): by default once per token, on that token's values."""
        return per_token(self.c_call(), ctx.batched)

    def streamed(self, chunk_bytes: int) -> "Kernel | None":
        """The call reading its weights through the stream (None: it reads them in place)."""
        return None

    def pin_candidate(self) -> PinCandidate | None:
        """Its matrix, when the stream may pin it (vectors are found generically)."""
        return None

    def stream_chunks(self) -> tuple[Chunk, ...]:
        """The stream transfers it consumes, in order (a streamed matrix call)."""
        return ()

    def stream_buffer_bytes(self) -> int:
        """The largest copy it makes into a stream buffer (0: it streams nothing)."""
        return max((ch.copy_bytes for ch in self.stream_chunks()), default=0)

    def streamed_rows(self) -> int:
        """Rows per chunk of a streamed linear (the batched prefill's chunk output buffer)."""
        return 0

    def per_token_scratch(self) -> frozenset:
        """Buffers it uses token by token even in a batched prefill (not P-token buffers)."""
        return frozenset()

    def tile_output(self) -> BufferRef | None:
        """An output written in whole 4-row tiles (a P-token copy needs 3 floats of slack)."""
        return None

    def weight_reads(self) -> tuple[WeightRead, ...]:
        """The matrices it reads per token (vectors are found generically: plan/traffic.py)."""
        return ()

    def code_key(self) -> tuple:
        """What shares code in the image: calls of one key count their CODE_BYTES once (plan/codesize.py)."""
        return (type(self),)

    def code_parts(self) -> tuple[tuple[tuple, int], ...]:
        """(code key, bytes) of the code this call needs: its own, and a wrapped kernel's."""
        return ((self.code_key(), self.CODE_BYTES),)

    def batched_code_parts(self) -> tuple[tuple[tuple, int], ...]:
        """The same for its batched form (tllm_model_prefill)."""
        return ((self.code_key(), self.BATCHED_CODE_BYTES),)

    def verify_code_parts(self) -> tuple[tuple[tuple, int], ...]:
        """The same for a head call's form in the verification pass (tllm_model_verify, --speculate)."""
        return ((("verify",) + self.code_key(), self.VERIFY_CODE_BYTES),)

    def verify_outputs(self) -> tuple["VerifyOutput", ...]:
        """What its form in the verification pass (speculative decoding,
        lower/speculate.py) writes per position beyond its own buffers: the
        greedy and top-K classifiers' per-position results (a plain classifier
        writes P rows of logits into its own, batched, output: nothing)."""
        return ()

    def with_verify_outputs(self, refs: dict) -> "Kernel":
        """The record with those outputs' buffers (name -> BufferRef) attached."""
        return self

    def descriptors(self) -> tuple[Q4Ref | GGUFRef, ...]:
        """The matrices it reads through a C descriptor (tllm_q4_matrix, tllm_gguf_matrix ...)."""
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, FcS4PcRef):
                out += list(refs_of(v, (Q4Ref, GGUFRef)))
        return tuple(dict.fromkeys(out))
