"""Python logic the templates call: one C statement or comment per call.

Templates stay loops over precomputed data; every string built here is
tested through the generated C (tests/host, tests/emu) and tests/unit/test_determinism.py."""
from __future__ import annotations

from ..exact import c_float_literal
from ..lower import (Add, ArgmaxClassifier, Attention, TopKClassifier, BufferRef, EmbedGGUF, EmbedQ4, GGUFRef, KernelCall, MatvecGGUF,
                     MatvecQ4, MatvecQ4x4,
                     QuantizeI8, Q4Ref, QuantizeX16, Rope, RmsNorm, SiluMul, FcS4PerChannel, FcS4PcRef,
                     QuantizeStaticS8, RmsNormX16, SiluMulPairsX16)
from ..stream import StreamedArgmaxQ4x4, StreamedEmbedQ4x4, StreamedMatvecQ4x4, StreamedTopKQ4x4
from .names import buffer_macro, ident, matrix_name, vector_macro


def _b(ref: BufferRef) -> str:
    return buffer_macro(ref.name)


def _matvec_call(a: MatvecQ4 | MatvecQ4x4 | MatvecGGUF) -> tuple[str, str]:
    """(layout suffix, C arguments) of a matvec, shared by tllm_matvec_* and
    the greedy builds' tllm_argmax_* (which add the chunk size)."""
    bias = vector_macro(a.bias.name) if a.bias else "0"
    if isinstance(a, MatvecGGUF):
        return a.matrix.suffix, f"&{matrix_name(a.matrix.name)}, {_b(a.xq)}, {_b(a.xs)}, {bias}, {_b(a.out)}"
    if isinstance(a, MatvecQ4x4):
        return "q4x4", f"&{matrix_name(a.matrix.name)}, {_b(a.x_stream)}, {bias}, {_b(a.out)}"
    return "q4", f"&{matrix_name(a.matrix.name)}, {_b(a.xq)}, {_b(a.xs)}, {bias}, {_b(a.out)}"


def c_stream_statement(a) -> str | None:
    """Weight streaming (stream.py): the call over the stream (tllm_stream.h)."""
    if isinstance(a, (StreamedMatvecQ4x4, StreamedArgmaxQ4x4)):
        mv = a.matvec if isinstance(a, StreamedMatvecQ4x4) else a.argmax.matvec
        bias = vector_macro(mv.bias.name) if mv.bias else "0"
        args = f"&weight_stream, &{matrix_name(mv.matrix.name)}, {a.chunk_rows}, {_b(mv.x_stream)}, {bias}, {_b(mv.out)}"
        if isinstance(a, StreamedMatvecQ4x4):
            return f"tllm_stream_matvec_q4x4({args});"
        return f"greedy_token = tllm_stream_argmax_q4x4({args}, {a.argmax.chunk_rows});"
    if isinstance(a, StreamedTopKQ4x4):
        mv = a.topk.matvec
        bias = vector_macro(mv.bias.name) if mv.bias else "0"
        return (f"tllm_stream_topk_q4x4(&weight_stream, &{matrix_name(mv.matrix.name)}, {a.chunk_rows}, "
                f"{_b(mv.x_stream)}, {bias}, {_b(mv.out)}, {a.topk.chunk_rows}, &topk_set);")
    if isinstance(a, StreamedEmbedQ4x4):
        return f"tllm_stream_embed_q4x4(&weight_stream, &{matrix_name(a.table.name)}, {a.copy_bytes}u, token, {_b(a.embed.out)});"
    return None


