"""Multi-region planning on the STM32H750 boards: board memory maps as data,
placement preferences with fallback, no overlaps (hypothesis), lower bound
per region, the budget, int4 KV sizes, --max-seq auto and the fit-or-fail
sentence on the two target shapes (built from shapes only, no weights)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.errors import UserError
from tinyllm_gen.ir import ModelConfig, build_decoder_graph
from tinyllm_gen.plan.lifetimes import BufferRequest
from plans import auto_max_seq, plan_memory, planner, step_of
from tinyllm_gen.fit.search import FitRequest, plan_step
from tinyllm_gen.lower.records import StepSource
from tinyllm_gen.plan.placer import overlapping_pairs_regions, place_regions
from tinyllm_gen.plan.regions import board_memory, check_budget
from tinyllm_gen.board import load_board

H7 = ("stm32h750b-dk", "weact-h750")
KIB = 1024


def shape(dim, hidden, layers, heads, kv, vocab, seq, kv_bits=8):
    c = ModelConfig("llama", dim, hidden, layers, heads, kv, dim // heads, vocab, seq, tied_embeddings=True,
                    eos_ids=(2,))
    return StepSource(build_decoder_graph(c, {}), 32, kv_bits)


STORIES260K = (64, 172, 5, 8, 4, 512, 512)
STORIES15M = (288, 768, 6, 6, 6, 32000, 256)


@pytest.mark.parametrize("name", H7)
def test_h750_memory_map_is_the_datasheet(name):
    mem = board_memory(load_board(name))
    got = {r.name: (r.address, r.size, r.speed, r.dma_reachable) for r in mem.regions}
    # reachable by the MDMA, the stream's copy engine, through its AHBS port (DMA1/2 cannot reach the TCMs)
    assert got["itcm"] == (0x00000000, 64 * KIB, "tcm", True)
    assert got["dtcm"] == (0x20000000, 128 * KIB, "tcm", True)
    assert got["axi"] == (0x24000000, 512 * KIB, "sram", True)
    assert got["sram1"][:2] == (0x30000000, 128 * KIB) and got["sram2"][:2] == (0x30020000, 128 * KIB)
    assert got["sram3"][:2] == (0x30040000, 32 * KIB) and got["sram4"][:2] == (0x38000000, 64 * KIB)
    assert got["flash"][:2] == (0x08000000, 128 * KIB)
    assert got["qspi"][0] == 0x90000000
    assert got["qspi"][1] == (128 if name == "stm32h750b-dk" else 8) * 1024 * 1024
    assert mem.sram_bytes == 992 * KIB and mem.stack_region == "dtcm"


def test_qemu_keeps_one_ram_region():
    mem = board_memory(load_board("qemu-mps2-an500"))
    assert [r.name for r in mem.arena_regions] == ["ram"]


region_buffers = st.lists(
    st.tuples(st.integers(1, 3000), st.integers(0, 20), st.integers(0, 8), st.sampled_from(["hot", "bulk", "dma"])),
    min_size=1, max_size=40,
).map(lambda items: [BufferRequest(f"b{i}", "int8_t", n, t, t + d, "activation", placement=p)
                     for i, (n, t, d, p) in enumerate(items)])
CAPACITY = {"dtcm": 4000, "axi": 9000, "sram1": 3000}
ORDER = {"hot": ("dtcm", "axi", "sram1"), "bulk": ("axi", "sram1", "dtcm"), "dma": ("axi", "sram1")}


@settings(max_examples=150, deadline=None)
@given(region_buffers)
def test_regions_never_overlap_live_buffers_and_respect_dma(buffers):
    where = place_regions(buffers, CAPACITY, ORDER)
    assert overlapping_pairs_regions(buffers, where) == []
    for b in buffers:
        region, off = where[b.name]
        assert region in ORDER[b.place_class]  # dma buffers never land in DTCM
        assert off % b.align == 0
    assert where == place_regions(list(reversed(buffers)), CAPACITY, ORDER)  # deterministic


def test_fallback_to_next_region_when_preferred_is_full():
    big = [BufferRequest(f"h{i}", "int8_t", 3000, 0, 5, "activation", placement="hot") for i in range(3)]
    where = place_regions(big, CAPACITY, ORDER)
    assert sorted(r for r, _ in where.values()) == ["axi", "axi", "dtcm"]


@pytest.mark.parametrize("board", ["qemu-mps2-an500", *H7])
@pytest.mark.parametrize("kv_bits", [8, 4])
def test_stories260k_fits_256k_at_512_with_ratio_1(board, kv_bits):
    plan = plan_memory(shape(*STORIES260K, kv_bits=kv_bits), 512, 512 * KIB, board=load_board(board))
    assert plan.total_bytes <= 256 * KIB  # stack and statics included
    for r in plan.regions:
        assert r.arena_bytes == r.lower_bound_bytes and r.fits
    if board in H7:
        kinds = {b.region for b in plan.buffers if b.request.kind == "kv"}
        hot = {b.region for b in plan.buffers if b.request.kind in ("activation", "scratch")}
        assert kinds == {"axi"} and hot == {"dtcm"}


def test_int4_kv_is_about_half_of_int8():
    p8 = plan_memory(shape(*STORIES260K), 512, 512 * KIB)
    p4 = plan_memory(shape(*STORIES260K, kv_bits=4), 512, 512 * KIB)
    # 5 layers x K,V x 512 tokens x 32 values: int8 1 B + 1 scale per 8; int4 0.5 B + 1 scale per 8
    assert p8.kv_cache_bytes == 5 * 2 * (512 * 32 + 512 * 4 * 4)
    assert p4.kv_cache_bytes == 5 * 2 * (512 * 16 + 512 * 4 * 4)


def test_stories15m_says_why_not_and_what_fits():
    board = load_board("stm32h750b-dk")
    with pytest.raises(UserError) as e:
        plan_memory(shape(*STORIES15M, kv_bits=4), 256, 512 * KIB, board=board)
    msg = str(e.value)
    assert "\n" not in msg and "budget is 524,288 B (over by" in msg and "KV cache int4 at 256 tokens" in msg
    assert "fits with --ram-budget" in msg and "--max-seq" in msg
    budget = msg.split("--ram-budget ")[1].split()[0].rstrip(",")
    assert "--kv-region sdram" in msg  # the DK has SDRAM: the KV cache could go there
    seq = int(msg.rsplit("--max-seq ", 1)[1].split()[0])
    assert plan_memory(shape(*STORIES15M, kv_bits=4), 256, int(budget[:-1]) * KIB, board=board).fits
    assert plan_memory(shape(*STORIES15M, kv_bits=4), seq, 512 * KIB, board=board).fits
    with pytest.raises(UserError):
        plan_memory(shape(*STORIES15M, kv_bits=4), seq + 1, 512 * KIB, board=board)
    # int8 at 256 suggests int4 too
    with pytest.raises(UserError, match="--kv-bits 4"):
        plan_memory(shape(*STORIES15M), 256, 512 * KIB, board=board)


def test_max_seq_auto_picks_the_longest_that_fits_and_reports_the_trade_off():
    board = load_board("stm32h750b-dk")
    s = shape(*STORIES15M, kv_bits=4)
    best = auto_max_seq(s, 256, 512 * KIB, board=board)
    assert plan_memory(s, best, 512 * KIB, board=board).fits
    res = plan_step(planner(512 * KIB, board), step_of(s), s, FitRequest(board, 512 * KIB), "auto")
    assert res.plan.max_seq == best and "int8 KV would fit" in res.trade_off


def test_budget_above_board_sram_is_refused():
    with pytest.raises(UserError, match="exceeds board weact-h750's 1,015,808 B of SRAM"):
        check_budget(board_memory(load_board("weact-h750")), 2 * 1024 * KIB)
