"""One kernel call as a typed C call: the function and each argument with
what it is (a planned buffer, a weight descriptor, a shape number ...).

The unrolled step prints these as they are; emit/layer_table.py compares
them position by position across layers to decide which arguments become
fields of the per-layer descriptor table.  Keeping the argument's record
here (not only its text) is what lets that comparison ask "same buffer
offset?" instead of parsing C strings."""
from __future__ import annotations

from dataclasses import dataclass

from ..reference.exact import c_float_literal
from .c_names import buffer_macro, fc_name, matrix_name, vector_macro
from .refs import BufferRef, FcS4PcRef, GGUFRef, Q4Ref, VectorRef

LINE_WIDTH = 120  # generated C fits a screen
PER_TOKEN_LOOP = "for (int32_t p = 0; p < n; p++)"  # tllm_model_prefill: token p of the n in this batch

# CArg.kind:
FIXED = "fixed"    # text that is the same wherever the call is: TLLM_DIM, pos, rope_cos, a 0 bias
SHAPE = "shape"    # an int giving the call's shape: layers must agree on it to share one loop body
PARAM = "param"    # a number that may differ per layer (a stream's chunk rows, a static int8 scale)
BUFFER = "buffer"  # a planned arena buffer (ref: BufferRef)
WEIGHT = "weight"  # a weight descriptor or vector (ref: Q4Ref, GGUFRef, VectorRef, FcS4PcRef)
KV = "kv"          # the layer's KV cache entry (ref: the layer index)


@dataclass(frozen=True)
class CArg:
    text: str          # as the unrolled step prints it
    kind: str          # one of the kinds above
    ref: object = None  # the record it comes from (or the number, for SHAPE / PARAM / KV)
    ctype: str = ""    # its C type as a descriptor-table field (BUFFER, WEIGHT, PARAM)
    name: str = ""     # the IR name a field is named after (PARAM: "<buffer or matrix>.<what>")
    lane: str = ""     # batched prefill: " + p * 64", token p's place in a P-token buffer


@dataclass(frozen=True)
class CCall:
    fn: str
    args: tuple[CArg, ...]
    assign: str = ""  # "greedy_token = " for the greedy classifier
    per_token: bool = False  # batched prefill: the call runs once per token of the batch, p = 0..n-1

    def text(self, args: list[str] | None = None, indent: int = 4) -> str:
        """The statement, wrapped after commas (continuation under the
        opening parenthesis) where it would pass LINE_WIDTH; a per-token
        call under its `for` over the batch.  args: each argument's text
        without its lane (layer_table.py substitutes the per-layer ones)."""
        texts = [a.text + a.lane for a in self.args] if args is None else \
            [t + a.lane for t, a in zip(args, self.args)]
        if not self.per_token:
            return packed(f"{self.assign}{self.fn}(", texts, ");", indent)
        call = packed(f"{self.assign}{self.fn}(", texts, ");", indent + 4)
        return f"{PER_TOKEN_LOOP}\n{' ' * (indent + 4)}{call}"


def packed(head: str, items: list[str], close: str, indent: int = 0) -> str:
    """items joined by ", " after head and ended by close, wrapped after a
    comma (continuation under head's end) where a line at this indent would
    pass LINE_WIDTH; lines after the first are joined with the indent."""
    lines, cur = [], head
    for i, t in enumerate(items):
        piece = t + (", " if i + 1 < len(items) else close)
        if cur != head and cur.strip() and indent + len(cur) + len(piece.rstrip()) > LINE_WIDTH:
            lines.append(cur.rstrip())
            cur = " " * len(head)
        cur += piece
    lines.append(cur)
    return ("\n" + " " * indent).join(lines)


def block_comment(text: str, indent: int = 4) -> str:
    """Lines of text (split at "\\n", and at spaces where a line would pass
    LINE_WIDTH) as one C block comment at this indent: `/* text */` when it fits."""
    lines = []
    for para in text.split("\n"):
        lines.append("")
        for word in para.split(" "):
            if lines[-1] and indent + 3 + len(lines[-1]) + 1 + len(word) > LINE_WIDTH - 3:
                lines.append("")
            lines[-1] = f"{lines[-1]} {word}" if lines[-1] else word
    return ("\n" + " " * indent).join(["/* " + lines[0]] + [" * " + ln for ln in lines[1:]]) + " */"


