"""The STM32H750 family under Renode: the platform overlay, the models, the
.resc script and the Robot test every STM32H750 build carries in OUT/renode/
(rendered here from boards/stm32h750/renode/; run/renode.py runs them).

Renode (1.15.1, the last release built with Mono) is in no package registry:
the runner uses `renode` on PATH, else `renode-run` (PyPI; it downloads
Renode when first used: `pip install 'tinyllm-gen[renode]'`), else says in
one line that neither is there. Nothing of Renode is part of this project.

What OUT/renode/ adds to Renode's stock `platforms/cpus/stm32h743.repl`
(facts from renode/renode, renode/renode-infrastructure and antmicro/tlib at
1.15.1; docs/renode.md says why each is there):

* the H750's internal flash (128 KiB) and the SRAM sizes from board.json;
  every address is checked against where the stock platform has that memory;
* tllm_fpv5.py: Renode 1.15.1's Cortex-M7 misexecutes the FPv5 (ARMv8)
  floating-point instructions (VMAXNM runs as VDIV, VCVTA rounds wrongly,
  VMINNM faults), which made every token 0; after loading the ELF the .resc
  routes each one through a thunk that computes exactly what the instruction
  does, in memory of its own (`fpv5Thunks`);
* the QUADSPI window at the board's address (0x90000000): memory of its own
  holding the weights blob and the request block; QUADSPI itself is
  h750_qspi.py (the board's flash chip: the stock controller has no flash
  and its only NOR model refuses the W25Q64's commands);
* RCC (h750_rcc.py: the stock model keeps no clock enables, so mdma.c
  re-enabled the MDMA clock before every transfer) and PWR (h750_pwr.py:
  the stock platform only tags PWR, so ACTVOSRDY never comes), DBGMCU_IDC
  reading revision V (else bringup.c takes the 400 MHz path), the MDMA
  (h750_mdma.py, for weight streaming; 1.15.1 has no model) and the DWT
  (h750_dwt.py: CYCCNT counts executed instructions, less the thunks', so
  the per-token counts compare with QEMU's and Unicorn's).

The board-specific Renode data (the stock platform, its names for the
memories and USARTs) lives here until board.json carries it."""
from __future__ import annotations

from dataclasses import dataclass

import jinja2

from ... import __version__
from ...board import Board
from ...errors import UserError
from ...resources import boards_dir
from .peripherals import CHIP_READS, DBGMCU_IDC, h750_bus_targets

FAMILY = "stm32h750"
RENODE_VERSION = "1.15.1"
STOCK_PLATFORM = "platforms/cpus/stm32h743.repl"
RENODE_DIR = "renode"  # inside OUT
# OUT/renode/<name> from boards/stm32h750/renode/<name>.j2
TEMPLATES = {name: f"{name}.j2" for name in (
    "stm32h750.repl", "h750_rcc.py", "h750_pwr.py", "h750_qspi.py", "h750_mdma.py", "h750_dwt.py", "tllm_fpv5.py",
    "tllm.resc", "tllm.robot")}

# Where the stock platform (Renode 1.15.1) has each memory board.json names:
# region -> (the platform's name for it, its address).
STOCK_MEMORIES = {
    "itcm": ("itcm", 0x00000000), "dtcm": ("dtcm", 0x20000000), "axi": ("axiSram", 0x24000000),
    "sram1": ("sram1", 0x30000000), "sram2": ("sram2", 0x30020000), "sram3": ("sram3", 0x30040000),
    "sram4": ("sram4", 0x38000000), "flash": ("flash1", 0x08000000),
}
STOCK_UARTS = {"USART1": ("usart1", 0x40011000), "USART2": ("usart2", 0x40004400), "USART3": ("usart3", 0x40004800),
               "UART4": ("uart4", 0x40004C00), "UART5": ("uart5", 0x40005000), "USART6": ("usart6", 0x40011400)}
RCC_ADDRESS = 0x58024400
PWR_ADDRESS = 0x58024800
DBGMCU_ADDRESS = 0x5C001000
QSPI_REGS = 0x52005000
MDMA_ADDRESS = 0x52000000
DWT_ADDRESS = 0xE0001000
# fpv5Thunks: after the H7's 2 MiB flash range (reserved on the H750), within a B.W's 16 MiB of the code.
FPV5_THUNKS, FPV5_THUNKS_BYTES = 0x08200000, 0x10000
# What bringup.c sends each chip (h750_qspi.py checks the same list).
QSPI_COMMANDS = {"W25Q64JV": ("66h then 99h: reset (QE back to 0)", "50h (or 06h) then 31h with one byte: status "
                                                                                  "register 2, whose bit 1 is QE"),
                 "MT25QL512ABB": ("F5h on four lines: leave QPI mode (nothing to a chip in extended SPI)",)}
# The models' error lines start with this (h750_qspi.py, h750_mdma.py, tllm_fpv5.py): the runner and the
# Robot test fail on any.
MODEL_ERROR = "tllm-h750:"
CORE_HZ = 480_000_000  # bringup.c on revision V: PLL1 at 480 MHz
# The robot's Terminal Tester timeout is virtual time: 10 s at the core clock is 4.8 G instructions per
# awaited console line, a bound on a hung firmware that no real line (a token, a prefill) comes near.
ROBOT_LINE_TIMEOUT_S = 10
REVISION = "V"
def supports(board: Board) -> bool:
    """The boards of this family (board.json's "family")."""
    return board.family == FAMILY


