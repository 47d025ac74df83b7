"""One kernel call as a typed C call: the function and each argument with
what it is (a planned buffer, a weight descriptor, a shape number ...).

The unrolled step prints these as they are; layer_table.py compares them
position by position across layers to decide which arguments become fields
of the per-layer descriptor table.  Keeping the argument's record here (not
only its text) is what lets that comparison ask "same buffer offset?"
instead of parsing C strings."""
from __future__ import annotations

from dataclasses import dataclass

from ..reference.exact import c_float_literal
from ..lower import (Add, ArgmaxClassifier, Attention, TopKClassifier, BufferRef, EmbedGGUF, EmbedQ4, FcS4PcRef, FcS4PerChannel,
                     GGUFRef, KernelCall, MatvecGGUF, MatvecQ4, MatvecQ4x4, Q4Ref, QuantizeI8, QuantizeStaticS8,
                     QuantizeX16, RmsNorm, RmsNormX16, Rope, SiluMul, SiluMulPairsX16, VectorRef)
from ..stream import StreamedArgmaxQ4x4, StreamedEmbedQ4x4, StreamedMatvecQ4x4, StreamedTopKQ4x4
from .names import buffer_macro, fc_name, matrix_name, vector_macro

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
    lane: str = ""     # batched prefill: " + p * 64", token p's place in a P-token buffer (prefill_c_call)


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


def _buf(ref: BufferRef) -> CArg:
    return CArg(buffer_macro(ref.name), BUFFER, ref, f"{ref.ctype} *", ref.name)


def _matrix(ref: Q4Ref | GGUFRef) -> CArg:
    ctype = ("const tllm_gguf_matrix *" if isinstance(ref, GGUFRef) else
             "const tllm_q4x4_matrix *" if ref.layout == "q4x4" else "const tllm_q4_matrix *")
    return CArg("&" + matrix_name(ref.name), WEIGHT, ref, ctype, ref.name)


def _vec(ref: VectorRef | None) -> CArg:
    if ref is None:
        return CArg("0", FIXED)
    return CArg(vector_macro(ref.name), WEIGHT, ref, "const float *", ref.name)


def _fc(ref: FcS4PcRef) -> CArg:
    return CArg("&" + fc_name(ref.name), WEIGHT, ref, "const tllm_fc_s4pc_layer *", ref.name + ".fc")


def _fixed(text: str) -> CArg:
    return CArg(text, FIXED)


def _shape(n: int) -> CArg:
    return CArg(str(n), SHAPE, n)


def _param(text: str, value, ctype: str, name: str) -> CArg:
    return CArg(text, PARAM, value, ctype, name)


def _eps(a: RmsNorm | RmsNormX16) -> CArg:
    return _fixed(a.eps_name or c_float_literal(a.eps))


def _matvec_args(a: MatvecQ4 | MatvecQ4x4 | MatvecGGUF) -> tuple[str, list[CArg]]:
    """(layout suffix, arguments) of a matvec, shared by tllm_matvec_* and
    the greedy builds' tllm_argmax_* (which add the chunk size)."""
    if isinstance(a, MatvecGGUF):
        return a.matrix.suffix, [_matrix(a.matrix), _buf(a.xq), _buf(a.xs), _vec(a.bias), _buf(a.out)]
    if isinstance(a, MatvecQ4x4):
        return "q4x4", [_matrix(a.matrix), _buf(a.x_stream), _vec(a.bias), _buf(a.out)]
    return "q4", [_matrix(a.matrix), _buf(a.xq), _buf(a.xs), _vec(a.bias), _buf(a.out)]


