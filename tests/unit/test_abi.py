"""The generator/runtime contract is stated once (codegen/abi.py) and the C
header is generated from it (issue 11.6): the checked-in firmware/tllm_abi.h
is exactly what the generator writes, and no other runtime or board file
defines those constants again."""
import re

from tinyllm_gen import abi
from tinyllm_gen.lower.blob import HEADER_BYTES
from tinyllm_gen.run.protocol import REQUEST_HEADER
from tinyllm_gen.resources import boards_dir, firmware_dir


def test_checked_in_header_is_generated():
    assert (firmware_dir() / "tllm_abi.h").read_text() == abi.abi_header(), \
        "regenerate with: python -m tinyllm_gen.abi > firmware/tllm_abi.h"


def test_no_other_c_file_restates_the_contract():
    names = set(re.findall(r"#define (TLLM_\w+)", abi.abi_header()))
    for path in sorted(firmware_dir().glob("*.[ch]")) + sorted(boards_dir().glob("*/*.[ch]")):
        if path.name == "tllm_abi.h":
            continue
        again = names & set(re.findall(r"#define (TLLM_\w+)", path.read_text()))
        assert not again, f"{path} defines {sorted(again)} again: include tllm_abi.h"


def test_python_sides_use_the_same_values():
    assert REQUEST_HEADER.size == abi.REQUEST_HEADER_BYTES and HEADER_BYTES == abi.BLOB_HEADER_BYTES
    assert len({s.code for s in abi.EXIT_STATUSES}) == len(abi.EXIT_STATUSES)
    assert all(s.code < 256 for s in abi.EXIT_STATUSES)
