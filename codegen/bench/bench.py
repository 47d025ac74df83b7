"""`tinyllm-gen bench`: exact instruction counts of the firmware under QEMU.

Two measurements, both through the tllm_icount plugin (exact, repeatable):

* decode: the compiled model in OUT runs a prompt of `position` tokens and
  decodes a few more; the decode step at that position plus its sampling is
  "instructions per decoded token", split per op by which function ran;
* kernels: a micro-benchmark firmware (bench/micro.c) runs each matvec
  shape of the model once per kernel variant -> instructions per MAC; it
  also checks the M7 assembly against its C twin (bit-exact or it fails).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jinja2

from ..build.cmake import build
from ..build.out import image_path, read_manifest
from ..resources import firmware_dir, package_file
from ..errors import UserError
from ..families import config_header
from ..run.protocol import pack_request, parse_output
from ..board import Board, load_board
from ..emit.link_layout import static_link_layout
from ..memory_map import Region
from ..quant.formats import GGUF_BLOCK, GGUF_BLOCK_BYTES, GGUF_TILED, gguf_tiled_bytes_of
from ..reference.sampler import SamplingOptions
from .counting import Snapshots, run_counted
from ..compile import CompileOptions, compile_path, write_tree
from .synthetic import SHAPES, write_random_llama

MICRO_SOURCE = package_file("bench/micro.c")
MICRO_GGUF_SOURCE = package_file("bench/micro_gguf.c")
# Which op a function's instructions belong to (the decode breakdown).
OP_OF_FUNCTION = {
    "tllm_matvec_q4": "matvec", "tllm_matvec_q4x4": "matvec", "tllm_matvec_q4x4_c": "matvec",
    "tllm_mv_q4x4_b4": "matvec", "tllm_mv_q4x4_b8": "matvec", "tllm_mv_q4x4_b16": "matvec",
    "tllm_quantize_i8": "quantize", "tllm_quantize_x16": "quantize",
    "tllm_attention_i8": "attention", "tllm_attention_kv4": "attention",
    "tllm_attention_scores_i8": "attention", "tllm_attention_values_i8": "attention",
    "tllm_attention_scores_kv4": "attention", "tllm_attention_values_kv4": "attention",
    "tllm_rmsnorm": "norm", "tllm_rmsnorm_x16": "norm+quantize", "tllm_rope": "rope", "tllm_silu_mul": "silu_mul", "tllm_silu_mul_pairs_x16": "silu_mul+quantize",
    "tllm_quantize_x16b": "quantize", "tllm_rmsnorm_x16b": "norm+quantize",
    "tllm_silu_mul_pairs_x16b": "silu_mul+quantize", "tllm_matmat_q4x4": "matmat", "tllm_matmat_q4x4_c": "matmat", "tllm_x16_batch": "x16_batch",
    **{f"tllm_mm_q4x4_b{nb}_p{p}": "matmat" for nb in (4, 8, 16) for p in (2, 3, 4)},
    "tllm_embed_q4": "embedding", "tllm_embed_q4x4": "embedding", "tllm_add": "add",
    "tllm_topk_push": "topk", "topk_insert": "topk",  # --sampler topk:K: the running set the chunks feed
    "tllm_matmat_q4": "matmat", "tllm_matmat_q40": "matmat", "tllm_matmat_q41": "matmat", "tllm_matmat_q80": "matmat",
    # llama.cpp's kept blocks (tllm_kernels_gguf.c)
    "tllm_matvec_q40": "matvec", "tllm_matvec_q41": "matvec", "tllm_matvec_q80": "matvec",
    "tllm_embed_q40": "embedding", "tllm_embed_q41": "embedding", "tllm_embed_q80": "embedding",
    # the same blocks in 4-row tiles (tllm_kernels_gguf_m7.c): wrappers, assembly, portable twins
    **{f"tllm_{k}_{f}{c}": op for f in GGUF_TILED.values() for k, op in (("matvec", "matvec"), ("matmat", "matmat"))
       for c in ("", "_c")},
    **{f"tllm_mv_{f}": "matvec" for f in GGUF_TILED.values()},
    **{f"tllm_mm_{f}_p{p}": "matmat" for f in GGUF_TILED.values() for p in (2, 3, 4)},
    **{f"tllm_embed_{f}": "embedding" for f in GGUF_TILED.values()},
    "row_dot": "matvec",  # the tiled kernels' portable twin (gcc's clone: row_dot.isra.0)
    # --stream: the board's copy hooks (tllm_board.h), each chunk's wait and start; under QEMU the synchronous
    # hook's memcpy is the transfer itself, which the MDMA makes on the H750
    "tllm_board_copy_start": "stream wait+start", "tllm_board_copy_wait": "stream wait+start",
    "tllm_board_copy_args_error": "stream wait+start", "memcpy": "memcpy",
    # the generated functions' own instructions: loops, descriptors, the inlined stream bookkeeping (tllm_stream.h)
    "tllm_model_step": "step", "tllm_model_prefill": "step",
}
# in micro.c's mark order; a "_pP" suffix: P tokens per call (batched prefill), MACs = P x rows x cols
MICRO_VARIANTS = ("quantize_i8", "matvec_q4_portable", "quantize_x16", "matvec_q4x4_m7", "matvec_q4x4_c",
                  "matvec_f32", "x16_batch_p4", "matmat_q4x4_m7_p1", "matmat_q4x4_m7_p2", "matmat_q4x4_m7_p3",
                  "matmat_q4x4_m7_p4", "matmat_q4x4_c_p4", "quantize_x16b_p4")
CMSIS_VARIANTS = ("cmsis_nn_s4", "cmsis_nn_s8")
# llama.cpp's kept blocks (tllm_kernels_gguf.c), after every shape above, on the shapes whose columns are whole
# 32-weight blocks: a mark before and after each (the block fill between them is not measured)
GGUF_VARIANTS = ("matvec_q4_0", "matvec_q4_1", "matvec_q8_0")
# llama.cpp's blocks in 4-row tiles (tllm_kernels_gguf_m7.c; bench/micro_gguf.c's mark order per shape and
# format): the matvec, the batched matmat at P = 2..4, the greedy classifier (argmax, 64 rows per chunk) and,
# for comparison, the portable kept-block matvec of the same matrix in the file's layout
TILED_VARIANTS = ("matvec", "matmat_p2", "matmat_p3", "matmat_p4", "argmax", "kept_portable")
LARGEST_BLOCK_BYTES = max(GGUF_BLOCK_BYTES.values())  # Q8_0's, per GGUF_BLOCK weights: sizes the one block buffer


def gguf_shapes(shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(r, c) for r, c in shapes if c % GGUF_BLOCK == 0]


@dataclass(frozen=True)
class KernelFigure:
    shape: str  # "rows x cols"
    kernel: str
    instructions: int
    macs: int

    @property
    def instructions_per_mac(self) -> float:
        return self.instructions / self.macs


@dataclass
class BenchResult:
    position: int
    decode_instructions_per_token: int
    decode_step_instructions: int
    sampling_instructions: int
    breakdown: dict[str, int]
    kernels: list[KernelFigure] = field(default_factory=list)
    repeatable: bool | None = None
    # the `position` prompt tokens together (prefill_batch per call): only the last runs the classifier
    prefill_instructions: int = 0
    prefill_batch: int = 1  # prompt tokens per tllm_model_prefill call (the manifest's)

    def to_json(self) -> dict:
        d = asdict(self)
        d["kernels"] = [dict(asdict(k), instructions_per_mac=round(k.instructions_per_mac, 4)) for k in self.kernels]
        return d


def _op_breakdown(per_function: dict[str, int]) -> dict[str, int]:
    ops: dict[str, int] = {}
    for name, n in per_function.items():
        op = OP_OF_FUNCTION.get(name.split(".")[0], "other")  # gcc clones: name.constprop.0
        ops[op] = ops.get(op, 0) + n
    return dict(sorted(ops.items(), key=lambda kv: -kv[1]))


def bench_decode(out: Path, position: int = 10, decode_tokens: int = 2) -> tuple[BenchResult, Snapshots]:
    """Counts of the decode step at `position` (prompt = `position` tokens)."""
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    if not board.is_arm or board.emulator is None:
        raise UserError(f"bench counts instructions per function under QEMU, which has no {board.name}: "
                        "compile with --board qemu-mps2-an500 (the same kernels)")
    elf = image_path(out, board)
    if not elf.is_file():
        raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
    if position + decode_tokens >= manifest["max_seq"]:
        raise UserError(f"--position {position} does not fit the context of {manifest['max_seq']}")
    bos = manifest["tokenizer"]["bos_id"] or 0
    prompt = [bos] + [(7 * i + 3) % manifest["tokenizer"]["vocab_size"] for i in range(position - 1)]
    request = out / "build" / "bench_request.bin"
    request.write_bytes(pack_request(prompt, decode_tokens + 1, SamplingOptions()))
    snaps = run_counted(elf, board, out / "weights.bin", request)
    if snaps.exit_code != 0:
        raise UserError(f"firmware exited with status {snaps.exit_code} under the bench: "
                        f"{parse_output(snaps.console).error or 'see its console output'}")
    # marks: (before, after) per prefill call (prefill_batch prompt tokens each), then "after sample";
    # then per decode step (before, after, after sample)
    calls = -(-position // int(manifest.get("prefill_batch", 1)))
    first_decode = 2 * calls + 1
    before, after_step, after_sample = first_decode, first_decode + 1, first_decode + 2
    per_fn = snaps.between(before, after_sample)
    step = snaps.total_between(before, after_step)
    sampling = snaps.total_between(after_step, after_sample)
    breakdown = _op_breakdown(snaps.between(before, after_step))
    breakdown["sampling"] = sampling
    result = BenchResult(position=position, decode_instructions_per_token=step + sampling,
                         decode_step_instructions=step, sampling_instructions=sampling, breakdown=breakdown,
                         prefill_instructions=snaps.total_between(0, 2 * calls - 1),
                         prefill_batch=int(manifest.get("prefill_batch", 1)))
    assert sum(per_fn.values()) == step + sampling
    return result, snaps


def matvec_shapes(config: dict) -> list[tuple[int, int]]:
    """The distinct (rows, cols) of the model's matmuls (without the
    classifier: the decode bench measures it, and its vocabulary-sized rows
    would need megabytes of micro-benchmark buffers)."""
    dim, hidden = config["dim"], config["hidden_dim"]
    q, kv = config["n_heads"] * config["head_dim"], config["n_kv_heads"] * config["head_dim"]
    # 256x256: the reference shape the kernel targets are quoted at
    return sorted({(q, dim), (kv, dim), (dim, q), (hidden, dim), (dim, hidden), (256, 256)})


def micro_buffers(shapes: list[tuple[int, int]], group: int) -> dict[str, int]:
    """micro.c's buffer sizes for these shapes (the largest need of any one
    shape per buffer, as fill() lays the operands out), as its -D defines."""
    def q4x4_bytes(r: int, c: int) -> int:  # per 4-row tile and group: 4 words per 8 weights, 4 scales
        return (r + 3) // 4 * sum(16 * ((min(group, c - g0) + 7) // 8) + 16 for g0 in range(0, c, group))

    return {
        "TLLM_BENCH_MAX_ROWS": max(r for r, _ in shapes),
        "TLLM_BENCH_MAX_COLS": max(c for _, c in shapes),
        "TLLM_BENCH_MAX_ELEMS": max(r * c for r, c in shapes),
        "TLLM_BENCH_Q4_BYTES": max(r * ((c + 1) // 2) for r, c in shapes),
        "TLLM_BENCH_SCALES": max(r * -(-c // group) for r, c in shapes),
        "TLLM_BENCH_Q4X4_BYTES": max(q4x4_bytes(r, c) for r, c in shapes) + 1024,
        "TLLM_BENCH_GGUF_BYTES": max([r * (c // GGUF_BLOCK) * LARGEST_BLOCK_BYTES for r, c in gguf_shapes(shapes)]
                                     + [4]),
    }


def _micro_ram(board: Board, buffers: dict[str, int], cmsis_nn: bool) -> tuple[int, int]:
    """(origin, bytes) of the micro benchmark's RAM: the data RAM when its
    buffers fit there, else the 16 MiB external window (free here: the micro
    benchmark loads no weights; QEMU counts instructions the same anywhere)."""
    b = buffers
    need = (b["TLLM_BENCH_Q4_BYTES"] + 4 * b["TLLM_BENCH_SCALES"] + b["TLLM_BENCH_Q4X4_BYTES"] + b["TLLM_BENCH_GGUF_BYTES"]
            + b["TLLM_BENCH_MAX_ELEMS"] * (4 + (1 if cmsis_nn else 0))
            + 16 * (b["TLLM_BENCH_MAX_COLS"] + b["TLLM_BENCH_MAX_ROWS"]) + 256 * 1024)  # vectors, stack, slack
    ram = board.memory.region(board.memory.stack_region)
    external = board.memory.weights_region()  # PSRAM on QEMU
    for region in (ram, external):
        if need <= region.size:
            return region.address, region.size
    raise UserError(f"kernel bench needs {need:,} B of buffers (up to {b['TLLM_BENCH_MAX_ELEMS']:,} weights "
                    f"in one shape), more than the {external.size:,} B the emulator has: "
                    "bench smaller shapes")


def bench_kernels(shapes: list[tuple[int, int]], group: int, cmsis_nn: Path | None = None) -> list[KernelFigure]:
    """Build and run bench/micro.c for these shapes on the QEMU board, its
    buffers sized for the largest of them (micro_buffers)."""
    snaps = run_micro(shapes, group, cmsis_nn)
    variants = MICRO_VARIANTS + (CMSIS_VARIANTS if cmsis_nn is not None else ())
    overhead = snaps.total_between(0, 1)  # one mark call, measured
    figures = []
    for s, (r, c) in enumerate(shapes):
        first = 2 + s * (len(variants) + 1)  # each shape: fill(), then a mark before and after every variant
        for j, v in enumerate(variants):
            n = snaps.total_between(first + j, first + j + 1) - overhead
            batch = int(v.rsplit("_p", 1)[1]) if "_p" in v and v.rsplit("_p", 1)[1].isdigit() else 1
            macs = batch * c if v.startswith(("quantize", "x16_batch")) else batch * r * c
            figures.append(KernelFigure(f"{r}x{c}", v, n, macs))
    first = 2 + len(shapes) * (len(variants) + 1)
    for s, (r, c) in enumerate(gguf_shapes(shapes)):
        for j, v in enumerate(GGUF_VARIANTS):
            at = first + 2 * (s * len(GGUF_VARIANTS) + j)
            figures.append(KernelFigure(f"{r}x{c}", v, snaps.total_between(at, at + 1) - overhead, r * c))
    return figures


def bench_gguf_tiled(shapes: list[tuple[int, int]]) -> list[KernelFigure]:
    """Instruction counts of the tiled GGUF kernels (bench/micro_gguf.c) at
    these shapes (columns a multiple of 32), per format and variant: kernel
    names "<layout> <variant>" (q41x4 matmat_p4, ...), MACs P x rows x cols."""
    snaps = run_micro_gguf(shapes)
    overhead = snaps.total_between(0, 1)
    figures = []
    per = len(TILED_VARIANTS) + 1  # marks per (shape, format)
    for s, (r, c) in enumerate(shapes):
        for f, layout in enumerate(GGUF_TILED.values()):
            first = 2 + (s * len(GGUF_TILED) + f) * per
            for j, v in enumerate(TILED_VARIANTS):
                batch = int(v[-1]) if v.startswith("matmat_p") else 1
                n = snaps.total_between(first + j, first + j + 1) - overhead
                figures.append(KernelFigure(f"{r}x{c}", f"{layout} {v}", n, batch * r * c))
    return figures


def run_micro_gguf(shapes: list[tuple[int, int]]) -> Snapshots:
    """bench/micro_gguf.c built for these shapes and run counted under QEMU
    (its console holds every output's hash, "@BENCH gguf ...")."""
    board = load_board("qemu-mps2-an500")
    for r, c in shapes:
        if not (0 < r < 65536 and 0 < c < 65536) or c % GGUF_BLOCK:
            raise UserError(f"tiled GGUF bench shape {r}x{c}: rows 1..65535, columns a multiple of {GGUF_BLOCK}")
    tiled = max(gguf_tiled_bytes_of(q, r, c) for q in GGUF_TILED for r, c in shapes)
    rows, cols = max(r for r, _ in shapes), max(c for _, c in shapes)
    # tiles, 4 tokens' x16 streams and 3 x16b streams, 9 output vectors of up to 4 tokens, stack and slack
    need = tiled + 8 * (cols // GGUF_BLOCK * 72 * 4) + 4 * rows * 4 * 6 + 256 * 1024
    external = board.memory.weights_region()
    if need > external.size:
        raise UserError(f"tiled GGUF bench needs {need:,} B, more than the emulator's {external.size:,} B: "
                        "bench fewer rows (every row costs the same, so a row subset gives the rate)")
    defines = ["TLLM_BENCH_SHAPES=" + ",".join(f"{{{r},{c}}}" for r, c in shapes),
               f"TLLM_BENCH_MAX_ROWS={rows}", f"TLLM_BENCH_MAX_COLS={cols}", f"TLLM_BENCH_TILED_BYTES={tiled}"]
    sources = [str(MICRO_GGUF_SOURCE)] + [str(firmware_dir() / f) for f in
                                          ("tllm_kernels.c", "tllm_kernels_m7.c", "tllm_kernels_gguf.c",
                                           "tllm_kernels_gguf_m7.c")]
    return _build_and_count(board, sources, [], [], defines, (external.address, external.size))


def _build_and_count(board: Board, sources: list[str], cmsis_sources: list[str], cmsis_includes: list[str],
                     defines: list[str], ram: tuple[int, int]) -> Snapshots:
    """Build a micro benchmark (its RAM at ram = (origin, bytes)) and run it counted."""
    with tempfile.TemporaryDirectory(prefix="tllm-micro-") as tmp:
        t = Path(tmp)
        sources = sources + [str(p) for p in board.source_paths()]
        lds = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(board.file(board.linker_script).read_text())
        region = Region("ram", ram[0], ram[1], "sram", "ram", True, False, "arena", "the benchmark's RAM")
        (t / "linker.ld").write_text(lds.render(**static_link_layout(board, region, 16384).variables()))
        (t / "board_config.h").write_text("".join(f"#define {c.name} {c.value}\n" for c in config_header(board)))
        (t / "CMakeLists.txt").write_text(_micro_cmake(sources, cmsis_sources, cmsis_includes, defines, board,
                                                       t / "linker.ld"))
        (t / "arm-none-eabi.cmake").write_text((firmware_dir() / "cmake" / "arm-none-eabi.cmake").read_text())
        for cmd in (["cmake", "-S", str(t), "-B", str(t / "b"), "-DCMAKE_TOOLCHAIN_FILE=" + str(t / "arm-none-eabi.cmake"),
                     "-DCMAKE_BUILD_TYPE=Release"], ["cmake", "--build", str(t / "b"), "-j", str(os.cpu_count() or 2)]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                raise UserError(f"kernel bench build failed: {proc.stdout[-400:]} {proc.stderr[-400:]}")
        snaps = run_counted(t / "b" / "micro.elf", board, None, None)
    if snaps.exit_code != 0:
        raise UserError(f"kernel bench failed (status {snaps.exit_code}): {snaps.console.strip()}")
    return snaps


def run_micro(shapes: list[tuple[int, int]], group: int, cmsis_nn: Path | None = None) -> Snapshots:
    """bench/micro.c built for these shapes and run counted under QEMU (its
    console holds the batched outputs' hashes, "@BENCH out ...")."""
    board = load_board("qemu-mps2-an500")
    for r, c in shapes:
        if not (0 < r < 65536 and 0 < c < 65536):
            raise UserError(f"kernel bench shape {r}x{c}: rows and columns must be 1..65535")
    buffers = micro_buffers(shapes, group)
    ram = _micro_ram(board, buffers, cmsis_nn is not None)
    sources = [str(MICRO_SOURCE)] + [str(firmware_dir() / f) for f in
                                     ("tllm_kernels.c", "tllm_kernels_m7.c", "tllm_kernels_gguf.c")]
    defines = [f"TLLM_BENCH_GROUP={group}",
               "TLLM_BENCH_SHAPES=" + ",".join(f"{{{r},{c}}}" for r, c in shapes)]
    if gguf_shapes(shapes):
        defines.append("TLLM_BENCH_GGUF_SHAPES=" + ",".join(f"{{{r},{c}}}" for r, c in gguf_shapes(shapes)))
    defines += [f"{k}={v}" for k, v in buffers.items()]
    cmsis_sources, cmsis_includes = [], []
    if cmsis_nn is not None:
        root = Path(cmsis_nn)
        for sub in ("Source/FullyConnectedFunctions", "Source/NNSupportFunctions"):
            # integer kernels only: the float ones need headers and an FP16 unit we do not use
            cmsis_sources += sorted(str(p) for p in (root / sub).glob("*.c") if not p.stem.endswith(("_f16", "_f32")))
        cmsis_includes = [str(root / "Include")]
        defines.append("TLLM_BENCH_CMSIS_NN=1")
    return _build_and_count(board, sources, cmsis_sources, cmsis_includes, defines, ram)


def _micro_cmake(sources, cmsis_sources, cmsis_includes, defines, board, linker) -> str:
    lines = ["cmake_minimum_required(VERSION 3.20)", "project(tllm_micro C ASM)",
             "set(CMAKE_C_FLAGS_RELEASE \"\")",
             "add_executable(micro " + " ".join(sources + cmsis_sources) + ")",
             'set_target_properties(micro PROPERTIES SUFFIX ".elf")',
             f"target_include_directories(micro PRIVATE {firmware_dir()} {linker.parent} {' '.join(cmsis_includes)})",
             "target_compile_definitions(micro PRIVATE " + " ".join(f'"{d}"' for d in defines) + ")",
             "target_compile_options(micro PRIVATE -Wall -Wextra " + " ".join(board.cflags) + ")",
             # CMSIS-NN is the user's code: its warnings are not ours to fail on; -O3 as ARM measures it
             "set_source_files_properties(" + " ".join(sources) + " PROPERTIES COMPILE_OPTIONS -Werror)",
             ("set_source_files_properties(" + " ".join(cmsis_sources) + " PROPERTIES COMPILE_OPTIONS -O3)")
             if cmsis_sources else "",
             "target_link_options(micro PRIVATE " + " ".join(board.ldflags) + f" -T{linker})",
             "target_link_libraries(micro PRIVATE " + " ".join(board.libs) + ")"]
    return "\n".join(line for line in lines if line) + "\n"


def format_table(result: BenchResult) -> str:
    lines = [f"decode at position {result.position}: {result.decode_instructions_per_token:,} instructions per token "
             f"(step {result.decode_step_instructions:,}, sampling {result.sampling_instructions:,}); "
             f"the {result.position}-token prompt before it {result.prefill_instructions:,} "
             f"({result.prefill_batch} per pass over the weights, the classifier only for its last token)"]
    total = result.decode_instructions_per_token
    for op, n in result.breakdown.items():
        lines.append(f"  {op:<18} {n:>12,}  {100 * n / total:5.1f}%")
    if result.kernels:
        lines += ["", f"  {'shape':<10} {'kernel':<20} {'instructions':>12} {'per MAC':>8}"]
        for k in result.kernels:
            per = "" if k.kernel.startswith(("quantize", "x16_batch")) else f"{k.instructions_per_mac:8.3f}"
            lines.append(f"  {k.shape:<10} {k.kernel:<20} {k.instructions:>12,} {per:>8}")
    if result.repeatable is not None:
        lines.append(f"\nrepeatable: {'yes, identical counts on a second run' if result.repeatable else 'NO'}")
    return "\n".join(lines)


def result_json(result: BenchResult) -> str:
    return json.dumps(result.to_json(), indent=2)


def bench_all(out: Path | None, shape: str, group: int, position: int, cmsis_nn: Path | None) -> BenchResult:
    """The whole benchmark: decode counts (twice, to prove they repeat) and
    the kernel table for the model's matvec shapes."""
    with tempfile.TemporaryDirectory(prefix="tllm-bench-model-") as tmp:
        if out is None:
            out = _compile_synthetic(Path(tmp), shape, group)
        result, first = bench_decode(out, position)
        again, second = bench_decode(out, position)
        result.repeatable = first.marks == second.marks and result.breakdown == again.breakdown
        manifest = read_manifest(out)
        cfg = json.loads((Path(out) / "report.json").read_text()).get("model_config") or _config_of(out)
        result.kernels = bench_kernels(matvec_shapes(cfg), manifest["options"]["group_size"], cmsis_nn)
        # llama.cpp's blocks in 4-row tiles at the shapes whose columns are whole 32-weight blocks
        result.kernels += bench_gguf_tiled(gguf_shapes(matvec_shapes(cfg)))
    return result


def _config_of(out: Path) -> dict:
    text = (Path(out) / "src" / "tllm_model.h").read_text()
    vals = {}
    for key, name in (("dim", "TLLM_DIM"), ("hidden_dim", "TLLM_HIDDEN_DIM"), ("n_heads", "TLLM_N_HEADS"),
                      ("n_kv_heads", "TLLM_N_KV_HEADS"), ("head_dim", "TLLM_HEAD_DIM")):
        for line in text.splitlines():
            if line.startswith(f"#define {name} "):
                vals[key] = int(line.split()[2])
    return vals


def _compile_synthetic(root: Path, shape: str, group: int) -> Path:
    model = write_random_llama(root / "model", SHAPES[shape])
    out = root / "out"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500", group_size=group)).tree, out)
    build(out)
    return out