def _stream_call(a) -> CCall | None:
    """Weight streaming (stream.py): the call over the stream (tllm_stream.h)."""
    if isinstance(a, (StreamedMatvecQ4x4, StreamedArgmaxQ4x4)):
        mv = a.matvec if isinstance(a, StreamedMatvecQ4x4) else a.argmax.matvec
        rows = _param(str(a.chunk_rows), a.chunk_rows, "int32_t", mv.matrix.name + ".chunk_rows")
        args = [_fixed("&weight_stream"), _matrix(mv.matrix), rows, _buf(mv.x_stream), _vec(mv.bias), _buf(mv.out)]
        if isinstance(a, StreamedMatvecQ4x4):
            return CCall("tllm_stream_matvec_q4x4", tuple(args))
        return CCall("tllm_stream_argmax_q4x4", tuple(args + [_shape(a.argmax.chunk_rows)]), "greedy_token = ")
    if isinstance(a, StreamedTopKQ4x4):  # the classifier's chunks into the running top-K set (tllm_topk.h)
        mv = a.topk.matvec
        rows = _param(str(a.chunk_rows), a.chunk_rows, "int32_t", mv.matrix.name + ".chunk_rows")
        return CCall("tllm_stream_topk_q4x4", (_fixed("&weight_stream"), _matrix(mv.matrix), rows, _buf(mv.x_stream),
                                               _vec(mv.bias), _buf(mv.out), _shape(a.topk.chunk_rows),
                                               _fixed("&topk_set")))
    if isinstance(a, StreamedEmbedQ4x4):
        return CCall("tllm_stream_embed_q4x4", (_fixed("&weight_stream"), _matrix(a.table),
                                                _param(f"{a.copy_bytes}u", a.copy_bytes, "uint32_t",
                                                       a.table.name + ".copy_bytes"),
                                                _fixed("token"), _buf(a.embed.out)))
    return None


def c_call(call: KernelCall) -> CCall:
    a = call.args
    streamed = _stream_call(a)
    if streamed is not None:
        return streamed
    if isinstance(a, EmbedGGUF):
        return CCall(f"tllm_embed_{a.table.suffix}", (_matrix(a.table), _fixed("token"), _buf(a.out)))
    if isinstance(a, EmbedQ4):
        fn = "tllm_embed_q4x4" if a.table.layout == "q4x4" else "tllm_embed_q4"
        return CCall(fn, (_matrix(a.table), _fixed("token"), _buf(a.out)))
    if isinstance(a, QuantizeStaticS8):
        scale = _param(c_float_literal(a.inv_scale), a.inv_scale, "float", a.x.name + ".inv_scale")
        return CCall("tllm_quantize_static_s8", (_buf(a.x), _shape(a.n), scale, _buf(a.q)))
    if isinstance(a, FcS4PerChannel):
        return CCall("tllm_fc_s4pc", (_fc(a.layer), _buf(a.xq), _buf(a.q_out), _buf(a.out)))
    if isinstance(a, QuantizeX16):
        return CCall("tllm_quantize_x16", (_buf(a.x), _shape(a.n), _shape(a.group), _buf(a.stream)))
    if isinstance(a, ArgmaxClassifier):
        layout, args = _matvec_args(a.matvec)
        return CCall(f"tllm_argmax_{layout}", tuple(args + [_shape(a.chunk_rows)]), "greedy_token = ")
    if isinstance(a, TopKClassifier):  # tllm_topk.h
        layout, args = _matvec_args(a.matvec)
        return CCall(f"tllm_topk_{layout}", tuple(args + [_shape(a.chunk_rows), _fixed("&topk_set")]))
    if isinstance(a, (MatvecQ4, MatvecQ4x4, MatvecGGUF)):
        layout, args = _matvec_args(a)
        return CCall(f"tllm_matvec_{layout}", tuple(args))
    if isinstance(a, RmsNorm):
        return CCall("tllm_rmsnorm", (_buf(a.x), _vec(a.weight), _fixed("TLLM_DIM"), _eps(a), _buf(a.out)))
    if isinstance(a, SiluMulPairsX16):
        return CCall("tllm_silu_mul_pairs_x16", (_buf(a.gu), _shape(a.n), _shape(a.group), _buf(a.stream)))
    if isinstance(a, RmsNormX16):
        return CCall("tllm_rmsnorm_x16", (_buf(a.x), _vec(a.weight), _fixed("TLLM_DIM"), _eps(a),
                                          _fixed("TLLM_GROUP_SIZE"), _buf(a.stream)))
    if isinstance(a, QuantizeI8):
        return CCall("tllm_quantize_i8", (_buf(a.x), _shape(a.n), _shape(a.group), _buf(a.q), _buf(a.scales)))
    if isinstance(a, Rope):
        return CCall("tllm_rope", (_buf(a.x), _shape(a.n_heads), _shape(a.head_dim), _fixed("rope_cos"),
                                   _fixed("rope_sin")))
    if isinstance(a, Attention):
        fn, table = ("tllm_attention_kv4", "KV4") if a.kv_bits == 4 else ("tllm_attention_i8", "KV")
        kv = CArg(f"&{table}[{a.layer}]", KV, a.layer, name=table)  # name: the table the loop indexes with l
        return CCall(fn, (_fixed("&ATTENTION_SHAPE"), _buf(a.q), _buf(a.k), _buf(a.v), kv, _fixed("pos"), _buf(a.q8),
                          _buf(a.scores), _buf(a.out)))
    if isinstance(a, Add):
        return CCall("tllm_add", (_buf(a.a), _buf(a.b), _shape(a.n)))
    if isinstance(a, SiluMul):
        return CCall("tllm_silu_mul", (_buf(a.gate), _buf(a.up), _shape(a.n)))
    raise AssertionError(f"no C form for {type(a).__name__}")


