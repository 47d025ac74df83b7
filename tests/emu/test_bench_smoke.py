"""Emulator tier: the benchmark runs, its counts are exact and repeatable, and
the Cortex-M7 assembly matvec is bit-identical to its C twin in QEMU.
Speed is reported by `tinyllm-gen bench`, never asserted here."""
import shutil

import pytest

from tinyllm_gen.bench.bench import GGUF_VARIANTS, TILED_VARIANTS, bench_decode, bench_gguf_tiled, bench_kernels
from tinyllm_gen.build.cmake import build
from tinyllm_gen.quant.formats import GGUF_TILED
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree

from tinymodels import make_hf_model

pytestmark = pytest.mark.emu


@pytest.fixture(autouse=True)
def tools():
    for t in ("arm-none-eabi-gcc", "qemu-system-arm", "gcc"):
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


@pytest.mark.parametrize("group", [32, 64, 128])
def test_m7_assembly_is_bit_exact_and_counted(group):
    # bench/micro.c exits non-zero if the assembly and the C twin disagree
    figures = bench_kernels([(8, 40), (12, 172), (64, 64)], group)
    by = {(f.shape, f.kernel): f for f in figures}
    assert set(k for _, k in by) >= {"matvec_q4x4_m7", "matvec_q4x4_c", "matvec_q4_portable", "matvec_f32"}
    assert all(f.instructions > 0 for f in figures)
    # llama.cpp's kept blocks on the shapes whose columns are whole 32-weight blocks (not 12x172), for any group
    gguf = {(f.shape, f.kernel) for f in figures if f.kernel in GGUF_VARIANTS}
    assert gguf == {(s, k) for s in ("64x64",) for k in GGUF_VARIANTS}
    assert all(1.0 < by[("64x64", k)].instructions_per_mac < 8.0 for k in GGUF_VARIANTS)
    again = bench_kernels([(8, 40), (12, 172), (64, 64)], group)
    assert [f.instructions for f in figures] == [f.instructions for f in again]


def test_decode_counts_are_exact_and_add_up(tmp_path):
    model = make_hf_model(tmp_path / "m", context=64, seed=9)
    out = tmp_path / "out"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500")).tree, out)
    build(out)
    a, snaps_a = bench_decode(out, position=5)
    b, snaps_b = bench_decode(out, position=5)
    assert snaps_a.marks == snaps_b.marks  # exact and repeatable
    assert a.decode_instructions_per_token == a.decode_step_instructions + a.sampling_instructions
    assert sum(a.breakdown.values()) == a.decode_instructions_per_token
    norm = a.breakdown.get("norm", 0) + a.breakdown.get("norm+quantize", 0)
    assert a.breakdown["matvec"] > norm > 0


def test_stream_transfers_are_counted_apart_from_compute(tmp_path):
    """--stream all: the copy hooks' wait and start, the synchronous copy
    (memcpy) and the step's own bookkeeping are ops of their own in the
    breakdown; an in-place build has no stream op."""
    model = make_hf_model(tmp_path / "m", context=64, seed=9)
    figures = {}
    for stream in ("off", "all"):
        out = tmp_path / f"out-{stream}"
        write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500", stream=stream,
                                                      stream_chunk=1024)).tree, out)
        build(out)
        figures[stream] = bench_decode(out, position=5)[0].breakdown
    assert "stream wait+start" not in figures["off"] and figures["all"]["stream wait+start"] > 0
    assert figures["all"]["memcpy"] > figures["off"].get("memcpy", 0)
    assert figures["all"]["matvec"] >= figures["off"]["matvec"]  # the same rows, more calls (one per chunk)


def test_tiled_gguf_kernels_are_counted_and_bit_exact():
    """bench/micro_gguf.c exits non-zero unless each tiled kernel's assembly
    equals its portable twin and matmat equals P matvecs; its counts repeat."""
    shapes = [(13, 96), (8, 576)]  # a padded last tile; SmolLM2's width
    figures = bench_gguf_tiled(shapes)
    assert {(f.shape, f.kernel) for f in figures} == {(f"{r}x{c}", f"{layout} {v}") for r, c in shapes
                                                     for layout in GGUF_TILED.values() for v in TILED_VARIANTS}
    by = {(f.shape, f.kernel): f for f in figures}
    for layout in GGUF_TILED.values():  # the tiles beat the file's row-major blocks at any P
        kept = by[("8x576", f"{layout} kept_portable")].instructions_per_mac
        assert all(by[("8x576", f"{layout} {v}")].instructions_per_mac < kept for v in TILED_VARIANTS[:4])
    assert [f.instructions for f in figures] == [f.instructions for f in bench_gguf_tiled(shapes)]


def test_bench_of_a_speculative_tree_prices_its_verification_from_the_counted_step(tmp_path):
    """bench OUT --json on a --speculate lookup:2 tree: "speculate" is report.json's prediction redone from
    the decode step bench counted (prompt lookup's measured acceptance, the tree's board and mode)."""
    import json

    from cli_inprocess import cli
    from tinyllm_gen.board import load_board
    from tinyllm_gen.timing import LOOKUP_ACCEPTANCE, measured_workload, speculative_prediction

    model = make_hf_model(tmp_path / "m", context=64, seed=9)
    out = tmp_path / "out"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500", speculate="lookup:2")).tree, out)
    build(out)
    code, text, err = cli(["bench", str(out), "--json", "--position", "5"])
    assert code == 0, err
    printed = json.loads(text)
    spec = printed["speculate"]
    report = json.loads((out / "report.json").read_text())
    assert spec["k"] == 2 and spec["acceptance"] == LOOKUP_ACCEPTANCE.name and spec["counted"].startswith("bench")
    w = measured_workload(report["traffic"], {k: v for k, v in printed.items() if k not in ("predicted", "speculate")})
    want = speculative_prediction(load_board("qemu-mps2-an500"), w, LOOKUP_ACCEPTANCE, 2,
                                  report["speculate"]["predicted"]["mode"])
    assert {k: spec[k] for k in want} == want
    assert spec["tokens_per_s"] > 0 and spec["plain_tokens_per_s"] > 0
