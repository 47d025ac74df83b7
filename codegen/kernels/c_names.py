"""Every C identifier the generator makes, in one place.

Planned buffers are macros B_<NAME> (a typed pointer into the arena), Q4
matrices W_<NAME> (a const tllm_q4_matrix), float vectors V_<NAME> (a const
float pointer into the weights blob), arena offsets TLLM_OFF_<NAME>.
<NAME> is the IR name upper-cased with every non-alphanumeric run turned
into one underscore: "layers.3.wq" -> W_LAYERS_3_WQ, "l3.xn.q8" -> B_L3_XN_Q8."""
from __future__ import annotations

import re
from typing import Callable, Iterable

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


def fc_name(name: str) -> str:
    """A per-channel int4 layer's descriptor (tllm_fc_s4pc_layer), named after its output value."""
    return "FC_" + ident(name)


# Per-layer names: weights "layers.<i>.wq", buffers "l<i>.q" (ir.py builds both).
_LAYER_PREFIX = re.compile(r"^(layers\.|l)([0-9]+)\.")
GENERIC_LAYER = "<i>"


def layer_generic(name: str, layer: int) -> str:
    """"layers.3.wq" in layer 3 -> "layers.<i>.wq", "l3.q" -> "l<i>.q"; a name
    without this layer's prefix (the residual "x0") is returned as it is."""
    m = _LAYER_PREFIX.match(name)
    if m is None or int(m.group(2)) != layer:
        return name
    return f"{m.group(1)}{GENERIC_LAYER}.{name[m.end():]}"


def layer_field(name: str) -> str:
    """The per-layer descriptor field for a generic name: the layer prefix
    dropped, "layers.<i>.attention_norm" -> attention_norm, "l<i>.xn.x16" -> xn_x16."""
    m = re.match(r"^(layers\.|l)<i>\.", name)
    return ident(name[m.end():] if m else name).lower()


def check_unique(names: Iterable[str], what: str, to_c: Callable[[str], str] = ident) -> None:
    """Two IR names that map to one C identifier (ident, or another rule
    such as layer_field) would silently alias."""
    seen: dict[str, str] = {}
    for n in names:
        i = to_c(n)
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
