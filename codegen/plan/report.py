"""The memory plan explained: JSON for tools, text with a time x offset chart
for people (after TFLite Micro's PrintMemoryPlan)."""
from __future__ import annotations

from .memory import MemoryPlan

CHART_WIDTH = 64  # offset columns
CHART_ROWS_MAX = 80


def plan_json(plan: MemoryPlan) -> dict:
    kinds: dict[str, int] = {}
    for b in plan.buffers:
        kinds[b.request.kind] = kinds.get(b.request.kind, 0) + b.size
    doc = {
        "fits": plan.fits,
        "budget_bytes": plan.budget_bytes,
        "total_sram_bytes": plan.total_bytes,
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "arena_over_lower_bound": round(plan.arena_bytes / plan.lower_bound_bytes, 4),
        "stack_bytes": plan.stack_bytes,
        "runtime_static_bytes": plan.runtime_static_bytes,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "max_seq": plan.max_seq,
        "bytes_by_kind": dict(sorted(kinds.items())),
        "board": plan.board,
        "kv_bits": plan.kv_bits.json_value(),
        # one more token of context, K and V apart (values and scales, all layers): what --max-seq trades
        "kv_bytes_per_position": {"k": plan.kv_bytes_per_position("k"), "v": plan.kv_bytes_per_position("v")},
        "board_sram_bytes": plan.sram_bytes,
        "stack_region": plan.stack_region,
        # region -> bytes used there (arena + canary, plus stack and statics in the stack region)
        "regions": {r.name: r.used_bytes for r in plan.regions},
        "region_detail": [
            {"name": r.name, "address": f"0x{r.address:08x}", "size": r.size, "speed": r.speed,
             "arena_bytes": r.arena_bytes, "lower_bound_bytes": r.lower_bound_bytes,
             "reserved_bytes": r.reserved_bytes, "used_bytes": r.used_bytes,
             "arena_over_lower_bound": round(r.ratio, 4), "fits": r.fits} | ({"external": True} if r.external else {})
            for r in plan.regions
        ],
        "buffers": [
            {"name": b.name, "region": b.region, "offset": b.offset, "size": b.size, "ctype": b.request.ctype,
             "count": b.request.count, "first": b.request.first, "last": b.request.last, "kind": b.request.kind,
             "placement": b.request.place_class}
            for b in plan.buffers
        ],
    }
    if plan.kv_bits == 4:  # the int4 cache's rotation (int8 reports stay as they were)
        doc.update(kv_rotate=plan.kv_rotate)
    if plan.kv_region_option:  # a board with SDRAM: where the KV cache went (other boards' reports stay as they were)
        doc.update(kv_region=plan.kv_region_option, kv_cache_regions=list(plan.kv_cache_regions),
                   external_bytes=plan.external_bytes)
    return doc


def kv_region_line(doc: dict) -> str | None:
    """Where the KV cache went, for the text reports; None on a board without SDRAM."""
    if "kv_cache_regions" not in doc:
        return None
    outside = f", {doc['external_bytes']:,} B outside the RAM budget" if doc["external_bytes"] else ""
    return f"KV cache in {', '.join(doc['kv_cache_regions'])} (--kv-region {doc['kv_region']}{outside})"


