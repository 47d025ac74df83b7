"""The report a person reads: report.md with an SVG memory map (memory_map.svg),
and report.json for tools.  Written at compile time from the plan; `build`
rewrites report.md/report.json with the ELF's section sizes beside the plan.

The SVG is drawn by hand (no plotting library): one column per region, one
rectangle per buffer at its offset, height proportional to its size within
the region; integer coordinates, sorted input, so the file is deterministic."""
from __future__ import annotations

from html import escape
import json

from ..quant.kv import parse_kv_bits
from .report import kv_region_line

COLORS = {"kv": "#4e79a7", "activation": "#f28e2b", "scratch": "#e15759", "logits": "#76b7b2",
          "sampler": "#59a14f", "tokens": "#edc948", "state": "#b07aa1", "reserved": "#bab0ac"}
COL_W, COL_GAP, TOP, H = 150, 40, 40, 480


def memory_map_svg(doc: dict) -> str:
    regions = doc["region_detail"]
    width = COL_GAP + len(regions) * (COL_W + COL_GAP)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{TOP + H + 60}" '
           f'font-family="monospace" font-size="11">',
           f'<text x="{COL_GAP}" y="20">tinyllm-gen memory map: board {escape(doc["board"])}, '
           f'{doc["total_sram_bytes"]:,} of {doc["budget_bytes"]:,} B</text>']
    for i, r in enumerate(regions):
        x = COL_GAP + i * (COL_W + COL_GAP)
        size = max(r["size"], 1)
        y_of = lambda off: TOP + H - (H * off) // size  # noqa: E731  (address grows upwards)
        out.append(f'<rect x="{x}" y="{TOP}" width="{COL_W}" height="{H}" fill="#f4f4f4" stroke="#333"/>')
        out.append(f'<text x="{x}" y="{TOP + H + 16}">{escape(r["name"])} {r["address"]}</text>')
        out.append(f'<text x="{x}" y="{TOP + H + 30}">{r["used_bytes"]:,} / {r["size"]:,} B</text>')
        base = 0
        if r["reserved_bytes"]:  # stack + statics sit below the arena in the stack region
            out.append(_box(x, y_of(r["reserved_bytes"]), y_of(0), COLORS["reserved"], "stack + statics"))
            base = r["reserved_bytes"]
        for b in doc["buffers"]:
            if b["region"] == r["name"]:
                lo, hi = base + b["offset"], base + b["offset"] + b["size"]
                out.append(_box(x, y_of(hi), y_of(lo), COLORS.get(b["kind"], "#999"),
                                f'{b["name"]} {b["size"]:,} B live {b["first"]}-{b["last"]}'))
    ky = TOP + H + 48
    for j, (kind, color) in enumerate(sorted(COLORS.items())):
        out.append(f'<rect x="{COL_GAP + j * 90}" y="{ky - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{COL_GAP + j * 90 + 14}" y="{ky}">{kind}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _box(x: int, y_top: int, y_bottom: int, color: str, title: str) -> str:
    h = max(1, y_bottom - y_top)
    return (f'<rect x="{x}" y="{y_top}" width="{COL_W}" height="{h}" fill="{color}" fill-opacity="0.5" '
            f'stroke="{color}"><title>{escape(title)}</title></rect>')


def _kib(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def _per_position(doc: dict) -> str:
    """K and V bytes per position (plans written before they were recorded have none)."""
    per = doc.get("kv_bytes_per_position")
    return f" ({per['k']:,} B of K + {per['v']:,} B of V per position)" if per else ""


def report_md(doc: dict, elf: dict | None = None) -> str:
    """`doc`: plan_json(...) plus weights; `elf`: elf_usage(...) after a build."""
    fits = "fits" if doc["fits"] else "DOES NOT FIT"
    lines = [f"# tinyllm-gen memory report: board `{doc['board']}`", "",
             f"**Budget:** {_kib(doc['total_sram_bytes'])} planned of {_kib(doc['budget_bytes'])} ({fits}); "
             f"the board has {_kib(doc['board_sram_bytes'])} of plannable SRAM.", "",
             f"Context {doc['max_seq']} tokens, KV cache {parse_kv_bits(doc['kv_bits']).describe()}"
             f"{' (Hadamard-rotated k and q)' if doc.get('kv_rotate') == 'hadamard' else ''}: "
             f"{_kib(doc['kv_cache_bytes'])}{_per_position(doc)}. "
             f"Stack {_kib(doc['stack_bytes'])} and runtime statics reserve {_kib(doc['runtime_static_bytes'])} "
             f"in `{doc['stack_region']}`."
             + (f" {kv_region_line(doc)}." if kv_region_line(doc) else ""), "",
             "![memory map](memory_map.svg)", "", "## Regions", "",
             "| region | address | size | used | arena | lower bound | ratio |" + (" ELF bytes |" if elf else ""),
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if elf else "")]
    for r in doc["region_detail"]:
        row = (f"| {r['name']} | {r['address']} | {r['size']:,} | {r['used_bytes']:,} | {r['arena_bytes']:,} | "
               f"{r['lower_bound_bytes']:,} | {r['arena_over_lower_bound']:.2f} |")
        if elf:
            row += f" {elf['ram_regions'].get(r['name'], 0):,} |"
        lines.append(row)
    lines += ["", "## Flash", ""]
    if "weights_bytes" in doc:
        lines.append(f"- weights blob: {_kib(doc['weights_bytes'])} (external weights storage, not in the ELF image)")
    if elf:
        lines.append(f"- code + vocabulary + .data image (arm-none-eabi-size text+data): {_kib(elf['flash_bytes'])}")
        lines += ["", "## arm-none-eabi-size beside the plan", "", "| section | address | bytes | region | plan |",
                  "|---|---|---:|---|---:|"]
        for s in elf["sections"]:
            lines.append(f"| `{s['name']}` | {s['address']} | {s['size']:,} | {s['region']} | "
                         f"{'' if s['planned'] is None else format(s['planned'], ',')} |")
    else:
        lines.append("- code + vocabulary: measured after `tinyllm-gen build` (this file is rewritten then)")
    lines += ["", "## Buffers", "", "| buffer | region | offset | bytes | live | kind | placement |",
              "|---|---|---:|---:|---|---|---|"]
    for b in doc["buffers"]:
        lines.append(f"| `{b['name']}` | {b['region']} | {b['offset']:,} | {b['size']:,} | "
                     f"{b['first']}-{b['last']} | {b['kind']} | {b['placement']} |")
    return "\n".join(lines) + "\n"


def report_files(doc: dict, elf: dict | None = None) -> dict[str, bytes]:
    """OUT/report.json, OUT/report.md, OUT/memory_map.svg."""
    full = dict(doc, elf=elf) if elf else doc
    return {"report.json": (json.dumps(full, indent=2, sort_keys=True) + "\n").encode(),
            "report.md": report_md(doc, elf).encode(),
            "memory_map.svg": memory_map_svg(doc).encode()}
