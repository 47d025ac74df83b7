"""The plan stage on its own: model + board + options -> MemoryPlan, with
no tokenizer and no weight quantization, so `tinyllm-gen plan` answers
"does it fit?" in a fraction of a second even for a 15M-parameter model.

compile.py calls `plan_for` too, so `plan` and `compile` cannot disagree."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .board import Board
from .errors import UserError
from .ir import Graph
from .plan.codesize import CodeFlash, check_code_flash, code_flash
from .plan.flash import weights_blob_bytes
from .plan.memory import GraphShape, MemoryPlan, auto_max_seq, largest_fitting_seq, plan_memory
from .plan.regions import board_memory, check_budget
from .vocab import vocab_goes_to_weights, vocab_nbytes

AUTO = "auto"


@dataclass(frozen=True)
class SeqNote:
    """What --max-seq auto chose, said on demand: the other KV precision's
    context costs a search of plans, and plan_prefill makes several
    PlanResults of which one is shown."""

    shape: GraphShape | None = None  # None: the context was given, nothing to say
    chosen: int = 0
    budget: int = 0
    board: Board | None = None

    def text(self) -> str:
        return trade_off(self.shape, self.chosen, self.budget, self.board) if self.shape is not None else ""


@dataclass(frozen=True)
class PlanResult:
    plan: MemoryPlan
    weights_bytes: int
    weights_capacity: int | None  # bytes the board holds for weights (None: no limit)
    seq_note: SeqNote  # what --max-seq auto chose and what the other KV precision would give (trade_off)
    group_size: int = 32
    method: str = "rtn"  # the weight scheme (quant/formats.py): "gguf" keeps 32-weight blocks, no group choice
    vocab_in_weights: bool = False  # the vocabulary goes into the weights blob (vocab.py); compile follows this
    code: CodeFlash | None = None  # the code-flash estimate (plan/codesize.py); None on the host
    streaming: bool = False  # --stream is on (the code-flash fix names it)

    @property
    def trade_off(self) -> str:
        """What --max-seq auto chose and what the other KV precision would give ("" otherwise)."""
        return self.seq_note.text()
    prefill_batch: int = 1  # prompt tokens per weight pass (prefill.py plan_prefill chose it)
    prefill_why: str = ""  # how it was chosen


def model_context(graph: Graph, requested: int | None) -> int:
    """The context to compile for: the model's own (max_position_embeddings,
    or a Phi-3 sliding window), or a smaller one the user asked for."""
    ctx = graph.config.max_seq
    if requested is None:
        return ctx
    if requested > ctx:
        raise UserError(f"--max-seq {requested} exceeds the model's context of {ctx} tokens: use at most {ctx}")
    return requested


def trade_off(shape: GraphShape, chosen: int, budget: int, board: Board) -> str:
    other = 4 if shape.kv_bits == 8 else 8
    alt = largest_fitting_seq(replace(shape, kv_bits=other), budget, board.stack_bytes,
                              shape.config.max_seq, board_memory(board))
    alt_text = f"{alt} tokens" if alt else "nothing"
    return (f"--max-seq auto: {chosen} tokens with int{shape.kv_bits} KV in {budget:,} B "
            f"(int{other} KV would fit {alt_text}; the model's context is {shape.config.max_seq})")


def resolve_seq(shape: GraphShape, requested: int | str | None, budget: int, board: Board) -> tuple[int, SeqNote]:
    if requested == AUTO:
        seq = auto_max_seq(shape, shape.config.max_seq, budget, board.stack_bytes, board=board)
        return seq, SeqNote(shape, seq, budget, board)
    return model_context(shape.graph, requested), SeqNote()


def plan_for(shape: GraphShape, requested_seq: int | str | None, budget: int, board: Board) -> PlanResult:
    """Check the budget against the board, pick the context, plan, and check
    the weights fit the board's weights storage."""
    check_budget(board_memory(board), budget)
    seq, note = resolve_seq(shape, requested_seq, budget, board)
    plan = plan_memory(shape, seq, budget, board.stack_bytes, board=board)  # the board's stack (board.json)
    code = code_flash(shape, seq, board)  # without the vocabulary: it goes where it fits
    vocab = vocab_nbytes(*shape.vocab) if shape.vocab is not None else 0
    external_vocab = shape.vocab is not None and vocab_goes_to_weights(board, vocab, code.total_bytes if code else 0)
    if code is not None and shape.vocab is not None and not external_vocab:
        code = code_flash(shape, seq, board, vocab)
    wbytes = weights_blob_bytes(shape, seq, dict(shape.kept), shape.vocab if external_vocab else None)
    return PlanResult(plan, wbytes, board.weights.max_bytes, note, shape.group_size, shape.method, external_vocab,
                      code, shape.stream is not None and shape.stream.mode != "off")


def check_code(result: PlanResult, board_name: str) -> None:
    """One line when the image will overflow the board's code flash (before the linker says so)."""
    check_code_flash(result.code, board_name, result.streaming)


def check_weights(result: PlanResult, board_name: str) -> None:
    limit = result.weights_capacity
    if limit is not None and result.weights_bytes > limit:
        hint = " or --group-size 128 (fewer scales)" if result.group_size < 128 and result.method != "gguf" else ""
        raise UserError(f"weights are {result.weights_bytes:,} B but board {board_name} holds {limit:,} B of "
                        f"weights (over by {result.weights_bytes - limit:,} B): use a smaller model{hint}")
