"""The weights blob's size from shapes alone (no quantization): what `plan`
reports as flash/QSPI use, equal to the blob `compile` builds.

`blob_items` lists the entries lower/blob.build_blob writes, in its order,
with each entry's size computed from the matrix shape and its format: q4x4
tiles (the Cortex-M7 kernels, gate/up fused into one matrix as
lower/fusion.fused_gate_up decides), packed nibbles + float32 scales
(portable and per-channel), a GGUF file's blocks kept as they are (Q4_0 /
Q4_1 / Q8_0: the source's `kept`, from quant/gguf_keep.kept_formats), the
per-channel int32 tables, the float32 vectors, the RoPE tables and the
vocabulary when it goes to external flash (vocab.py).  blob_layout then
places them with the builder's own alignment rule.  tests/unit/test_plan_estimates.py checks
plan == built blob, byte for byte in size, for every format."""
from __future__ import annotations

from ..lower.blob import blob_layout, gguf_blob_kind
from ..lower.fusion import fused_gate_up
from ..ir import expected_weight_shapes
from ..lower.records import StepSource
from ..quant.kv_center import center_names
from ..quant.formats import gguf_row_bytes, gguf_tiled_bytes_of, n_groups, q4_row_bytes, q4x4_bytes_of


def blob_items(src: StepSource, max_seq: int, vocab: tuple[int, int] | None = None) -> list[tuple[str, str, int]]:
    """(name, kind, nbytes) of every blob entry, in build_blob's order;
    `vocab`: (tokens, text bytes) of the vocabulary when it goes into the blob."""
    g, c = src.graph, src.config
    kept = src.kept_types if src.method == "gguf" else {}
    shapes = expected_weight_shapes(c)  # the graph's weights (verify.py checks them against it); no data needed
    matrices = {n: s for n, s in shapes.items() if len(s) == 2}
    vectors = {n: s[0] for n, s in shapes.items() if len(s) == 1}
    per_channel = src.method == "per-channel"
    group = src.group_size if not per_channel else 0  # 0: one group (scale) per row
    q4x4 = src.kernels == "cortex-m7" and not per_channel
    pairs = {f.w_gate: f for f in fused_gate_up(g, src.kernels, src.method, kept).values()}
    tiled = src.kernels == "cortex-m7"  # kept blocks in 4-row tiles for the M7 kernels
    in_pairs = {w for f in pairs.values() for w in (f.w_gate, f.w_up)}
    items = []
    for name in sorted(n for n in matrices if n not in kept):
        rows, cols = matrices[name]
        if name in pairs:
            f = pairs[name]
            items.append((f.combined, "q4x4", q4x4_bytes_of(rows + matrices[f.w_up][0], cols, group)))
        elif name in in_pairs:
            continue
        elif q4x4:
            items.append((name, "q4x4", q4x4_bytes_of(rows, cols, group)))
        else:
            items.append((name, "q4.packed", rows * q4_row_bytes(cols)))
            items.append((name, "q4.scales", rows * n_groups(cols, group or cols) * 4))
    for name in sorted(kept):
        rows, cols = matrices[name]
        qtype = kept[name]
        if name in pairs:
            f = pairs[name]
            items.append((f.combined, gguf_blob_kind(qtype, True),
                          gguf_tiled_bytes_of(qtype, rows + matrices[f.w_up][0], cols)))
        elif name in in_pairs:
            continue
        elif tiled:
            items.append((name, gguf_blob_kind(qtype, True), gguf_tiled_bytes_of(qtype, rows, cols)))
        else:
            items.append((name, gguf_blob_kind(qtype), rows * gguf_row_bytes(qtype, cols)))
    if per_channel:  # int32 bias, multipliers, shifts per linear, keyed by its output value
        for node in sorted((n for n in g.nodes if n.op == "linear"), key=lambda n: n.output):
            rows = matrices[node.inputs[1]][0]
            items += [(node.output, kind, 4 * rows) for kind in ("s4pc.bias", "s4pc.multipliers", "s4pc.shifts")]
    for name in sorted(vectors):
        items.append((name, "f32", 4 * vectors[name]))
    if src.kv_center and src.kv_bits == 4:  # the centred cache's centres (quant/kv_center.py)
        items += [(name, "f32", 4 * c.n_kv_heads * c.head_dim) for name in center_names(c.n_layers)]
    for name in ("rope.cos", "rope.sin"):
        items.append((name, "f32", 4 * max_seq * (c.head_dim // 2)))
    if vocab is not None:
        tokens, text_bytes = vocab
        items += [("vocab", "u32", 4 * (tokens + 1)), ("vocab", "u8", text_bytes)]
    return items


def weights_blob_bytes(src: StepSource, max_seq: int, vocab: tuple[int, int] | None = None) -> int:
    """The total bytes build_blob will produce for this source."""
    return blob_layout(blob_items(src, max_seq, vocab))[1]
