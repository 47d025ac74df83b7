"""The tiled GGUF kernels' instructions per MAC at SmolLM2-135M's shapes:
the figures behind timing.KERNEL_RATES' q40x4 / q41x4 / q80x4 rows.

    python -m tinyllm_gen.bench.gguf_rates [--json]

runs bench/micro_gguf.c under QEMU mps2-an500 with the tllm_icount plugin
(exact, repeatable counts; random blocks, every fp16 scale 2^-7: the count
does not depend on the values) on a decoder layer's matrices and on the
classifier, and prints per format (Q4_0, Q4_1, Q8_0 in their 4-row tiles):

* matvec, matmat_p2 .. matmat_p4, kept_portable: instructions / MACs over one
  layer's seven matrices (q, k, v, o, gate, up, down; MACs = P x rows x cols),
  kept_portable being the portable kernel of the file's row-major blocks
  (tllm_kernels_gguf.c) for comparison;
* classifier_matvec (the top-K path's chunks), classifier_argmax (the greedy
  path, 64 rows per chunk): the 49152 x 576 classifier measured on its first
  CLASSIFIER_ROWS rows.  Its 30 MB (Q8_0) do not fit the emulator's 16 MiB;
  every row costs the same (the 576- and 8192-row figures agree to 4
  decimals), so a row subset gives the rate."""
from __future__ import annotations

import argparse
import json

from ..quant.formats import GGUF_TILED
from .bench import TILED_VARIANTS, KernelFigure, bench_gguf_tiled

DIM, HIDDEN, KV = 576, 1536, 192  # SmolLM2-135M: dim, FFN, 3 KV heads x 64
LAYER = [(DIM, DIM), (KV, DIM), (KV, DIM), (DIM, DIM), (HIDDEN, DIM), (HIDDEN, DIM), (DIM, HIDDEN)]
CLASSIFIER_ROWS = 8192  # of the 49,152-row vocabulary
SHAPES = sorted(set(LAYER)) + [(CLASSIFIER_ROWS, DIM)]


def rates(figures: list[KernelFigure]) -> dict[str, dict[str, float]]:
    """{format: {variant: instructions per MAC}} from bench_gguf_tiled's figures at SHAPES."""
    by = {(f.shape, f.kernel): f for f in figures}
    out: dict[str, dict[str, float]] = {}
    for qtype, layout in GGUF_TILED.items():
        row = {}
        for v in TILED_VARIANTS:
            if v == "argmax":
                continue
            figs = [by[(f"{r}x{c}", f"{layout} {v}")] for r, c in LAYER]
            row[v] = round(sum(f.instructions for f in figs) / sum(f.macs for f in figs), 4)
        for v in ("matvec", "argmax"):
            row[f"classifier_{v}"] = round(by[(f"{CLASSIFIER_ROWS}x{DIM}", f"{layout} {v}")].instructions_per_mac, 4)
        out[qtype] = row
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="the per-shape figures and the table as JSON")
    args = ap.parse_args(argv)
    figures = bench_gguf_tiled(SHAPES)
    table = rates(figures)
    if args.json:
        print(json.dumps({"figures": [dict(shape=f.shape, kernel=f.kernel, instructions=f.instructions, macs=f.macs,
                                           instructions_per_mac=round(f.instructions_per_mac, 4)) for f in figures],
                          "per_mac": table}, indent=2))
        return
    print(f"  {'shape':<10} {'kernel':<22} {'instructions':>12} {'per MAC':>8}")
    for f in figures:
        print(f"  {f.shape:<10} {f.kernel:<22} {f.instructions:>12,} {f.instructions_per_mac:8.4f}")
    print("\ntiming.KERNEL_RATES rows (P = 1: matvec, 2..4: matmat):")
    for qtype, row in table.items():
        ps = {1: row["matvec"], **{p: row[f"matmat_p{p}"] for p in (2, 3, 4)}}
        print(f"    {GGUF_TILED[qtype]!r}: {{{', '.join(f'{p}: {v:.4f}' for p, v in ps.items())}}},")
    print("\nthe file layout's portable kernel (P = 1), the classifier's top-K chunks and greedy argmax:")
    for qtype, row in table.items():
        print(f"    {qtype}: {row['kept_portable']:.4f}; {GGUF_TILED[qtype]} classifier {row['classifier_matvec']:.4f}, "
              f"argmax {row['classifier_argmax']:.4f}")


if __name__ == "__main__":
    main()
