"""A kernel call's C, as the kernel table states it (kernels/): the decode
step's statement, its form in tllm_model_prefill, and its comment."""
from __future__ import annotations

from ..kernels import BatchContext
from ..kernels.c_text import CCall, block_comment, last_token
from ..kernels.refs import BufferRef
from ..lower.records import KernelCall


def c_call(call: KernelCall) -> CCall:
    return call.args.c_call()


def prefill_c_call(call: KernelCall, batched: frozenset, chunk_out: BufferRef | None) -> CCall:
    """The call in tllm_model_prefill: a linear once for the n tokens
    (tllm_matmat_*), anything else once per token on that token's values."""
    return call.args.batched(BatchContext(batched, chunk_out))


def verify_c_call(call: KernelCall, batched: frozenset, chunk_out: BufferRef | None) -> CCall:
    """A head call in tllm_model_verify: on every position of the pass (the
    classifiers' batched forms, kernels/classifier.py; the norms per position)."""
    return call.args.batched(BatchContext(batched, chunk_out))


def last_token_c_call(call: KernelCall, batched: frozenset) -> CCall:
    """A head call in tllm_model_prefill: on the batch's last token."""
    return last_token(call.args.c_call(), batched)


def describe(call: KernelCall) -> tuple[str, BufferRef]:
    """What a call does (its label, kernel and shape) and the buffer it
    writes: the parts of its comment that do not name the layer."""
    what, out = call.args.describe()
    label = call.label if call.args.LABELLED else ""
    return " ".join(p for p in (label, what) if p), out


def c_statement(call: KernelCall, indent: int = 4) -> str:
    """The call's C statement, wrapped to the line width."""
    return c_call(call).text(indent=indent)


def c_comment(call: KernelCall, indent: int = 4) -> str:
    """/* layer 3 attn.wq q4_matvec 64x64 g32 -> l3.q @arena+0x3c040 */"""
    what, out = describe(call)
    where = f"layer {call.layer}" if call.layer is not None else ""
    return block_comment(" ".join(p for p in (where, what) if p) + f" -> {out.name} @{out.region}+0x{out.offset:x}",
                         indent)
