"""Python logic the templates call: one C statement, comment or
descriptor per filter.

Templates stay loops over precomputed data; every string built here is
tested through the generated C (tests/host, tests/emu) and tests/unit/test_determinism.py."""
from __future__ import annotations

from ..kernels.c_names import buffer_macro, fc_name, matrix_name, vector_macro
from ..kernels.c_text import LINE_WIDTH, block_comment, packed
from ..kernels.refs import FcS4PcRef, GGUFRef, Q4Ref
from ..reference.exact import c_float_literal
from .c_calls import c_comment, c_statement


def c_matrix(m: Q4Ref, pinned: dict | None = None) -> str:
    """The const descriptor of one Q4 matrix, in its layout's struct; a
    pinned one (lower/stream.py) points into the pinned SRAM copy (TLLM_P)."""
    name = matrix_name(m.name)
    if m.layout == "q4x4" and pinned and m.name in pinned:
        return f"static const tllm_q4x4_matrix {name} = {{TLLM_P({c_hex(pinned[m.name])}), {m.rows}, {m.cols}, {m.group}}};"
    if m.layout == "q4x4":
        return f"static const tllm_q4x4_matrix {name} = {{TLLM_W({c_hex(m.packed_offset)}), {m.rows}, {m.cols}, {m.group}}};"
    return (f"static const tllm_q4_matrix {name} = {{TLLM_W({c_hex(m.packed_offset)}), "
            f"(const float *)TLLM_W({c_hex(m.scales_offset)}), {m.rows}, {m.cols}, {m.group}}};")


def c_gguf_matrix(m: GGUFRef, pinned: dict | None = None) -> str:
    """The const descriptor of one matrix kept in a GGUF block format: the
    file's rows (tllm_kernels_gguf.h) or its 4-row tiles (tllm_kernels_gguf_m7.h),
    a pinned one in the SRAM copy (TLLM_P)."""
    if not m.tiled:
        return (f"static const tllm_gguf_matrix {matrix_name(m.name)} = {{TLLM_W({c_hex(m.offset)}), {m.rows}, "
                f"{m.cols}}}; /* {m.qtype} */")
    at = f"TLLM_P({c_hex(pinned[m.name])})" if pinned and m.name in pinned else f"TLLM_W({c_hex(m.offset)})"
    return (f"static const tllm_ggufx4_matrix {matrix_name(m.name)} = {{{at}, {m.rows}, {m.cols}}}; "
            f"/* {m.qtype} in 4-row tiles */")


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