def _hex(v: int) -> str:
    return f"0x{v:08X}"


@dataclass(frozen=True)
class RenodeBoard:
    """What the Renode files say about one board, all from board.json."""
    name: str
    uart: str  # the platform's name for the console USART
    flash: dict
    rams: list[dict]
    qspi: dict
    weights_address: str
    request_address: str
    request_max: int


def renode_board(board: Board) -> RenodeBoard:
    if not supports(board):
        raise UserError(f"board '{board.name}' has no Renode platform (STM32H750 boards only)")
    mems = []
    for region in board.memory.regions:
        stock = STOCK_MEMORIES.get(region.name)
        if stock is None:
            continue
        if region.address != stock[1]:
            raise ValueError(f"board '{board.name}': region {region.name} at {_hex(region.address)} but the "
                             f"Renode platform has {stock[0]} at {_hex(stock[1])}")
        mems.append({"name": region.name, "stock_name": stock[0], "address": _hex(region.address),
                     "size": region.size, "size_hex": _hex(region.size), "size_kib": region.size // 1024})
    flash = next(m for m in mems if m["name"] == "flash")
    uart = board.uart
    stock_uart = STOCK_UARTS.get(uart.instance)
    if stock_uart is None or uart.base != stock_uart[1]:
        raise ValueError(f"board '{board.name}': console {uart.instance} at {_hex(uart.base)} is not a USART "
                         "of the Renode platform")
    q = board.memory.region("qspi")
    chip = board.qspi_flash
    if chip is None or chip.chip not in CHIP_READS or chip.chip not in QSPI_COMMANDS:
        raise ValueError(f"board '{board.name}': no Renode model of its QSPI flash "
                         f"({chip.chip if chip else 'none in board.json'})")
    reads = [{"instr": f"0x{r.instr:02X}", "imode": r.imode, "admode": r.admode, "address_bytes": r.address_bytes,
              "dcyc": r.dcyc, "dmode": r.dmode, "needs_qe": r.needs_qe} for r in CHIP_READS[chip.chip]]
    qspi = {"address": _hex(q.address), "size": q.size, "size_hex": _hex(q.size), "chip": chip.chip,
            "chips": chip.chips, "reads": reads}
    return RenodeBoard(board.name, stock_uart[0], flash, [m for m in mems if m["name"] != "flash"], qspi,
                       _hex(board.weights.address), _hex(board.request.address), board.request.max_bytes)


def template_env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(boards_dir() / FAMILY / "renode")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True, autoescape=False)


def renode_context(board: Board, request_capacity: int) -> dict:
    rb = renode_board(board)
    flash_region = board.memory.region("flash")
    lines = (0, 1, 2, 4)  # the CCR mode encodings
    reads = [f"{r['instr'][2:]}h ({lines[r['imode']]}-{lines[r['admode']]}-{lines[r['dmode']]}, "
             f"{r['address_bytes']}-byte address, {r['dcyc']} dummy cycles{', QE set first' if r['needs_qe'] else ''})"
             for r in rb.qspi["reads"]]
    targets = [{"name": t.name, "start": _hex(t.start), "end": _hex(t.end), "tcm": t.tcm, "writable": t.writable}
               for t in h750_bus_targets(board.memory.regions)]
    return {
        "banner": f"generated by tinyllm-gen {__version__} for {rb.name} (Renode {RENODE_VERSION}); do not edit",
        "renode_version": RENODE_VERSION, "board_name": rb.name, "stock_platform": STOCK_PLATFORM,
        "core_hz": CORE_HZ, "mips": CORE_HZ // 1_000_000, "flash": rb.flash, "rams": rb.rams, "qspi": rb.qspi,
        "revision": REVISION, "dbgmcu_idc": _hex(DBGMCU_IDC[REVISION]), "dbgmcu_address": _hex(DBGMCU_ADDRESS),
        "rcc_address": _hex(RCC_ADDRESS), "pwr_address": _hex(PWR_ADDRESS), "qspi_regs": _hex(QSPI_REGS),
        "mdma_address": _hex(MDMA_ADDRESS),
        "dwt_address": _hex(DWT_ADDRESS), "fpv5": {"base": _hex(FPV5_THUNKS), "size": _hex(FPV5_THUNKS_BYTES)},
        "commands_notes": QSPI_COMMANDS[rb.qspi["chip"]], "reads_notes": reads, "mdma_targets": targets,
        "model_error": MODEL_ERROR, "uart": rb.uart, "weights_address": rb.weights_address,
        "request_address": rb.request_address, "vector_table": _hex(flash_region.address),
        "max_request": request_capacity, "timeout_s": ROBOT_LINE_TIMEOUT_S, "expected": [],
    }


def renode_files(board: Board, request_capacity: int) -> dict[str, bytes]:
    """OUT/renode/* for an STM32H750 build (emit_tree adds them): the
    platform overlay, the Python models (RCC, PWR, QUADSPI with the board's
    flash, MDMA, DWT), the FPv5 workaround, the .resc and a Robot test that
    checks the bring-up reaches "@TLLM ready" (write_check adds a token check)."""
    env, ctx = template_env(), renode_context(board, request_capacity)
    return {f"{RENODE_DIR}/{name}": env.get_template(t).render(**ctx).encode() for name, t in TEMPLATES.items()}
