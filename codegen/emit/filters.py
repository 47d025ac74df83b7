"""Python logic the templates call: one C statement or comment per call.

Templates stay loops over precomputed data; every string built here is
tested through the generated C (tests/host, tests/emu) and tests/unit/test_determinism.py."""
from __future__ import annotations

from ..reference.exact import c_float_literal
from ..lower import (Add, ArgmaxClassifier, Attention, TopKClassifier, BufferRef, EmbedGGUF, EmbedQ4, GGUFRef, KernelCall, MatvecGGUF,
                     MatvecQ4, MatvecQ4x4, QuantizeI8, Q4Ref, QuantizeX16, Rope, RmsNorm, SiluMul, SiluMulPairsX16,
                     FcS4PerChannel, FcS4PcRef, QuantizeStaticS8, RmsNormX16)
from ..stream import StreamedArgmaxQ4x4, StreamedEmbedQ4x4, StreamedMatvecQ4x4, StreamedTopKQ4x4
from .c_calls import LINE_WIDTH, block_comment, c_call, packed
from .names import buffer_macro, fc_name, matrix_name, vector_macro


def c_statement(call: KernelCall, indent: int = 4) -> str:
    """The call's C statement (c_calls.py), wrapped to LINE_WIDTH."""
    return c_call(call).text(indent=indent)


def c_comment(call: KernelCall, indent: int = 4) -> str:
    """/* layer 3 attn.wq q4_matvec 64x64 g32 -> l3.q @arena+0x3c040 */"""
    what, out = describe(call)
    where = f"layer {call.layer}" if call.layer is not None else ""
    return block_comment(" ".join(p for p in (where, what) if p) + f" -> {out.name} @{out.region}+0x{out.offset:x}",
                         indent)


def describe(call: KernelCall) -> tuple[str, BufferRef]:
    """What a call does (its label, kernel and shape) and the buffer it
    writes: the parts of its comment that do not name the layer."""
    a = call.args
    via = ""
    if isinstance(a, (StreamedMatvecQ4x4, StreamedArgmaxQ4x4, StreamedTopKQ4x4)):
        via = f", streamed in {len(a.chunks)} chunk{'s' if len(a.chunks) > 1 else ''} of {a.chunk_rows} rows"
        a = (a.matvec if isinstance(a, StreamedMatvecQ4x4) else a.argmax if isinstance(a, StreamedArgmaxQ4x4)
             else a.topk)
    elif isinstance(a, StreamedEmbedQ4x4):
        via = f", its tile fetched ({a.copy_bytes} B)"
        a = a.embed
    if isinstance(a, FcS4PerChannel):
        w = a.layer.weight
        what, out = f"s4 per-channel fc {w.rows}x{w.cols} (CMSIS-NN arithmetic)", a.out
    elif isinstance(a, (ArgmaxClassifier, TopKClassifier)):
        layout = ("q4x4" if isinstance(a.matvec, MatvecQ4x4) else a.matrix.qtype if isinstance(a.matvec, MatvecGGUF)
                  else "q4")
        keeps = "argmax" if isinstance(a, ArgmaxClassifier) else f"top-{a.k} set"
        what = (f"{layout} classifier {a.matrix.rows}x{a.matrix.cols} g{a.matrix.group}, {keeps} over "
                f"{a.chunk_rows}-row chunks")
        out = a.matvec.out if isinstance(a, ArgmaxClassifier) else a.value
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
    return " ".join(p for p in (label, what) if p) + via, out


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


def c_fc(fc: FcS4PcRef) -> str:
    """The const descriptor of one per-channel int4 layer (tllm_cmsis.h)."""
    w = fc.weight
    words = (f"(const int32_t *)TLLM_W({c_hex(fc.bias_offset)}),",
             f"(const int32_t *)TLLM_W({c_hex(fc.multipliers_offset)}),",
             f"(const int32_t *)TLLM_W({c_hex(fc.shifts_offset)}), {w.rows}, {w.cols}, {c_float_literal(fc.out_scale)}}};")
    return f"static const tllm_fc_s4pc_layer {fc_name(fc.name)} = {{TLLM_W({c_hex(w.packed_offset)}),\n    " + \
        "\n    ".join(words)


def c_hex(n: int) -> str:
    return f"0x{n:x}u"


def _escaped(data: bytes) -> list[str]:
    """Each byte as it stands in a C string literal (octal escapes never run
    into a following digit the way \\x escapes do)."""
    out = []
    for b in data:
        ch = chr(b)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return out


def c_bytes(data: bytes) -> str:
    """A C string literal for arbitrary bytes."""
    return '"' + "".join(_escaped(data)) + '"'


def c_bytes_lines(data: bytes, indent: int = 4) -> str:
    """The bytes as adjacent C string literals (the compiler joins them), one
    per line, each line within LINE_WIDTH at this indent."""
    lines, cur = [], ""
    for e in _escaped(data):
        if cur and indent + len(cur) + len(e) + 2 > LINE_WIDTH:
            lines.append(cur)
            cur = ""
        cur += e
    lines.append(cur)
    return ("\n" + " " * indent).join(f'"{ln}"' for ln in lines)


def c_define(name: str, value: str, note: str = "") -> str:
    """`#define name value /* note */`; past LINE_WIDTH the note goes on the
    line above and a brace-list value is continued after its commas."""
    line = f"#define {name} {value}" + (f" /* {note} */" if note else "")
    if len(line) <= LINE_WIDTH:
        return line
    head = block_comment(note, 0) + "\n" if note else ""
    if len(f"#define {name} {value}") <= LINE_WIDTH:
        return head + f"#define {name} {value}"
    items, _, rest = value.partition("{")
    parts = [p.strip() for p in rest.rsplit("}", 1)[0].split("}, ")]
    body = packed(f"#define {name} {items}{{", [p if p.endswith("}") else p + "}" for p in parts[:-1]] + [parts[-1]],
                  "}", 4)
    return head + body.replace("\n", " \\\n")


FILTERS = {
    "c_bytes_lines": c_bytes_lines,
    "c_define": c_define,
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
