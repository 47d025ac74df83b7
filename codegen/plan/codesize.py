"""Internal (code) flash from shapes: what `plan` and `compile` check before
the linker would say `region FLASH overflowed`.

The model, in bytes of the board's code region (vectors, .text, .rodata,
the .data load image and the zero table, as plan/elfsize.py attributes
arm-none-eabi-size's sections):

    RUNTIME[kernel set]                   runtime, console, board code, vectors, the step's loop
  + PER_LAYER[form][kernel set] x layers  a layer's table entry and descriptors (loop), or its calls (unrolled)
  + KV4 when --kv-bits 4                  the int4 KV kernels
  + K8V4 when --kv-bits 8:4               the int8-K int4-V attention kernel
  + GREEDY when --sampler greedy          the streamed argmax
  + STREAM + STREAM_PER_LAYER[form] x layers  the stream runtime and streamed calls (--stream; only
                                          the pins' boot copy when every matrix is pinned)
  + PREFILL (+ per layer unrolled, + the stream's) when prefill_batch > 1: the batched kernels and tllm_model_prefill
  + VERIFY + the head's verification forms (kernels/) with --speculate: tllm_model_verify (its layers are
                                          tllm_model_prefill's)
  + ROLL with --context-policy roll       the KV shift kernel and the model's context_shift
  + 20 x streamed matrices + 12 x pinned  the stream tables (tllm_stream.h, one run of chunks per matrix), exact
  + the vocabulary when it stays in code flash: its text and offsets, exact

The runtime's constants are here, each kernel's own on its class in the
kernel table (kernels/: the int4 KV kernels, the greedy argmax, the
batched forms of the linears); all are measured on the STM32H750B-DK
build (the largest vectors and board code of the Cortex-M boards; QEMU's
image is about 750 B smaller) with arm-none-eabi-gcc 12.2 -O2, rounded up
so the estimate is never below the build.  A layer's code grows a little
with the model's dimensions (wider immediates): the per-layer figures
cover SmolLM2-135M (dim 576, 30 layers: estimate 35,908 B against
32,464 B built for its default DK build, --max-seq auto), the widest model
built here.
tests/emu/test_code_flash_estimate.py builds models of 1 to 24 layers with
each kernel set, KV precision, sampler, stream mode, board kind and step
form and checks 0 <= estimate - built <= ERROR_BOUND_BYTES; when the
runtime or the generated step changes size, it says by how much and these
constants follow."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..kernels import Attention
from ..lower.records import LoweredStep

# the M7's without its q4x4 kernels (kernels/); +1,920 B each with speculative decoding's engine, draft and
# guessed-position samplers, compiled into every build (measured +1,780 B on the DK, +1,844 B on QEMU);
# +1,152 B each with multi-turn KV reuse (tllm_continue, the history CRC, the console's refusal line:
# measured +866 to +1,086 B across the cases of tests/emu/test_code_flash_estimate.py); +256 B each with
# the rolling context's engine side merged beside it (the EMIT branch, context_shift and the end line's
# shifts: built 78-102 B over the estimate without it); +640 B each with the draft-model engine
# (tllm_config.draft: tllm_model_draft and tllm_init's checks of the draft; built up to 502 B over the
# estimate without it); +128 B each with a draft tree's runtime side (the draft's blob check in tllm_init,
# tllm_model_draft's stream waits, the console's refusal detail: built 74 B over the estimate without it);
# +2,368 B each with sampled requests drafted by a draft model (the draft's distribution, draw and kept q,
# the generalised acceptance and residual draw in tllm_sampler.c, the engine's drafted_token, the draft
# cache's shift under a rolling context: built 518-2,314 B over the estimate without it); +384 B each with a
# vocabulary-pruned draft's engine side (tllm_draft_model_problem's pass over the id tables, their map in
# tllm_model_draft, the refusal of its sampled requests: measured +344 B on a 1-layer DK and QEMU build)
RUNTIME_BYTES = {"cortex-m7": 18_944 + 640 + 128 + 2_368 + 384, "portable": 19_584 + 640 + 128 + 2_368 + 384}
# loop: LAYERS[l], KV[l], the matrix descriptors (measured 120-170 B from dim 64 to SmolLM2's 576)
PER_LAYER_BYTES = {"loop": {"cortex-m7": 176, "portable": 288},
                   "unrolled": {"cortex-m7": 384, "portable": 448}}
STREAM_BYTES = 1_536  # the stream runtime (tllm_stream.h) and the streamed calls of the loop's body
# --stream auto on a small model pins every matrix: the runtime's boot copy of the pins is all that is
# linked (the stream loops are never called, and gc-sections drops them)
STREAM_PINS_ONLY_BYTES = 1_024
# the loop form's streamed calls sit in its body once (measured: 8 and 16 layers, q4x4 and q41x4, the same)
STREAM_PER_LAYER_BYTES = {"loop": 0, "unrolled": 160}
# Batched prefill with a stream: tllm_stream_matmat_* (one out-of-line copy each, TLLM_STREAM_CALL);
# unrolled, each layer's batched calls.
PREFILL_STREAM_BYTES = {"loop": 128, "unrolled": 512}
PREFILL_UNROLLED_PER_LAYER_BYTES = 384
PREFILL_STREAM_UNROLLED_PER_LAYER_BYTES = 96
VERIFY_BYTES = 512  # tllm_model_verify, its descriptor and the engine's per-position accessors (--speculate;
# measured: +420 B on a 24-layer QEMU build with the full sampler)
STREAM_RUN_BYTES = 20  # sizeof(tllm_stream_run): src, stride, len, last_len, count (one run per streamed matrix)
STREAM_PIN_BYTES = 12  # sizeof(tllm_stream_pin): src, len, dst
VOCAB_ALIGN_BYTES = 4  # the byte table is padded to the offsets' alignment
# --context-policy roll: tllm_kv_shift_i8 or _kv4 and context_shift (measured +588 B int8, +524 B int4 on QEMU,
# and the int4 shift's centred path (--kv-center) +228 B of kv_shift_kv4, arm-none-eabi-size at -O2)
ROLL_BYTES = 768
ERROR_BOUND_BYTES = 4 * 1024  # estimate - built, checked by the test above


@dataclass(frozen=True)
class CodeFlash:
    """The estimate, by part, against the board's code region."""

    runtime_bytes: int  # runtime + board + the generated step (the model above, without tables)
    stream_table_bytes: int
    vocab_bytes: int  # 0 when the vocabulary is in the weights blob (or unknown)
    capacity_bytes: int  # the code region's size
    region: str
    unrolled: bool = False  # compile --unroll-layers: the loop form would be smaller
    prefill_bytes: int = 0  # the batched prefill's part of runtime_bytes (--prefill-batch 1 saves it)

    @property
    def total_bytes(self) -> int:
        return self.runtime_bytes + self.stream_table_bytes + self.vocab_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def code_region(board):
    """The board's code flash (None: the host, whose code is the OS's business)."""
    if board is None or not board.is_arm:
        return None
    return next((r for r in board.memory.regions if r.use == "code" and r.kind == "flash"), None)


