"""boards/*/board.json are typed data (board.py): every shipped board loads,
its flags come from one CPU profile, and a bad key or value is one line
naming the file and the key."""
import copy
import dataclasses
import json

import pytest

from tinyllm_gen.board import CPU_PROFILES, NUMERICS_CFLAGS, ConfigValue, board_names, load_board, parse_board
from tinyllm_gen.errors import UserError
from tinyllm_gen.families import config_header, family_of
from tinyllm_gen.resources import boards_dir


def raw(name):
    path = boards_dir() / name / "board.json"
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("name", board_names())
def test_every_board_loads_with_its_cpu_profiles_flags(name):
    b = load_board(name)
    assert b.cflags[:len(b.cpu.cflags)] == b.cpu.cflags
    assert set(NUMERICS_CFLAGS) <= set(b.cflags)
    assert all(p.is_file() for p in b.source_paths())  # the family's folder searched (was: paths that did not exist)
    assert b.run.emulator in ("host", "qemu", "unicorn")


def test_cortex_m7_flags_are_stated_once():
    m7 = [load_board(n) for n in board_names() if load_board(n).cpu.name == "cortex-m7"]
    assert len(m7) == 3 and all(b.cpu is CPU_PROFILES["cortex-m7"] for b in m7)
    for name in board_names():
        assert "cflags" not in raw(name)[1] and "ldflags" not in raw(name)[1]


def test_config_header_derives_uart_request_and_family_register_values():
    b = load_board("weact-h750")
    defines = {c.name: c.value for c in config_header(b)}
    assert defines["TLLM_UART_BASE"] == "0x40011000u" and defines["TLLM_REQUEST_ADDR"] == "0x907FC000u"
    assert defines["TLLM_QSPI_FSIZE"] == "22u"
    # the STM32H750 family's encodings of the link board.json states physically
    assert defines["TLLM_QSPI_PRESCALER"] == f"{b.qspi_flash.prescaler - 1}u"
    assert defines["TLLM_QSPI_CSHT"] == f"{b.qspi_flash.cs_high_cycles - 1}u"
    assert not any(c.name.startswith("TLLM_QSPI_PRESCALER") for c in b.config_header())  # Board has no encodings
    q = {c.name: c.value for c in config_header(load_board("qemu-mps2-an500"))}
    assert q["TLLM_INSTR_PER_TICK"] == "40u" and family_of(load_board("qemu-mps2-an500")) is None


def test_a_board_config_that_sets_a_family_register_value_is_refused():
    b = load_board("weact-h750")
    twice = dataclasses.replace(b, config=b.config + (ConfigValue("TLLM_QSPI_DCYC", "6u"),))
    with pytest.raises(UserError, match="TLLM_QSPI_DCYC, which the stm32h750 family derives"):
        config_header(twice)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(cflgs=[]), "board: unknown key 'cflgs'"),
    (lambda d: d.update(cpu="cortex-m4"), "cpu: 'cortex-m4' is not one of"),
    (lambda d: d.update(stack_bytes="lots"), "stack_bytes: expected an integer"),
    (lambda d: d["memory_regions"][0].update(size=-1), "memory_regions[0].size: must be at least 1"),
    (lambda d: d["memory_regions"][1].update(speed="warp"), "memory_regions[1].speed: 'warp' is not one of"),
    (lambda d: d["placement"].update(dma=["itcm"]), "placement.dma: names itcm, not an arena region"),
    (lambda d: d["uart"].pop("base"), "uart: missing key 'base'"),
    (lambda d: d["run"].update(emulator="renode9"), "run.emulator: 'renode9' is not one of"),
    (lambda d: d.update(sources=["nope.c"]), "sources: nope.c is in none of"),
    (lambda d: d["config"].append({"name": "TLLM_UART_BASE", "value": "1"}), "config: a define is given twice"),
    (lambda d: d.pop("description"), "board: missing key 'description'"),
    (lambda d: d.update(family="stm32h7xx"), "family: no folder boards/stm32h7xx/"),
])
def test_bad_board_json_is_one_line_naming_the_key(edit, message):
    path, doc = raw("weact-h750")
    doc = copy.deepcopy(doc)
    edit(doc)
    with pytest.raises(UserError) as e:
        parse_board(path, doc)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_one_reset_handler_and_one_synchronous_copy():
    """Code every board shares is written once (boards/cortex-m, boards/common),
    not copied into each board (Reset_Handler used to exist twice)."""
    import re

    defs = {}
    for path in boards_dir().glob("*/*.c"):
        for line in path.read_text().splitlines():  # a definition: the signature line without a ';'
            for name in ("Reset_Handler", "tllm_board_copy_start"):
                if re.match(rf"^\S.*\b{name}\(.*\)\s*$", line) and ";" not in line:
                    defs.setdefault(name, []).append(path.parent.name)
    assert defs["Reset_Handler"] == ["cortex-m"]
    assert sorted(defs["tllm_board_copy_start"]) == ["common", "stm32h750"]
    for name in ("qemu-mps2-an500", "stm32h750b-dk", "weact-h750"):
        assert load_board(name).file("reset.c").parent.name == "cortex-m"
    assert load_board("host").file("copy_sync.c").parent.name == "common"
