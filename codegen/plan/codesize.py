"""Internal (code) flash from shapes: what `plan` and `compile` check before
the linker would say `region FLASH overflowed`.

The model, in bytes of the board's code region (vectors, .text, .rodata,
the .data load image and the zero table, as plan/elfsize.py attributes
arm-none-eabi-size's sections):

    RUNTIME[kernel set]                   runtime, console, board code, vectors, the step's loop
  + PER_LAYER[form][kernel set] x layers  a layer's table entry and descriptors (loop), or its calls (unrolled)
  + KV4 when --kv-bits 4                  the int4 KV kernels
  + GREEDY when --sampler greedy          the streamed argmax
  + STREAM + STREAM_PER_LAYER[form] x layers  the stream runtime and streamed calls (--stream)
  + PREFILL (+ per layer unrolled, + the stream's) when prefill_batch > 1: the batched kernels and tllm_model_prefill
  + 8 x stream chunks + 12 x pinned       the stream tables (tllm_stream.h), exact
  + the vocabulary when it stays in code flash: its text and offsets, exact

The constants are measured on the STM32H750B-DK build (the largest vectors
and board code of the Cortex-M boards; QEMU's image is about 750 B smaller)
with arm-none-eabi-gcc 12.2 -O2, rounded up so the estimate is never below
the build: a layer's code grows a little with the model's dimensions (wider
immediates), so the per-layer figures are those of SmolLM2-135M (dim 576),
the widest model built here.  tests/emu/test_code_flash_estimate.py builds
models of 1 to 24 layers with each kernel set, KV precision, sampler, stream
mode, board kind and step form (the loop over LAYERS, or --unroll-layers)
and checks 0 <= estimate - built <= ERROR_BOUND_BYTES.  Measured with the
loop form (the default) and unrolled, all nine builds land in the bound;
the tightest were about 0.1 KiB (one layer) and 3.9 KiB (16 layers
unrolled and streamed) above, so a runtime that grows by more than about
0.1 KiB moves RUNTIME_BYTES with it.  Unrolled SmolLM2 on the DK was 948 B above with its
GGUF blocks kept (28,620 B built) and 1,256 B above re-rounded with
--stream all (87,624 B built, 43,504 B of it the stream table); the loop
form of the same builds is about 9 KiB smaller (19,252 B kept).  When the runtime or the generated step changes size, that test
says by how much and these constants follow.  Batched prefill (the default, P = 4 where it fits) added
15.5 KiB to every Cortex-M7 image (1.7 KiB portable), fitted on the same nine builds with the stream chunk the
timing model picks (stream.chunk_sizes: smaller chunks, so more matrices span several and keep their loops when
unrolled): the tightest margins are now 0.25 KiB (the untied qwen2 streamed, unrolled), 0.3 KiB (one layer) and
0.36 KiB (the same qwen2 streamed, loop)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError

RUNTIME_BYTES = {"cortex-m7": 21_888, "portable": 16_256}
PER_LAYER_BYTES = {"loop": {"cortex-m7": 224, "portable": 288},  # LAYERS[l], KV[l], the matrix descriptors
                   "unrolled": {"cortex-m7": 384, "portable": 448}}
KV4_BYTES = 1_024
GREEDY_BYTES = 256
STREAM_BYTES = 1_536
STREAM_PER_LAYER_BYTES = {"loop": 160, "unrolled": 432}
# Batched prefill (prefill_batch > 1, codegen/prefill.py): the batched kernels (the M7's nine assembly
# variants of tllm_matmat_q4x4 are most of it), the x16b writers and tllm_model_prefill's loop; unrolled,
# each layer's batched calls; with a stream, tllm_stream_matmat_q4x4 inlined per matrix.
PREFILL_BYTES = {"cortex-m7": 15_872, "portable": 2_048}
PREFILL_UNROLLED_PER_LAYER_BYTES = 640
PREFILL_STREAM_BYTES = {"loop": 1_536, "unrolled": 2_560}  # unrolled: a matrix of several chunks keeps its loops
PREFILL_STREAM_UNROLLED_PER_LAYER_BYTES = 320
STREAM_CHUNK_BYTES = 8  # sizeof(tllm_stream_chunk): src, len
STREAM_PIN_BYTES = 12  # sizeof(tllm_stream_pin): src, len, dst
VOCAB_ALIGN_BYTES = 4  # the byte table is padded to the offsets' alignment
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


def stream_tables(shape, max_seq: int) -> tuple[int, int]:
    """(chunks, pinned entries) of the stream the step will have."""
    if shape.stream is None or shape.stream.mode == "off":
        return 0, 0
    from ..lower import lower_step
    from ..stream import stream_step

    plan = stream_step(lower_step(shape, max_seq, shape.sampler), shape.stream).stream
    return plan.n_chunks, len(plan.pinned)


def code_flash(shape, max_seq: int, board, vocab_bytes: int = 0) -> CodeFlash | None:
    """The code-flash estimate of this shape on this board (None on the host)."""
    region = code_region(board)
    if region is None:
        return None
    kernels = "cortex-m7" if shape.kernels == "cortex-m7" else "portable"
    layers = shape.config.n_layers
    form = "unrolled" if shape.unroll_layers else "loop"
    runtime = RUNTIME_BYTES[kernels] + PER_LAYER_BYTES[form][kernels] * layers
    runtime += KV4_BYTES if shape.kv_bits == 4 else 0
    runtime += GREEDY_BYTES if shape.sampler == "greedy" else 0
    chunks, pins = stream_tables(shape, max_seq)
    streamed = shape.stream is not None and shape.stream.mode != "off"
    if streamed:
        runtime += STREAM_BYTES + STREAM_PER_LAYER_BYTES[form] * layers
    prefill = 0
    if shape.prefill_batch > 1:
        prefill = PREFILL_BYTES[kernels] + (PREFILL_STREAM_BYTES[form] if streamed else 0)
        if shape.unroll_layers:
            prefill += (PREFILL_UNROLLED_PER_LAYER_BYTES + (PREFILL_STREAM_UNROLLED_PER_LAYER_BYTES if streamed
                                                            else 0)) * layers
    return CodeFlash(runtime + prefill, STREAM_CHUNK_BYTES * chunks + STREAM_PIN_BYTES * pins,
                     vocab_bytes + VOCAB_ALIGN_BYTES if vocab_bytes else 0, region.size, region.name,
                     shape.unroll_layers, prefill)


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
        fix = "a larger --stream-chunk (fewer table entries) or --stream off"
    elif est.prefill_bytes >= over:
        fix = f"--prefill-batch 1 (the batched prefill's kernels are about {est.prefill_bytes:,} B)"
    elif est.unrolled:
        fix = "drop --unroll-layers (one loop over the layer table is smaller) or use a model with fewer layers"
    else:
        fix = "use a model with fewer layers"
    raise UserError(f"code flash: the firmware needs about {est.total_bytes:,} B ({', '.join(parts)}; "
                    f"estimated, plan/codesize.py) but board {board_name}'s {est.region} holds "
                    f"{est.capacity_bytes:,} B (over by {over:,} B): {fix}")