def c_statement(call: KernelCall) -> str:
    a = call.args
    streamed = c_stream_statement(a)
    if streamed is not None:
        return streamed
    if isinstance(a, EmbedGGUF):
        return f"tllm_embed_{a.table.suffix}(&{matrix_name(a.table.name)}, token, {_b(a.out)});"
    if isinstance(a, EmbedQ4):
        fn = "tllm_embed_q4x4" if a.table.layout == "q4x4" else "tllm_embed_q4"
        return f"{fn}(&{matrix_name(a.table.name)}, token, {_b(a.out)});"
    if isinstance(a, QuantizeStaticS8):
        return f"tllm_quantize_static_s8({_b(a.x)}, {a.n}, {c_float_literal(a.inv_scale)}, {_b(a.q)});"
    if isinstance(a, FcS4PerChannel):
        return f"tllm_fc_s4pc(&{fc_name(a.layer.name)}, {_b(a.xq)}, {_b(a.q_out)}, {_b(a.out)});"
    if isinstance(a, QuantizeX16):
        return f"tllm_quantize_x16({_b(a.x)}, {a.n}, {a.group}, {_b(a.stream)});"
    if isinstance(a, ArgmaxClassifier):
        layout, args = _matvec_call(a.matvec)
        return f"greedy_token = tllm_argmax_{layout}({args}, {a.chunk_rows});"
    if isinstance(a, TopKClassifier):  # tllm_topk.h
        layout, args = _matvec_call(a.matvec)
        return f"tllm_topk_{layout}({args}, {a.chunk_rows}, &topk_set);"
    if isinstance(a, (MatvecQ4, MatvecQ4x4, MatvecGGUF)):
        layout, args = _matvec_call(a)
        return f"tllm_matvec_{layout}({args});"
    if isinstance(a, RmsNorm):
        return (f"tllm_rmsnorm({_b(a.x)}, {vector_macro(a.weight.name)}, TLLM_DIM, "
                f"{a.eps_name or c_float_literal(a.eps)}, {_b(a.out)});")
    if isinstance(a, SiluMulPairsX16):
        return f"tllm_silu_mul_pairs_x16({_b(a.gu)}, {a.n}, {a.group}, {_b(a.stream)});"
    if isinstance(a, RmsNormX16):
        return (f"tllm_rmsnorm_x16({_b(a.x)}, {vector_macro(a.weight.name)}, TLLM_DIM, "
                f"{a.eps_name or c_float_literal(a.eps)}, TLLM_GROUP_SIZE, {_b(a.stream)});")
    if isinstance(a, QuantizeI8):
        return f"tllm_quantize_i8({_b(a.x)}, {a.n}, {a.group}, {_b(a.q)}, {_b(a.scales)});"
    if isinstance(a, Rope):
        return f"tllm_rope({_b(a.x)}, {a.n_heads}, {a.head_dim}, rope_cos, rope_sin);"
    if isinstance(a, Attention):
        fn, table = ("tllm_attention_kv4", "KV4") if a.kv_bits == 4 else ("tllm_attention_i8", "KV")
        return (f"{fn}(&ATTENTION_SHAPE, {_b(a.q)}, {_b(a.k)}, {_b(a.v)}, &{table}[{a.layer}], pos, "
                f"{_b(a.q8)}, {_b(a.scores)}, {_b(a.out)});")
    if isinstance(a, Add):
        return f"tllm_add({_b(a.a)}, {_b(a.b)}, {a.n});"
    if isinstance(a, SiluMul):
        return f"tllm_silu_mul({_b(a.gate)}, {_b(a.up)}, {a.n});"
    raise AssertionError(f"no C form for {type(a).__name__}")


def c_comment(call: KernelCall) -> str:
    """/* layer 3 attn.wq q4_matvec 64x64 g32 -> l3.q @arena+0x3c040 */"""
    a = call.args
    where = f"layer {call.layer}" if call.layer is not None else ""
    via = ""
    if isinstance(a, (StreamedMatvecQ4x4, StreamedArgmaxQ4x4)):
        via = f", streamed in {len(a.chunks)} chunk{'s' if len(a.chunks) > 1 else ''} of {a.chunk_rows} rows"
        a = a.matvec if isinstance(a, StreamedMatvecQ4x4) else a.argmax
    elif isinstance(a, StreamedTopKQ4x4):
        via = f", streamed in {len(a.chunks)} chunk{'s' if len(a.chunks) > 1 else ''} of {a.chunk_rows} rows"
        a = a.topk
    elif isinstance(a, StreamedEmbedQ4x4):
        via = f", its tile fetched ({a.copy_bytes} B)"
        a = a.embed
    if isinstance(a, FcS4PerChannel):
        w = a.layer.weight
        what, out = f"s4 per-channel fc {w.rows}x{w.cols} (CMSIS-NN arithmetic)", a.out
    elif isinstance(a, ArgmaxClassifier):
        layout = ("q4x4" if isinstance(a.matvec, MatvecQ4x4) else a.matrix.qtype if isinstance(a.matvec, MatvecGGUF)
                  else "q4")
        what = (f"{layout} classifier {a.matrix.rows}x{a.matrix.cols} g{a.matrix.group}, argmax over "
                f"{a.chunk_rows}-row chunks")
        out = a.matvec.out
    elif isinstance(a, TopKClassifier):
        layout = ("q4x4" if isinstance(a.matvec, MatvecQ4x4) else a.matrix.qtype if isinstance(a.matvec, MatvecGGUF)
                  else "q4")
        what = (f"{layout} classifier {a.matrix.rows}x{a.matrix.cols} g{a.matrix.group}, top-{a.k} set over "
                f"{a.chunk_rows}-row chunks")
        out = a.value
    elif isinstance(a, (MatvecQ4, MatvecQ4x4)):
        layout = "q4x4_matvec" if isinstance(a, MatvecQ4x4) else "q4_matvec"
        what = f"{layout} {a.matrix.rows}x{a.matrix.cols} g{a.matrix.group}{' +bias' if a.bias else ''}"
        out = a.out
    elif isinstance(a, MatvecGGUF):
        what = f"{a.matrix.qtype} matvec {a.matrix.rows}x{a.matrix.cols} (GGUF blocks){' +bias' if a.bias else ''}"
        out = a.out
    elif isinstance(a, EmbedGGUF):
        what, out = f"embed {a.table.qtype} {a.table.rows}x{a.table.cols} (GGUF blocks)", a.out
    elif isinstance(a, EmbedQ4):
        what, out = f"embed_q4 {a.table.rows}x{a.table.cols}", a.out
    elif isinstance(a, RmsNorm):
        what, out = f"rmsnorm {a.n}", a.out
    elif isinstance(a, SiluMulPairsX16):
        what, out = f"silu(gate)*up {a.n} + int8 (as int16 stream) g{a.group}", a.stream
    elif isinstance(a, RmsNormX16):
        what, out = f"rmsnorm {a.n} + int8 (as int16 stream) g{a.group}", a.stream
    elif isinstance(a, QuantizeI8):
        what, out = f"int8 x{a.n} g{a.group}", a.q
    elif isinstance(a, QuantizeStaticS8):
        what, out = f"int8 static x{a.n}", a.q
    elif isinstance(a, QuantizeX16):
        what, out = f"int8 (as int16 stream) x{a.n} g{a.group}", a.stream
    elif isinstance(a, Rope):
        what, out = f"rope {a.n_heads}x{a.head_dim} in place", a.x
    elif isinstance(a, Attention):
        kv = f"int4 KV g{a.group}" if a.kv_bits == 4 else "int8 KV"
        what, out = f"attention over {kv} (stores k,v at pos)", a.out
    elif isinstance(a, Add):
        what, out = f"add {a.n} in place", a.a
    elif isinstance(a, SiluMul):
        what, out = f"silu(gate)*up {a.n} in place", a.gate
    else:
        raise AssertionError(type(a).__name__)
    label = call.label if not isinstance(a, (QuantizeI8, QuantizeX16, QuantizeStaticS8)) else ""
    text = " ".join(p for p in (where, label, what) if p) + via
    return f"/* {text} -> {out.name} @{out.region}+0x{out.offset:x} */"