def _kib(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def plan_text(plan: MemoryPlan) -> str:
    lines = [
        "tinyllm-gen memory plan",
        f"  budget        {_kib(plan.budget_bytes)}",
        f"  total         {_kib(plan.total_bytes)}  {'fits' if plan.fits else 'DOES NOT FIT'}",
        f"  arena         {_kib(plan.arena_bytes)}  lower bound {_kib(plan.lower_bound_bytes)}"
        f"  ratio {plan.arena_bytes / plan.lower_bound_bytes:.2f}",
        f"  kv cache      {_kib(plan.kv_cache_bytes)} at max_seq {plan.max_seq}"
        + (f" in {', '.join(plan.kv_cache_regions)} (--kv-region {plan.kv_region_option})"
           if plan.kv_region_option else "")
        + (f", int4 {'Hadamard-rotated' if plan.kv_rotate == 'hadamard' else 'unrotated'}"
           if plan.kv_bits == 4 else "")
        + f"; {plan.kv_bits.describe()}, per position K {plan.kv_bytes_per_position('k'):,} B"
          f" + V {plan.kv_bytes_per_position('v'):,} B",
        f"  stack         {_kib(plan.stack_bytes)} in {plan.stack_region}",
        f"  runtime static reserve {_kib(plan.runtime_static_bytes)}",
        "",
        f"  board {plan.board}: {'region':<8} {'used':>10} {'of':>10}  {'arena':>9} {'lower bd':>9} ratio",
    ]
    for r in plan.regions:
        lines.append(f"  {'':<{len(plan.board) + 7}} {r.name:<8} {r.used_bytes:>10,} {r.size:>10,}  "
                     f"{r.arena_bytes:>9,} {r.lower_bound_bytes:>9,} {r.ratio:.2f}{'' if r.fits else '  OVER'}")
    lines += ["", f"  {'region':<7} {'offset':>8} {'size':>8}  {'live':>9}  buffer"]
    for b in plan.buffers:
        r = b.request
        lines.append(f"  {b.region:<7} {b.offset:>8} {b.size:>8}  {r.first:>4}-{r.last:<4}  "
                     f"{b.name} ({r.ctype}[{r.count}], {r.kind})")
    for r in plan.regions:
        if r.arena_bytes:
            lines += ["", chart(plan, r.name)]
    return "\n".join(lines) + "\n"


def chart(plan: MemoryPlan, region: str | None = None) -> str:
    """Rows are time steps, columns offsets; each buffer draws its letter.
    One chart per region (its own offsets)."""
    region = region or plan.regions[0].name
    bufs = [b for b in plan.buffers if b.region == region]
    top = plan.region(region).arena_bytes
    scale = max(1, -(-top // CHART_WIDTH))
    steps = plan.lifetimes.n_steps + 1
    stride = max(1, -(-steps // CHART_ROWS_MAX))
    symbols = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    legend = {b.name: symbols[i % len(symbols)] for i, b in enumerate(bufs)}
    out = [f"  {region}: time x offset chart (one column = {scale} B, '.' = free)"]
    for t in range(0, steps, stride):
        row = ["."] * CHART_WIDTH
        for b in bufs:
            if b.request.first <= t <= b.request.last:
                for col in range(b.offset // scale, min(CHART_WIDTH, -(-(b.offset + b.size) // scale))):
                    row[col] = legend[b.name]
        out.append(f"  {t:>4} |{''.join(row)}|")
    return "\n".join(out)


def summary_text(plan_doc: dict, size: dict | None) -> str:
    """The memory report printed after a build: plan figures beside the ELF's."""
    kib = lambda n: f"{n:>9,} B {n / 1024:>7.1f} KiB"  # noqa: E731
    lines = ["memory report (static plan, proven at compile time)",
             f"  RAM budget            {kib(plan_doc['budget_bytes'])}",
             f"  RAM planned           {kib(plan_doc['total_sram_bytes'])}  "
             f"({'fits' if plan_doc['fits'] else 'DOES NOT FIT'})",
             f"    arena               {kib(plan_doc['arena_bytes'])}  "
             f"(lower bound {plan_doc['lower_bound_bytes']:,} B, ratio {plan_doc['arena_over_lower_bound']:.2f})"]
    lines.append("      buffers by kind, before sharing space:")
    for kind, n in plan_doc["bytes_by_kind"].items():
        lines.append(f"        {kind:<15} {kib(n)}")
    lines += [f"    stack               {kib(plan_doc['stack_bytes'])}",
              f"    runtime statics     {kib(plan_doc['runtime_static_bytes'])} (reserve)",
              f"  context (max_seq)     {plan_doc['max_seq']:>9}"]
    per = plan_doc.get("kv_bytes_per_position")  # absent in plans written before it was recorded
    if per:
        lines.append(f"  KV per position       {per['k']:>9,} B K + {per['v']:,} B V (--kv-bits {plan_doc['kv_bits']})")
    if kv_region_line(plan_doc):
        lines.append(f"  {kv_region_line(plan_doc)}")
    if "weights_bytes" in plan_doc:
        lines.append(f"  weights (flash)       {kib(plan_doc['weights_bytes'])}")
    if size:
        lines += ["arm-none-eabi-size of the built image",
                  f"  text (code+vocab)     {kib(size['text'])}",
                  f"  data + bss (RAM)      {kib(size['ram_bytes'])}  "
                  f"(arena + stack = {plan_doc['arena_bytes'] + plan_doc['stack_bytes']:,} B; "
                  f"the rest is runtime statics)"]
    return "\n".join(lines)