# --- batched prefill (prefill.py): the body's calls for n tokens at once ------

# A per-token call's position-dependent arguments: token p is at pos + p.
_PER_TOKEN_FIXED = {"token": "tokens[p]", "pos": "pos + p", "rope_cos": "rope_cos + p * (TLLM_HEAD_DIM / 2)",
                    "rope_sin": "rope_sin + p * (TLLM_HEAD_DIM / 2)"}


def with_lane(arg: CArg, batched: frozenset, lane: str) -> CArg:
    """arg at token `lane`'s place when it is a P-token buffer."""
    if arg.kind == BUFFER and arg.ref.name in batched:
        return CArg(arg.text, arg.kind, arg.ref, arg.ctype, arg.name, f" + {lane} * {arg.ref.count}")
    return arg


def _x16b(fn: str, args: tuple[CArg, ...], batched: frozenset) -> CCall:
    """An x16 producer writing token p's places of the batch's x16b stream:
    the stream is its last argument, the batch size and p go before it."""
    *ins, stream = args
    return CCall(fn + "b", tuple(with_lane(a, batched, "p") for a in ins) + (_fixed("n"), _fixed("p"), stream),
                 per_token=True)


def prefill_c_call(call: KernelCall, batched: frozenset, chunk_out: BufferRef | None) -> CCall:
    """The call in tllm_model_prefill: a linear once for the n tokens
    (tllm_matmat_*), anything else once per token on that token's values."""
    a = call.args
    if isinstance(a, StreamedMatvecQ4x4):
        mv = a.matvec
        rows = _param(str(a.chunk_rows), a.chunk_rows, "int32_t", mv.matrix.name + ".chunk_rows")
        return CCall("tllm_stream_matmat_q4x4", (_fixed("&weight_stream"), _matrix(mv.matrix), rows,
                                                 _buf(mv.x_stream), _fixed("n"), _vec(mv.bias), _buf(chunk_out),
                                                 _buf(mv.out)))
    if isinstance(a, MatvecQ4x4):
        return CCall("tllm_matmat_q4x4", (_matrix(a.matrix), _buf(a.x_stream), _fixed("n"), _vec(a.bias),
                                          _buf(a.out)))
    if isinstance(a, (MatvecQ4, MatvecGGUF)):
        layout, _ = _matvec_args(a)
        return CCall(f"tllm_matmat_{layout}", (_matrix(a.matrix), _buf(a.xq), _buf(a.xs), _fixed("n"), _vec(a.bias),
                                              _buf(a.out)))
    one = c_call(call)
    if isinstance(a, (QuantizeX16, RmsNormX16, SiluMulPairsX16)):
        return _x16b(one.fn, one.args, batched)
    args = tuple(with_lane(_fixed(_PER_TOKEN_FIXED[x.text]) if x.kind == FIXED and x.text in _PER_TOKEN_FIXED
                           else x, batched, "p") for x in one.args)
    return CCall(one.fn, args, one.assign, per_token=True)


def last_token_c_call(call: KernelCall, batched: frozenset) -> CCall:
    """A head call in tllm_model_prefill: on the batch's last token."""
    one = c_call(call)
    return CCall(one.fn, tuple(with_lane(x, batched, "(n - 1)") for x in one.args), one.assign)