def c_matrix(m: Q4Ref, pinned: dict | None = None) -> str:
    """The const descriptor of one Q4 matrix, in its layout's struct; a
    pinned one (stream.py) points into the pinned SRAM copy (TLLM_P)."""
    name = matrix_name(m.name)
    if m.layout == "q4x4" and pinned and m.name in pinned:
        return f"static const tllm_q4x4_matrix {name} = {{TLLM_P({c_hex(pinned[m.name])}), {m.rows}, {m.cols}, {m.group}}};"
    if m.layout == "q4x4":
        return f"static const tllm_q4x4_matrix {name} = {{TLLM_W({c_hex(m.packed_offset)}), {m.rows}, {m.cols}, {m.group}}};"
    return (f"static const tllm_q4_matrix {name} = {{TLLM_W({c_hex(m.packed_offset)}), "
            f"(const float *)TLLM_W({c_hex(m.scales_offset)}), {m.rows}, {m.cols}, {m.group}}};")


def c_gguf_matrix(m: GGUFRef) -> str:
    """The const descriptor of one matrix kept in a GGUF block format (tllm_kernels_gguf.h)."""
    return (f"static const tllm_gguf_matrix {matrix_name(m.name)} = {{TLLM_W({c_hex(m.offset)}), {m.rows}, {m.cols}}};"
            f" /* {m.qtype} */")


def fc_name(value: str) -> str:
    return "FC_" + ident(value)


def c_fc(fc: FcS4PcRef) -> str:
    """The const descriptor of one per-channel int4 layer (tllm_cmsis.h)."""
    w = fc.weight
    return (f"static const tllm_fc_s4pc_layer {fc_name(fc.name)} = {{TLLM_W({c_hex(w.packed_offset)}), "
            f"(const int32_t *)TLLM_W({c_hex(fc.bias_offset)}), (const int32_t *)TLLM_W({c_hex(fc.multipliers_offset)}), "
            f"(const int32_t *)TLLM_W({c_hex(fc.shifts_offset)}), {w.rows}, {w.cols}, {c_float_literal(fc.out_scale)}}};")


def c_hex(n: int) -> str:
    return f"0x{n:x}u"


def c_bytes(data: bytes) -> str:
    """A C string literal for arbitrary bytes (octal escapes never run into
    a following digit the way \\x escapes do)."""
    out = []
    for b in data:
        ch = chr(b)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


FILTERS = {
    "c_statement": c_statement,
    "c_comment": c_comment,
    "c_hex": c_hex,
    "c_matrix": c_matrix,
    "c_fc": c_fc,
    "c_gguf_matrix": c_gguf_matrix,
    "c_float": c_float_literal,
    "c_bytes": c_bytes,
    "buffer_macro": buffer_macro,
    "matrix_name": matrix_name,
    "vector_macro": vector_macro,
}
