"""Every C identifier the generator makes, in one place.

Planned buffers are macros B_<NAME> (a typed pointer into the arena), Q4
matrices W_<NAME> (a const tllm_q4_matrix), float vectors V_<NAME> (a const
float pointer into the weights blob), arena offsets TLLM_OFF_<NAME>.
<NAME> is the IR name upper-cased with every non-alphanumeric run turned
into one underscore: "layers.3.wq" -> W_LAYERS_3_WQ, "l3.xn.q8" -> B_L3_XN_Q8."""
from __future__ import annotations

import re
from typing import Iterable

_NON_IDENT = re.compile(r"[^0-9A-Za-z]+")


def ident(name: str) -> str:
    s = _NON_IDENT.sub("_", name).strip("_").upper()
    return s if s and not s[0].isdigit() else "N_" + s


def buffer_macro(name: str) -> str:
    return "B_" + ident(name)


def offset_macro(name: str) -> str:
    return "TLLM_OFF_" + ident(name)


def matrix_name(name: str) -> str:
    return "W_" + ident(name)


def vector_macro(name: str) -> str:
    return "V_" + ident(name)


def check_unique(names: Iterable[str], what: str) -> None:
    """Two IR names that map to one C identifier would silently alias."""
    seen: dict[str, str] = {}
    for n in names:
        i = ident(n)
        if i in seen and seen[i] != n:
            raise AssertionError(f"{what} names {seen[i]!r} and {n!r} both become {i}")
        seen[i] = n


def arena_symbol(region: str) -> str:
    """The static array holding one memory region's arena."""
    return "tllm_arena_" + ident(region).lower()


def arena_macro(region: str) -> str:
    return "TLLM_ARENA_" + ident(region) + "_BYTES"


def canary_macro(region: str) -> str:
    return "TLLM_CANARY_OFFSET_" + ident(region)


def region_macro(region: str) -> str:
    return "TLLM_REGION_" + ident(region) + "_BYTES"