def _kernel_bytes(step: LoweredStep) -> int:
    """The kernels' own constants (kernels/): each piece of code counted once."""
    total = sum(dict(part for call in step.calls for part in call.args.code_parts()).values())
    if step.kv_bits == 4:
        total += Attention.KV4_CODE_BYTES
    elif step.kv_bits.mixed:
        total += Attention.K8V4_CODE_BYTES
    return total


def _prefill_bytes(step: LoweredStep, form: str, layers: int) -> int:
    """The batched prefill's code: the batched forms of the linears, and with
    a stream tllm_stream_matmat_q4x4."""
    if step.prefill_batch == 1:
        return 0
    streamed = step.stream is not None and step.stream.n_runs > 0
    kernels = sum(dict(part for call in step.body_calls for part in call.args.batched_code_parts()).values())
    total = kernels + (PREFILL_STREAM_BYTES[form] if streamed else 0)
    if form == "unrolled":
        total += (PREFILL_UNROLLED_PER_LAYER_BYTES + (PREFILL_STREAM_UNROLLED_PER_LAYER_BYTES if streamed
                                                      else 0)) * layers
    return total


def layers_share_calls(step: LoweredStep) -> bool:
    """Whether every layer makes the same kernel calls in the same order, as the emitter's one loop over
    the layer table needs (emit/layer_table.py prints every layer's calls otherwise)."""
    per_layer: dict[int, list[str]] = {}
    for call in step.body_calls:
        if call.layer is not None:
            per_layer.setdefault(call.layer, []).append(call.args.c_call().fn)
    return len({tuple(v) for v in per_layer.values()}) <= 1