# --- arguments ---------------------------------------------------------------

def buf(ref: BufferRef) -> CArg:
    return CArg(buffer_macro(ref.name), BUFFER, ref, f"{ref.ctype} *", ref.name)


def matrix(ref: Q4Ref | GGUFRef) -> CArg:
    ctype = ("const tllm_ggufx4_matrix *" if isinstance(ref, GGUFRef) and ref.tiled else
             "const tllm_gguf_matrix *" if isinstance(ref, GGUFRef) else
             "const tllm_q4x4_matrix *" if ref.layout == "q4x4" else "const tllm_q4_matrix *")
    return CArg("&" + matrix_name(ref.name), WEIGHT, ref, ctype, ref.name)


def vec(ref: VectorRef | None) -> CArg:
    if ref is None:
        return CArg("0", FIXED)
    return CArg(vector_macro(ref.name), WEIGHT, ref, "const float *", ref.name)


def fc(ref: FcS4PcRef) -> CArg:
    return CArg("&" + fc_name(ref.name), WEIGHT, ref, "const tllm_fc_s4pc_layer *", ref.name + ".fc")


def fixed(text: str) -> CArg:
    return CArg(text, FIXED)


def shape(n: int) -> CArg:
    return CArg(str(n), SHAPE, n)


def param(text: str, value, ctype: str, name: str) -> CArg:
    return CArg(text, PARAM, value, ctype, name)


def chunk_rows_param(matrix_ref: Q4Ref | GGUFRef, rows: int) -> CArg:
    """A streamed call's rows per chunk: a per-layer field where layers differ."""
    return param(str(rows), rows, "int32_t", matrix_ref.name + ".chunk_rows")


def group_arg(group: int) -> CArg:
    """The activations' group size: the model's (lowering quantizes every activation with it), by its name."""
    return CArg("TLLM_GROUP_SIZE", SHAPE, group)


def float_param(value, name: str) -> CArg:
    return param(c_float_literal(value), value, "float", name)


# --- batched prefill: token p's place in a P-token buffer ---------------------

# A per-token call's position-dependent arguments: token p is at pos + p.
PER_TOKEN_FIXED = {"token": "tokens[p]", "pos": "pos + p", "rope_cos": "rope_cos + p * (TLLM_HEAD_DIM / 2)",
                   "rope_sin": "rope_sin + p * (TLLM_HEAD_DIM / 2)"}


def with_lane(arg: CArg, batched: frozenset, lane: str) -> CArg:
    """arg at token `lane`'s place when it is a P-token buffer."""
    if arg.kind == BUFFER and arg.ref.name in batched:
        return CArg(arg.text, arg.kind, arg.ref, arg.ctype, arg.name, f" + {lane} * {arg.ref.count}")
    return arg


def per_token(one: CCall, batched: frozenset) -> CCall:
    """A call of the decode step run once per token of the batch, on that token's values."""
    args = tuple(with_lane(fixed(PER_TOKEN_FIXED[x.text]) if x.kind == FIXED and x.text in PER_TOKEN_FIXED
                           else x, batched, "p") for x in one.args)
    return CCall(one.fn, args, one.assign, per_token=True)


def last_token(one: CCall, batched: frozenset) -> CCall:
    """A head call in tllm_model_prefill: on the batch's last token."""
    return CCall(one.fn, tuple(with_lane(x, batched, "(n - 1)") for x in one.args), one.assign)


def x16_batched(one: CCall, batched: frozenset) -> CCall:
    """An x16 producer writing token p's places of the batch's x16b stream:
    the stream is its last argument, the batch size and p go before it."""
    *ins, stream = one.args
    return CCall(one.fn + "b", tuple(with_lane(a, batched, "p") for a in ins) + (fixed("n"), fixed("p"), stream),
                 per_token=True)
