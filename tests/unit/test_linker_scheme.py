"""One memory description and one linker-variable scheme for every Cortex-M
board (issue 11, item 4): boards/cortex-m/linker.ld.j2 generated from the
board's typed regions, the same symbols everywhere (read by the one
boards/cortex-m/reset.c), and an arena region never longer than the plan's
budget, so QEMU's 4 MiB RAM links only what the plan allows."""
import re
import shutil
import subprocess

import jinja2
import pytest

from tinyllm_gen.board import board_names, load_board
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.emit.link_layout import linker_variables
from plans import plan_for
from tinyllm_gen.resources import boards_dir

ARM_BOARDS = [n for n in board_names() if load_board(n).is_arm]
SYMBOL = re.compile(r"^\s*(__[a-z_]+__)\s*=", re.M)
RESET_SYMBOLS = {"__stack_limit__", "__stack_top__", "__data_load__", "__data_start__", "__data_end__",
                 "__bss_start__", "__bss_end__", "__zero_table_start__", "__zero_table_end__"}


def render(board, plan, weights_bytes=4096) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(board.file(board.linker_script).read_text()).render(
        **linker_variables(plan, board, weights_bytes))


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The bundled-size test model planned for every Arm board at its default budget."""
    from tinymodels import make_hf_model
    from tinyllm_gen.compile import quantize
    from tinyllm_gen.frontends import load_model

    d = tmp_path_factory.mktemp("linker") / "model"
    make_hf_model(d, eos=None, dim=64, hidden=96, layers=2, heads=4, kv_heads=2, vocab=300, context=96, tied=True)
    m = load_model(d)
    out = {}
    for name in ARM_BOARDS:
        board = load_board(name)
        qg = quantize(m, CompileOptions(board=name), board)
        out[name] = (board, plan_for(qg, None, 512 * 1024, board).plan)
    return out, d


def test_every_cortex_m_board_reads_the_one_template():
    for name in ARM_BOARDS:
        board = load_board(name)
        assert board.file(board.linker_script) == boards_dir() / "cortex-m" / "linker.ld.j2", name
        assert board.file("reset.c") == boards_dir() / "cortex-m" / "reset.c", name
    assert sorted(p.parent.name for p in boards_dir().glob("*/linker.ld.j2")) == ["cortex-m"]


def test_the_same_symbols_on_every_board(plans):
    by_board, _ = plans
    symbols = {}
    for name, (board, plan) in by_board.items():
        text = render(board, plan)
        symbols[name] = {s for s in SYMBOL.findall(text) if not s.startswith("__tllm_arena_")}
        assert RESET_SYMBOLS <= symbols[name], name
        assert {"__tllm_weights_start__", "__tllm_weights_end__"} <= symbols[name], name
    assert len({frozenset(s) for s in symbols.values()}) == 1, symbols


def test_only_reset_c_has_the_reset_path():
    """Reset_Handler and the .data/.bss/arena start-up exist once, in boards/cortex-m/reset.c."""
    for path in boards_dir().glob("*/*.c"):
        text = path.read_text()
        defines_reset = re.search(r"^\S.*\b(Reset_Handler|tllm_reset_c)\s*\(void\)\s*\{?\s*$", text, re.M) and \
            re.search(r"\b(Reset_Handler|tllm_reset_c)\s*\(void\)\s*\n\{", text)
        if path.parent.name == "cortex-m":
            assert defines_reset and "__zero_table_start__" in text
        else:
            assert not defines_reset, path
            assert "__data_start__" not in text and "__bss_start__" not in text, path


def test_arena_regions_are_never_longer_than_the_budget(plans):
    """QEMU has one 4 MiB RAM; the plan gets 512 KiB of it, and so does the link."""
    by_board, _ = plans
    board, plan = by_board["qemu-mps2-an500"]
    text = render(board, plan)
    assert re.search(rf"\bRAM \(rwx\) : ORIGIN = 0x20000000, LENGTH = {plan.budget_bytes}\b", text), text
    assert re.search(r"\bCODE \(rx\) : ORIGIN = 0x00000000, LENGTH = 4194304\b", text)
    board, plan = by_board["stm32h750b-dk"]  # regions smaller than the budget keep their size
    text = render(board, plan)
    assert "DTCM (rwx) : ORIGIN = 0x20000000, LENGTH = 131072" in text
    assert "AXI (rwx) : ORIGIN = 0x24000000, LENGTH = 524288" in text


@pytest.mark.emu
def test_qemu_links_exactly_up_to_the_budget(plans, tmp_path):
    """A plan that fills its budget to the byte links; the same firmware
    with one byte less of budget is refused by the linker."""
    for tool in ("arm-none-eabi-gcc", "cmake"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    from tinyllm_gen.build.cmake import build
    from tinyllm_gen.errors import UserError

    by_board, model = plans
    _, plan = by_board["qemu-mps2-an500"]
    # the fixture's plan reads its weights in place: so does this build (--stream auto would pin them)
    exact = CompileOptions(board="qemu-mps2-an500", ram_budget=plan.total_bytes, stream="off")
    compiled = compile_path(model, exact)
    assert compiled.plan.total_bytes == compiled.plan.budget_bytes
    out = tmp_path / "out"
    write_tree(compiled.tree, out)
    build(out)
    ld = out / "board" / "linker.ld"
    text = ld.read_text()
    ld.write_text(text.replace(f"LENGTH = {plan.total_bytes} ", f"LENGTH = {plan.total_bytes - 1} ")
                  .replace(f"<= {plan.total_bytes},", f"<= {plan.total_bytes - 1},"))
    assert ld.read_text() != text
    proc = subprocess.run(["cmake", "--build", str(out / "build")], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "RAM budget exceeded" in proc.stdout + proc.stderr