def _verify_bytes(step: LoweredStep) -> int:
    """Speculative decoding's verification pass: tllm_model_verify and its head's batched forms."""
    if step.speculate is None:
        return 0
    return VERIFY_BYTES + sum(dict(part for call in step.head_calls for part in call.args.verify_code_parts()).values())


def code_flash(step: LoweredStep, board, unroll_layers: bool = False, vocab_bytes: int = 0,
               rolling: bool = False) -> CodeFlash | None:
    """The code-flash estimate of this step (after the stream and prefill
    passes) on this board (None on the host)."""
    region = code_region(board)
    if region is None:
        return None
    kernels = "cortex-m7" if step.kernels == "cortex-m7" else "portable"
    layers = step.config.n_layers
    unrolled = unroll_layers or not layers_share_calls(step)
    form = "unrolled" if unrolled else "loop"
    runtime = RUNTIME_BYTES[kernels] + PER_LAYER_BYTES[form][kernels] * layers + _kernel_bytes(step)
    plan = step.stream
    if plan is not None and plan.n_runs:
        runtime += STREAM_BYTES + STREAM_PER_LAYER_BYTES[form] * layers
    elif plan is not None:
        runtime += STREAM_PINS_ONLY_BYTES
    prefill = _prefill_bytes(step, form, layers) + _verify_bytes(step)
    runtime += ROLL_BYTES if rolling else 0
    tables = STREAM_RUN_BYTES * plan.n_runs + STREAM_PIN_BYTES * len(plan.pinned) if plan is not None else 0
    return CodeFlash(runtime + prefill, tables, vocab_bytes + VOCAB_ALIGN_BYTES if vocab_bytes else 0, region.size,
                     region.name, unroll_layers, prefill)


def check_code_flash(est: CodeFlash | None, board_name: str, streaming: bool) -> None:
    """One line when the image will not fit the code flash: how much over, and what would help."""
    if est is None or est.fits:
        return
    over = est.total_bytes - est.capacity_bytes
    parts = [f"runtime and step {est.runtime_bytes:,} B"]
    if est.stream_table_bytes:
        parts.append(f"stream table {est.stream_table_bytes:,} B")
    if est.vocab_bytes:
        parts.append(f"vocabulary {est.vocab_bytes:,} B")
    if streaming and est.stream_table_bytes >= over:
        fix = "--stream off (the stream table holds a run per streamed matrix and a slot per pinned entry)"
    elif est.prefill_bytes >= over:
        fix = f"--prefill-batch 1 (the batched prefill's kernels are about {est.prefill_bytes:,} B)"
    elif est.unrolled:
        fix = "drop --unroll-layers (one loop over the layer table is smaller) or use a model with fewer layers"
    else:
        fix = "use a model with fewer layers"
    raise UserError(f"code flash: the firmware needs about {est.total_bytes:,} B ({', '.join(parts)}; "
                    f"estimated, plan/codesize.py) but board {board_name}'s {est.region} holds "
                    f"{est.capacity_bytes:,} B (over by {over:,} B): {fix}")
