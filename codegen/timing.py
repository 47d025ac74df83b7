"""Predicted speed and energy per token on a board: a pure
function of the board's QUADSPI link, the bytes of weights one token reads,
and the instructions one token executes.

Nothing here is measured on a board: the instruction counts are exact (QEMU
with the tllm_icount plugin, `tinyllm-gen bench`), everything that turns them
into time is a named assumption below with where it comes from.  Four modes:

* flash_bound: the link's data rate alone, bytes / (clock x lines x chips /
  8): no command overhead, no compute.  Nothing can be faster.
* in_place (today): the kernels read the weights through the D-cache from the
  memory-mapped window.  Each 32-byte line miss stalls the core until the
  line is there, so compute and transfer add up, plus the miss latency per
  line and one command per weight stream.  This is the pessimistic reading
  of the QUADSPI, which prefetches only as far as its 32-byte FIFO;
* in_place_prefetch: the optimistic reading of the same: the QUADSPI's
  one-line prefetch overlaps each line's transfer with the previous line's
  compute perfectly, leaving max(compute, transfer) plus the miss latency
  per line.  The truth is between the two; only a board with DWT can say.
* dwup: weights streamed by the MDMA into two DTCM buffers of
  `chunk_bytes` while the core computes on the other one: per chunk the
  larger of compute and transfer, plus the pipeline fill (the first chunk's
  transfer, exposed once per `fills` restart) and one command per chunk; the
  non-matvec work (attention, norms, sampling) is counted as not overlapped,
  which is again the pessimistic choice.

Energy per token = run-mode supply current x supply voltage x time (the
core runs, or waits in a polling loop, for the whole token in every mode).

With the KV cache in the DK's SDRAM (--kv-region sdram) attention's reads of
it are priced too (`kv_read_seconds`): at the token with the whole context
behind it, every 32-byte line of K and V is a D-cache miss to the FMC (the
cache is 16 KiB, the cache megabytes), paying its burst on the SDRAM's data
lines, the CAS latency and the AXI path, and every new SDRAM row its
precharge and activate; added to each mode, not overlapped with compute
(the pessimistic reading, as for the other non-matvec work).  The floor is
the bytes over the SDRAM's data rate (bus width x SDCLK, board.json).  The
same reads from AXI SRAM are priced beside it.

Speculative decoding (the end of this file) is priced per pass over the
weights: the verification over P positions (Workload.verify) at a draft's
measured acceptance, and with a draft model its steps too (DraftCost, each
step priced as any build's token in the draft's own mode): tokens/s = tokens
per pass / (verification + draft) seconds, each figure checked against its
flash floor (docs/speculative.md, "The timing model with a draft model")."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from .board import Board, QspiFlash, Sdram, board_names, load_board
from .quant.formats import q4x4_bytes_of

# Core clock: bringup.c's PLL1 setting on revision V silicon (VOS0), the
# parts the boards ship with (revision Y runs 400 MHz).
CORE_HZ = 480_000_000
# Cycles per instruction of the measured instruction streams.  The Cortex-M7
# issues up to two instructions per cycle (Cortex-M7 TRM, dual-issue
# pipeline); the matvec inner loop is loads, SMLAD (one per cycle, FACTS.md)
# and bit-field extracts that can pair with them, with every operand in DTCM
# or in cache.  1.0 is an assumption between the dual-issue best (0.5) and
# single issue with load-use stalls (~1.5); QEMU counts instructions, not
# cycles, and DWT's CYCCNT reads 0 there, so it cannot be checked here.
CYCLES_PER_INSTRUCTION = 1.0
# Core cycles from a D-cache miss on the QUADSPI window to the line being
# usable when the QUADSPI already holds the data (AXI master, bus matrix,
# QUADSPI's memory-mapped response, the line fill): an assumption of the
# right order for the H7's AXI path, not a datasheet figure; to be calibrated
# with DWT on a board.
MISS_LATENCY_CYCLES = 24
DCACHE_LINE_BYTES = 32  # Cortex-M7 L1 D-cache line (Cortex-M7 TRM)
# Run-mode supply current per MHz of core clock: ST's headline figure for the
# STM32H743/753/750 line in Run mode (the datasheet DS12556 tabulates the
# per-clock currents, regulator on, VOS0 at 480 MHz; not available here to
# check, so this is the one figure to replace with the table's).
RUN_UA_PER_MHZ = 278
SUPPLY_V = 3.3  # VDD on both boards (the core runs from the internal LDO)
DEFAULT_CHUNK_BYTES = 16 * 1024  # two of them: 32 KiB of the 128 KiB DTCM
MODES = ("in_place", "in_place_prefetch", "dwup", "flash_bound")
# A D-cache line fill from AXI SRAM: 32 bytes on the 64-bit AXI bus at half
# the core clock (4 beats, 8 core cycles) plus the bus matrix's few cycles;
# an assumption of the right order, to be calibrated with DWT on a board.
AXI_SRAM_LINE_CYCLES = 12


@dataclass(frozen=True)
class KvRead:
    """The KV cache one decoded token reads: every position of the context
    behind it (`positions`, max_seq: the last and dearest token), all
    layers, K and V with their scales."""

    bytes_per_position: int
    positions: int
    region: str  # where it lives: "sdram" (priced on the FMC) or "sram"

    @property
    def nbytes(self) -> int:
        return self.bytes_per_position * self.positions


def kv_read_seconds(s: Sdram, kv: KvRead, core_hz: float = CORE_HZ) -> dict[str, float]:
    """Seconds attention's KV reads take at this token: from SDRAM (see the
    module docstring), its floor (bytes / data rate), and from AXI SRAM."""
    lines = math.ceil(kv.nbytes / DCACHE_LINE_BYTES)
    beats = DCACHE_LINE_BYTES / (s.data_bits / 8)
    row_bytes = (1 << s.column_bits) * s.data_bits // 8
    row_cycles = math.ceil(s.t_rp_ns * s.sdclk_hz / 1e9) + math.ceil(s.t_rcd_ns * s.sdclk_hz / 1e9)
    sdram = (lines * ((beats + s.cas_latency) / s.sdclk_hz + MISS_LATENCY_CYCLES / core_hz)
             + math.ceil(kv.nbytes / row_bytes) * row_cycles / s.sdclk_hz)
    return {"sdram": sdram, "floor": kv.nbytes / s.bytes_per_s, "sram": lines * AXI_SRAM_LINE_CYCLES / core_hz}


@dataclass(frozen=True)
class Workload:
    """What one token costs, independent of the board.

    weight_bytes: bytes of weights read from external flash per token (every
    matrix and the classifier once; the embedding row is negligible);
    matvec_instructions: the weight-bound instructions (they scale with the
    bytes and overlap with their transfer under DWUP); other_instructions:
    the rest (attention, norms, RoPE, sampling); streams: contiguous weight
    streams per token (one new QUADSPI command each in place); source: how
    the counts were obtained (measured / scaled)."""

    name: str
    weight_bytes: int
    matvec_instructions: int
    other_instructions: int
    streams: int
    source: str
    sampling_instructions: int = 0  # part of other_instructions; a prefill token does not sample
    # The classifier (part of weight_bytes, matvec_instructions and streams):
    # a prompt token before the last skips it (tllm_model_step's need_logits).
    head_weight_bytes: int = 0
    head_matvec_instructions: int = 0
    # (P, the layers' matvec instructions per prompt token at P tokens per weight pass), from the build's
    # own layouts (plan/traffic.py); empty: the q4x4 kernel's ratios (MEASURED_MATMAT_PER_MAC)
    batched_body_matvec: tuple[tuple[int, int], ...] = ()
    # The same for the classifier, per position of a verification pass (speculative decoding): its matvec
    # instructions per position at P positions per weight pass; empty: the q4x4 kernel's ratios
    batched_head_matvec: tuple[tuple[int, int], ...] = ()

    def prefill(self, batch: int = 1) -> "Workload":
        """One prompt token before the last: no classifier (its logits are
        never read) and no sampling; with a batched prefill of `batch` tokens
        per weight pass (lower/prefill.py) each token reads 1/batch of the layers'
        weights, and the batched kernel's instructions per MAC
        (MEASURED_MATMAT_PER_MAC) replace the matvec's.  The last prompt
        token costs a decoded token's step without its sampling."""
        body_bytes = self.weight_bytes - self.head_weight_bytes
        body_streams = self.streams - (1 if self.head_weight_bytes else 0)
        body_mv = self.matvec_instructions - self.head_matvec_instructions
        batched = dict(self.batched_body_matvec)
        mv = batched[batch] if batch in batched else round(body_mv * MEASURED_MATMAT_PER_MAC[batch]
                                                           / MEASURED_MATMAT_PER_MAC[1])
        return replace(self, name=f"{self.name} prefill", weight_bytes=-(-body_bytes // batch),
                       matvec_instructions=mv, batched_body_matvec=(),
                       other_instructions=self.other_instructions - self.sampling_instructions,
                       sampling_instructions=0, streams=-(-body_streams // batch),
                       head_weight_bytes=0, head_matvec_instructions=0)

    def verify(self, positions: int) -> "Workload":
        """One verification pass of speculative decoding (lower/speculate.py):
        `positions` tokens through every weight together, the classifier
        included, each weight read once; every position costs its own
        instructions at the batched kernels' rate (their P = positions row)
        and its own attention, norms and sampling.  positions = 1 is a
        decoded token."""
        if positions == 1:
            return self
        scale = MEASURED_MATMAT_PER_MAC[positions] / MEASURED_MATMAT_PER_MAC[1]
        body, head = dict(self.batched_body_matvec), dict(self.batched_head_matvec)
        body_mv = body.get(positions, round((self.matvec_instructions - self.head_matvec_instructions) * scale))
        head_mv = head.get(positions, round(self.head_matvec_instructions * scale))
        return replace(self, name=f"{self.name} verify {positions}", matvec_instructions=positions * (body_mv + head_mv),
                       other_instructions=positions * self.other_instructions,
                       sampling_instructions=positions * self.sampling_instructions,
                       head_matvec_instructions=positions * head_mv, batched_body_matvec=(), batched_head_matvec=())

    @property
    def instructions(self) -> int:
        return self.matvec_instructions + self.other_instructions


@dataclass(frozen=True)
class ModeFigure:
    ms_per_token: float
    tokens_per_s: float | None
    mj_per_token: float


def link_seconds(q: QspiFlash, nbytes: float, bursts: int) -> float:
    """Time the QUADSPI needs for nbytes in `bursts` commands."""
    return nbytes / q.bytes_per_s + bursts * q.burst_overhead_cycles / q.clock_hz


def compute_seconds(instructions: float, core_hz: float = CORE_HZ) -> float:
    return instructions * CYCLES_PER_INSTRUCTION / core_hz


def run_watts(core_hz: float = CORE_HZ) -> float:
    return RUN_UA_PER_MHZ * 1e-6 * core_hz / 1e6 * SUPPLY_V


def mode_seconds(q: QspiFlash, w: Workload, chunk_bytes: int = DEFAULT_CHUNK_BYTES, fills: int = 1,
                 core_hz: float = CORE_HZ) -> dict[str, float]:
    """Seconds per token in each mode (see the module docstring)."""
    if w.weight_bytes < 0:
        raise ValueError("a workload reads no negative bytes")
    c_mv, c_other = compute_seconds(w.matvec_instructions, core_hz), compute_seconds(w.other_instructions, core_hz)
    if w.weight_bytes == 0:  # every weight pinned in SRAM: no flash read, compute alone
        return {m: c_mv + c_other for m in MODES[:3]} | {"flash_bound": 0.0}
    lines = math.ceil(w.weight_bytes / DCACHE_LINE_BYTES)
    miss = lines * MISS_LATENCY_CYCLES / core_hz
    x_in_place = link_seconds(q, w.weight_bytes, w.streams)
    n = math.ceil(w.weight_bytes / chunk_bytes)
    x_chunk = link_seconds(q, w.weight_bytes / n, 1)  # one command per MDMA transfer
    c_chunk = c_mv / n
    dwup = fills * x_chunk + (n - 1) * max(c_chunk, x_chunk) + c_chunk + c_other
    return {"in_place": c_mv + x_in_place + miss + c_other,
            "in_place_prefetch": max(c_mv, x_in_place) + miss + c_other,
            "dwup": dwup,
            "flash_bound": w.weight_bytes / q.bytes_per_s}


def predict(board: Board, w: Workload, chunk_bytes: int = DEFAULT_CHUNK_BYTES, fills: int = 1,
            core_hz: float = CORE_HZ, prefill_batch: int = 1, kv: KvRead | None = None) -> dict:
    """ms/token, tokens/s and mJ/token per mode for one board, for a decoded
    token ("modes") and a prompt token before the last ("prefill": no
    classifier, no sampling; Workload.prefill), with the inputs and
    assumptions they rest on (JSON-ready).  kv: a KV cache in SDRAM, whose
    reads at the last position are added to every mode ("attention_kv")."""
    q = board.qspi_flash
    if q is None:
        raise ValueError(f"{board.name} has no QUADSPI flash to stream from")
    watts = run_watts(core_hz)
    secs = mode_seconds(q, w, chunk_bytes, fills, core_hz)
    kv_secs = kv_read_seconds(board.sdram, kv, core_hz) if kv is not None and kv.region == "sdram" else None
    if kv_secs is not None:
        secs = {m: t + (kv_secs["sdram"] if m != "flash_bound" else 0.0) for m, t in secs.items()}

    def figures(seconds: dict[str, float]) -> dict:
        # tokens/s None: nothing bounds it (no flash read for the flash bound)
        return {m: asdict(ModeFigure(round(s * 1e3, 3), round(1 / s, 3) if s > 0 else None,
                                     round(s * watts * 1e3, 3)))
                for m, s in seconds.items()}

    modes = figures(secs)
    prefill = figures(mode_seconds(q, w.prefill(prefill_batch), chunk_bytes, fills, core_hz))
    compute = compute_seconds(w.instructions, core_hz)
    transfer = link_seconds(q, w.weight_bytes, w.streams)
    extra = {} if kv_secs is None else {"attention_kv": {
        "region": kv.region, "positions": kv.positions, "bytes": kv.nbytes,
        "sdram_ms": round(kv_secs["sdram"] * 1e3, 3), "sdram_floor_ms": round(kv_secs["floor"] * 1e3, 3),
        "sram_ms": round(kv_secs["sram"] * 1e3, 3), "sdram_mb_per_s": round(board.sdram.bytes_per_s / 1e6, 3),
        "note": "added to each mode at the last position; the prefill figures leave it out"}}
    return extra | {
        "board": board.name, "workload": w.name, "source": w.source, "modes": modes,
        "prefill": dict(prefill, batch=prefill_batch),
        "weight_bytes": w.weight_bytes, "instructions": w.instructions,
        "compute_ms": round(compute * 1e3, 3), "transfer_ms": round(transfer * 1e3, 3),
        "dwup_over_flash_bound": round(secs["dwup"] / secs["flash_bound"], 4) if secs["flash_bound"] else None,
        "dwup_speedup_over_in_place": round(secs["in_place"] / secs["dwup"], 4),
        "link": {"clock_mhz": q.clock_hz / 1e6, "ddr": q.ddr, "bits_per_clock": q.data_lines * q.chips,
                 "mb_per_s": round(q.bytes_per_s / 1e6, 3), "burst_overhead_cycles": q.burst_overhead_cycles},
        "assumptions": {"core_mhz": core_hz / 1e6, "cycles_per_instruction": CYCLES_PER_INSTRUCTION,
                        "miss_latency_cycles": MISS_LATENCY_CYCLES, "chunk_bytes": chunk_bytes,
                        "pipeline_fills": fills, "run_ua_per_mhz": RUN_UA_PER_MHZ, "supply_v": SUPPLY_V,
                        "watts": round(watts, 4)},
    }


# ------------------------------------------------------------ workloads
def q4_bytes(rows: int, cols: int, group: int) -> int:
    """Bytes of one INT4 matrix in the blob: the q4x4 layout's (nibbles in
    4-row tiles plus one float32 scale per row and group)."""
    return q4x4_bytes_of(rows, cols, group)


@dataclass(frozen=True)
class Shape:
    """A decoder's shape: what the timing model and the benchmark's random
    models (bench/synthetic.py) need."""

    dim: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int | None = None
    context: int = 512  # max_position_embeddings of a random model built from it

    def classifier(self) -> tuple[int, int]:
        return self.vocab, self.dim

    def matrices(self) -> list[tuple[int, int]]:
        """(rows, cols) of every matrix one decoded token reads, the tied
        classifier included (the last)."""
        hd = self.head_dim or self.dim // self.heads
        q, kv = self.heads * hd, self.kv_heads * hd
        per_layer = [(q, self.dim), (kv, self.dim), (kv, self.dim), (self.dim, q),
                     (self.hidden, self.dim), (self.hidden, self.dim), (self.dim, self.hidden)]
        return per_layer * self.layers + [self.classifier()]

    def macs(self) -> int:
        return sum(r * c for r, c in self.matrices())

    def weight_bytes(self, group: int = 32) -> int:
        return sum(q4_bytes(r, c, group) for r, c in self.matrices())


SHAPES = {
    "stories260k": Shape(dim=64, hidden=172, layers=5, heads=8, kv_heads=4, vocab=512),
    "stories15m": Shape(dim=288, hidden=768, layers=6, heads=6, kv_heads=6, vocab=32000, context=256),
    "smollm2-135m": Shape(dim=576, hidden=1536, layers=30, heads=9, kv_heads=3, vocab=49152, head_dim=64),
}


def workload_from_counts(name: str, shape: Shape, matvec_instructions: int, other_instructions: int,
                         source: str, group: int = 32) -> Workload:
    # gate and up are one fused stream in the blob (fusion.py); one stream per other matrix
    streams = len(shape.matrices()) - shape.layers
    rows, cols = shape.classifier()
    # the classifier's matvec instructions by its share of the MACs: the same kernel runs every matrix
    # (exact for scaled_workload; for a bench count its per-MAC rate is taken as the step's average)
    head_mv = round(matvec_instructions * rows * cols / shape.macs())
    return Workload(name, shape.weight_bytes(group), matvec_instructions, other_instructions, streams, source,
                    head_weight_bytes=q4_bytes(rows, cols, group), head_matvec_instructions=head_mv)


def workload_from_bench(name: str, shape: Shape, bench: dict, group: int = 32) -> Workload:
    """From `tinyllm-gen bench --json` (decode_instructions_per_token and its
    per-op breakdown; "matvec" is the weight-bound part)."""
    mv = bench["breakdown"].get("matvec", 0)
    w = workload_from_counts(name, shape, mv, bench["decode_instructions_per_token"] - mv,
                             f"measured: tinyllm-gen bench at position {bench['position']}", group)
    return replace(w, sampling_instructions=bench.get("sampling_instructions", 0))


def measured_workload(traffic: dict, bench: dict) -> Workload:
    """A compiled build's token: its bytes from report.json's traffic (plan/traffic.py), its
    instructions from `tinyllm-gen bench OUT --json` (the classifier's by its share of the MACs)."""
    mv = bench["breakdown"].get("matvec", 0)
    macs = traffic["macs_by_role"]
    head = round(mv * macs["classifier"] / max(1, macs["layers"] + macs["classifier"]))
    return Workload("this build", traffic["flash_bytes_per_token"], mv, bench["decode_instructions_per_token"] - mv,
                    traffic["streams"], f"measured: tinyllm-gen bench at position {bench['position']}",
                    sampling_instructions=bench.get("sampling_instructions", 0),
                    head_weight_bytes=traffic["bytes_by_role"]["classifier"], head_matvec_instructions=head)


def traffic_text(traffic: dict) -> str:
    """One line: what a decoded token reads from the weights' storage, by role and layout."""
    roles = traffic["bytes_by_role"]
    layouts = ", ".join(f"{k} {v:,} B" for k, v in traffic["bytes_by_layout"].items())
    return (f"weights read per decoded token: {traffic['flash_bytes_per_token']:,} B (layers {roles['layers']:,}, "
            f"classifier {roles['classifier']:,}, embedding row {roles['embedding']:,}, vectors "
            f"{roles['vectors']:,}; {layouts}; {traffic['pinned_bytes']:,} B pinned in SRAM)\n")


def scaled_workload(name: str, shape: Shape, matvec_per_mac: float, total_instructions: int | None,
                    other_per_mac: float, source: str, group: int = 32) -> Workload:
    """For a shape the emulators cannot run here: matvec instructions from a
    measured per-MAC figure; the rest from a measured total, or per MAC."""
    macs = shape.macs()
    mv = round(macs * matvec_per_mac)
    other = (total_instructions - mv) if total_instructions is not None else round(macs * other_per_mac)
    return workload_from_counts(name, shape, mv, other, source, group)


def shape_of_config(c) -> Shape:
    """A Shape from an ir.ModelConfig (or anything with its field names)."""
    return Shape(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.head_dim)


def predicted(shape: Shape, group: int, board: Board | None = None, bench: dict | None = None,
              prefill_batch: int = 1, chunk_bytes: int | None = None) -> dict:
    """The `predicted` object of bench --json for a q4x4 shape: per board
    (this one if it streams from QUADSPI, else every board that does) and
    mode.  With `bench` (bench --json's counts) the instructions are
    measured; without, estimated from the measured per-MAC figures below.
    A compiled build is priced by its own layouts instead (plan/traffic.py)."""
    if bench is not None:
        w = workload_from_bench("this model", shape, bench, group)
    else:
        w = scaled_workload("this model", shape, MEASURED_MATVEC_PER_MAC, None, MEASURED_OTHER_PER_MAC,
                            f"estimated: {MEASURED_MATVEC_PER_MAC} matvec + {MEASURED_OTHER_PER_MAC} other "
                            "instructions per MAC (bench, stories15M shape)", group)
    return predicted_for(w, board, prefill_batch, chunk_bytes)


def predicted_for(w: Workload, board: Board | None = None, prefill_batch: int = 1,
                  chunk_bytes: int | None = None, kv: KvRead | None = None) -> dict:
    """predict() on this board if it streams from QUADSPI, else on every board that does
    (kv: the build's KV cache in this board's SDRAM)."""
    boards = [board] if board is not None and board.qspi_flash is not None else \
        [b for b in map(load_board, board_names()) if b.qspi_flash is not None]
    chunk = chunk_bytes or DEFAULT_CHUNK_BYTES  # the build's stream chunk, where it streams
    return {b.name: predict(b, w, chunk_bytes=chunk, prefill_batch=prefill_batch,
                            kv=kv if b is board else None) for b in boards}


# Measured with `tinyllm-gen bench` on the stories15M shape (random weights,
# INT4 g32, int8 KV, position 10, cortex-m7 kernels): instructions per MAC of
# the matvec op, and of everything else per MAC.  Used where a model has not
# been run (plan, report) and to scale to SmolLM2-135M.
MEASURED_MATVEC_PER_MAC = 1.35
MEASURED_OTHER_PER_MAC = 0.066
# tllm_matmat_q4x4 at P tokens per call, instructions per MAC (MACs = P x
# rows x cols), `tinyllm-gen bench` at 256x256 g32 (README "Batched prefill
# kernel"); P = 1 is the matvec.  A batched prefill token's matvec work
# scales by MEASURED_MATMAT_PER_MAC[P] / [1].
MEASURED_MATMAT_PER_MAC = {1: 1.353, 2: 1.049, 3: 0.999, 4: 0.939}
# Instructions per MAC of each weight layout's kernels on the Cortex-M7, per
# token at P tokens per weight pass (P = 1: the decode matvec), exact counts
# from `tinyllm-gen bench` under QEMU (tllm_icount plugin), g32 activations:
# q4x4 the M7 assembly at 256x256; q4 the portable C kernel at 256x256;
# Q4_0/Q4_1/Q8_0 llama.cpp's kept blocks in their file layout (portable C with
# SMLAD sums) at 576x576.  Their batched kernels: a 2-layer dim-256 Q4_1
# model's 32-token prompt at P = 4 took 3.29 M instructions per prompt token
# against 2.97 M token by token (x1.108), the ratio used for every P > 1 of
# the three block formats.  s4pc (the per-channel scheme) has no count of its
# own here: the portable q4 kernel's rate stands in for it.  A layout or P
# missing from its row is priced at its P = 1 rate.
# q40x4/q41x4/q80x4: the same blocks in 4-row tiles (quant/formats.py,
# firmware/tllm_kernels_gguf_m7.c, the M7 assembly), measured by `python -m
# tinyllm_gen.bench.gguf_rates` (bench/micro_gguf.c: random blocks, the
# assembly checked bit-exact against its portable twin in the same run) over
# one SmolLM2-135M layer's seven matrices (576x576, 2 x 192x576, 576x576,
# 2 x 1536x576, 576x1536; per shape the figures differ by < 0.005; MACs = P x
# rows x cols).  The 49152x576 classifier, measured on its first 8192 rows
# (its 30 MB of Q8_0 do not fit the emulator's 16 MiB; every row costs the
# same), runs at the row's P = 1 rate for top-K chunks (q80x4 1.3333) and
# 0.018 more for the greedy argmax (64 rows per chunk: q80x4 1.3508).  The
# file layout's portable kernels measured the same way: Q4_0 2.2846, Q4_1
# 2.4714, Q8_0 2.3353.
KERNEL_RATES = {
    "q4x4": MEASURED_MATMAT_PER_MAC,
    "q4": {1: 14.755},
    "Q4_0": {1: 2.291, 2: 2.291 * 1.108, 3: 2.291 * 1.108, 4: 2.291 * 1.108},
    "Q4_1": {1: 2.478, 2: 2.478 * 1.108, 3: 2.478 * 1.108, 4: 2.478 * 1.108},
    "Q8_0": {1: 2.340, 2: 2.340 * 1.108, 3: 2.340 * 1.108, 4: 2.340 * 1.108},
    "s4pc": {1: 14.755},
    "q40x4": {1: 1.3166, 2: 1.0539, 3: 1.0084, 4: 0.9445},
    "q41x4": {1: 1.4104, 2: 1.1330, 3: 1.0925, 4: 1.0140},
    "q80x4": {1: 1.3326, 2: 1.1517, 3: 1.0084, 4: 0.9445},
}


def kernel_rate(layout: str, batch: int = 1) -> float:
    """Instructions per MAC of `layout`'s kernel at `batch` tokens per weight pass (KERNEL_RATES)."""
    row = KERNEL_RATES[layout]
    return row.get(batch, row[1])


def predicted_text(pred: dict) -> str:
    """A few lines for the text reports: per board, ms/token per mode."""
    lines = ["predicted per decoded token (codegen/timing.py: CPI "
             f"{CYCLES_PER_INSTRUCTION}, {CORE_HZ // 1_000_000} MHz core; see README 'Predicted speed per board')"]
    for name, p in pred.items():
        m = p["modes"]
        lines.append(f"  {name:<14} link {p['link']['mb_per_s']:g} MB/s: in place {m['in_place']['ms_per_token']:,.1f} ms"
                     f" (with prefetch {m['in_place_prefetch']['ms_per_token']:,.1f}), DWUP "
                     f"{m['dwup']['ms_per_token']:,.1f} ms ({m['dwup']['tokens_per_s']:.2f} tok/s, "
                     f"{m['dwup']['mj_per_token']:,.1f} mJ), flash bound {m['flash_bound']['ms_per_token']:,.1f} ms; "
                     f"a prompt token before the last (no classifier, {p['prefill']['batch']} per weight pass) "
                     f"{p['prefill']['dwup']['ms_per_token']:,.1f} ms (DWUP)")
        if "attention_kv" in p:
            a = p["attention_kv"]
            lines.append(f"  {'':<14} attention's KV reads at position {a['positions']} ({a['bytes']:,} B) from "
                         f"{a['region']}: {a['sdram_ms']:,.1f} ms (floor {a['sdram_floor_ms']:,.1f} ms at "
                         f"{a['sdram_mb_per_s']:g} MB/s; from AXI SRAM {a['sram_ms']:,.1f} ms), in the figures above")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------ speculative decoding
@dataclass(frozen=True)
class Acceptance:
    """How a draft does on some text, measured per k (guesses per pass at
    most): the mean tokens a pass over the weights produces, and how often a
    pass verifies P positions (a pass whose draft guesses nothing is a plain
    decode step, P = 1; one with j guesses verifies j + 1)."""

    name: str
    source: str  # the command that measured it
    tokens_per_pass: dict[int, float]  # k -> mean tokens per pass
    positions: dict[int, dict[int, float]]  # k -> {P: fraction of passes}
    # A draft model's steps per pass (empty for lookup, whose few hundred instructions are not priced):
    # k -> its steps with the head (the k guesses), and k -> its catch-up steps, head skipped (after a
    # pass that kept every guess, the last guess was never fed); the prompt's catch-up is prefill, not here
    draft_steps: dict[int, float] = field(default_factory=dict)
    catchup_steps: dict[int, float] = field(default_factory=dict)


# Measured: SmolLM2-135M-Instruct, greedy, 64 new tokens on each of the 22 prompts of
# models/prompts/speculation.jsonl (summaries, rewrites/extractions, open questions), host build with a
# 512-token context: `python scripts/measure_speculation.py --max-new-tokens 64` (its "all" row).
LOOKUP_ACCEPTANCE = Acceptance(
    "prompt lookup", "scripts/measure_speculation.py --max-new-tokens 64",
    {1: 1.283, 2: 1.403, 3: 1.465},
    {1: {1: 0.3793, 2: 0.6207}, 2: {1: 0.4135, 2: 0.0118, 3: 0.5748},
     3: {1: 0.4319, 2: 0.0112, 3: 0.0156, 4: 0.5413}})


def pass_seconds(board: Board, w: Workload, positions: int, mode: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 core_hz: float = CORE_HZ) -> float:
    """Seconds of one pass over `positions` tokens on this board: the mode's
    (mode_seconds) where the weights come over a QUADSPI link, the compute
    alone elsewhere ("compute": the host, QEMU, internal flash)."""
    v = w.verify(positions)
    if mode == "compute" or board.qspi_flash is None:
        return compute_seconds(v.instructions, core_hz)
    return mode_seconds(board.qspi_flash, v, chunk_bytes, 1, core_hz)[mode]


@dataclass(frozen=True)
class DraftCost:
    """A draft model's step on the board (`--speculate draft:MODEL`): its own
    token (its weights' bytes and instructions, plan/traffic.py priced at the
    same per-layout rates as any build) in its own mode (build_mode: DWUP
    when it streams, else in place over the QUADSPI window, or compute alone
    where no link is modelled)."""

    workload: Workload
    mode: str
    chunk_bytes: int = DEFAULT_CHUNK_BYTES


def draft_pass_seconds(board: Board, d: DraftCost, acc: Acceptance, k: int) -> float:
    """A draft model's seconds per pass: its measured steps with the head at
    a decoded token's price, its catch-up steps at a prompt token's (no
    classifier, no sampling: Workload.prefill(1))."""
    return (acc.draft_steps.get(k, 0.0) * pass_seconds(board, d.workload, 1, d.mode, d.chunk_bytes)
            + acc.catchup_steps.get(k, 0.0) * pass_seconds(board, d.workload.prefill(1), 1, d.mode, d.chunk_bytes))


def speculative_tokens_per_s(board: Board, w: Workload, acc: Acceptance, k: int, mode: str,
                             chunk_bytes: int = DEFAULT_CHUNK_BYTES, draft: DraftCost | None = None) -> float:
    """Decode tokens/s with up to k guesses per pass: the measured tokens per
    pass over the mean seconds of a pass (its positions as measured, and a
    draft model's steps: draft_pass_seconds); k = 0: plain decoding."""
    if k == 0:
        return 1.0 / pass_seconds(board, w, 1, mode, chunk_bytes)
    secs = sum(f * pass_seconds(board, w, p, mode, chunk_bytes) for p, f in acc.positions[k].items())
    if draft is not None:
        secs += draft_pass_seconds(board, draft, acc, k)
    return acc.tokens_per_pass[k] / secs


def speculative_floor_tokens_per_s(board: Board, w: Workload, acc: Acceptance, k: int,
                                   draft: DraftCost | None = None) -> float | None:
    """The physical floor's tokens/s (nothing can be faster): the bytes a pass
    reads from the weights' storage (the target's once per pass whatever its
    positions, and a draft model's per step: its catch-up steps without the
    classifier) per token produced, over the link's rate; None where no link
    is modelled or nothing is read."""
    q = board.qspi_flash
    if q is None:
        return None
    nbytes, tokens = float(w.weight_bytes), 1.0
    if k:
        tokens = acc.tokens_per_pass[k]
        if draft is not None:
            nbytes += (acc.draft_steps.get(k, 0.0) * draft.workload.weight_bytes
                       + acc.catchup_steps.get(k, 0.0) * draft.workload.prefill(1).weight_bytes)
    return tokens * q.bytes_per_s / nbytes if nbytes else None


def build_mode(board: Board, streamed: bool) -> str:
    """Which of the timing model's modes a build runs in: DWUP with a weight
    stream, in place over the QUADSPI window (the pessimistic reading) without
    one, and compute alone where no link is modelled."""
    if board.qspi_flash is None:
        return "compute"
    return "dwup" if streamed else "in_place"


def choose_k(board: Board, w: Workload, acc: Acceptance, k_max: int, mode: str,
             chunk_bytes: int = DEFAULT_CHUNK_BYTES, draft: DraftCost | None = None) -> list[tuple[int, float]]:
    """(k, predicted tokens/s) for k = 1 .. k_max, the fastest first (ties:
    the smaller k, which costs less RAM); plain decoding's figure is k = 0's."""
    rates = [(k, speculative_tokens_per_s(board, w, acc, k, mode, chunk_bytes, draft)) for k in range(1, k_max + 1)
             if k in acc.tokens_per_pass]
    return sorted(rates, key=lambda kr: (-round(kr[1], 9), kr[0]))


def speculative_prediction(board: Board, w: Workload, acc: Acceptance, k: int, mode: str,
                           chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict:
    """report.json's "speculate" prediction: tokens/s with and without, at this acceptance."""
    plain = speculative_tokens_per_s(board, w, acc, 0, mode, chunk_bytes)
    spec = speculative_tokens_per_s(board, w, acc, k, mode, chunk_bytes)
    return {"board": board.name, "mode": mode, "k": k, "acceptance": acc.name, "source": acc.source,
            "tokens_per_pass": round(acc.tokens_per_pass[k], 3), "plain_tokens_per_s": round(plain, 3),
            "tokens_per_s": round(spec, 3), "speedup": round(spec / plain, 3)}


def draft_prediction(board: Board, w: Workload, acc: Acceptance, k: int, mode: str, draft: DraftCost,
                     chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                     plain_build: tuple[Workload, str, int] | None = None) -> dict:
    """The draft record's "predicted": decode tokens/s with the draft model at k against plain decoding, what
    a pass costs (the target's verification over k + 1 positions, the draft's steps), and both figures'
    physical floors, each checked: a prediction faster than its floor is a bug in this model.  plain_build:
    (workload, mode, chunk bytes) of the target built without the draft (its plan may pin other weights);
    None: this build's own decode step."""
    pw, pmode, pchunk = plain_build if plain_build is not None else (w, mode, chunk_bytes)
    plain = speculative_tokens_per_s(board, pw, acc, 0, pmode, pchunk)
    spec = speculative_tokens_per_s(board, w, acc, k, mode, chunk_bytes, draft)
    floors = {"plain": speculative_floor_tokens_per_s(board, pw, acc, 0),
              "draft": speculative_floor_tokens_per_s(board, w, acc, k, draft)}
    for n, rate in (("plain", plain), ("draft", spec)):
        if floors[n] is not None and rate > floors[n] * (1 + 1e-9):
            raise AssertionError(f"timing: {rate} tokens/s ({n}) beats its flash floor of {floors[n]}")
    verify = sum(f * pass_seconds(board, w, p, mode, chunk_bytes) for p, f in acc.positions[k].items())
    return {"board": board.name, "mode": mode, "k": k, "acceptance": acc.name, "source": acc.source,
            "tokens_per_pass": round(acc.tokens_per_pass[k], 3),
            "draft_steps_per_pass": round(acc.draft_steps.get(k, 0.0), 3),
            "catchup_steps_per_pass": round(acc.catchup_steps.get(k, 0.0), 3),
            "draft_mode": draft.mode, "draft_ms_per_pass": round(draft_pass_seconds(board, draft, acc, k) * 1e3, 4),
            "verify_ms_per_pass": round(verify * 1e3, 4),
            "plain_tokens_per_s": round(plain, 3), "tokens_per_s": round(spec, 3), "speedup": round(spec / plain, 3),
            "plain_flash_bound_tokens_per_s": None if floors["plain"] is None else round(floors["plain"], 3),
            "flash_bound_tokens_per_s": None if floors["draft"] is None else round(floors["draft"], 3)}


def draft_prediction_text(p: dict) -> str:
    """One line of the draft record's prediction (compile, plan, report)."""
    where = f"{p['board']}, {p['mode']}" if p["mode"] != "compute" else f"{p['board']}, compute alone"
    def bound(rate) -> str:
        return f"{rate:.4g}" if rate is not None else "none (no flash read)"
    floor = (f"; flash floor {bound(p['flash_bound_tokens_per_s'])} against {bound(p['plain_flash_bound_tokens_per_s'])}"
             if p["mode"] != "compute" else "")
    loss = "; the draft does not pay here: drop it (--speculate lookup, or off)" if p["speedup"] < 1 else ""
    return (f"  predicted decode with the draft model: {p['tokens_per_s']:.4g} tokens/s against "
            f"{p['plain_tokens_per_s']:.4g} without it (x{p['speedup']:.2f}, {where}) at k={p['k']}: "
            f"{p['tokens_per_pass']:.2f} tokens and {p['draft_steps_per_pass'] + p['catchup_steps_per_pass']:.2f} "
            f"draft steps per pass ({p['acceptance']}: {p['source']}){floor}{loss}\n")


def speculate_text(doc: dict) -> str:
    """The report's lines on speculative decoding (report.json "speculate")."""
    p = doc["predicted"]
    where = f"{p['board']}, {p['mode']}" if p["mode"] != "compute" else f"{p['board']}, compute alone"
    return (f"speculation: {doc['draft']}:{doc['k']}, {doc['positions']} positions per verification pass "
            f"({doc['batched_bytes']:,} B of P-position head buffers); {doc['choice']}\n"
            f"  predicted decode: {p['tokens_per_s']:.4g} tokens/s against {p['plain_tokens_per_s']:.4g} plain "
            f"(x{p['speedup']:.2f}, {where}) at {p['tokens_per_pass']:.2f} tokens per pass ({p['acceptance']}: "
            f"{p['source']})\n")
