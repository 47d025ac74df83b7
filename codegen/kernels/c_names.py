"""Every C identifier the generator makes, in one place.

Planned buffers are macros B_<NAME> (a typed pointer into the arena), Q4
matrices W_<NAME> (a const tllm_q4_matrix), float vectors V_<NAME> (a const
float pointer into the weights blob), arena offsets TLLM_OFF_<NAME>.
<NAME> is the IR name upper-cased with every non-alphanumeric run turned
into one underscore: "layers.3.wq" -> W_LAYERS_3_WQ, "l3.xn.q8" -> B_L3_XN_Q8."""
from __future__ import annotations

import re
from typing import Callable, Iterable

from ..errors import UserError

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


# A model's C symbols carry a prefix (`compile --symbol-prefix`), so that two
# models link into one image (speculative decoding's target and draft): every
# external symbol of the model library (the tllm_model_api.h functions and
# tables, the weights blob and its check, the vocabulary) and its arenas.  The
# default prefix keeps the names the runtime's engine calls, unchanged.
DEFAULT_PREFIX = "tllm_model_"
_PREFIX = re.compile(r"^tllm_[a-z][a-z0-9]*_$")
MODEL_SYMBOLS = ("tllm_model", "tllm_model_step", "tllm_model_prefill", "tllm_model_verify",
                 "tllm_model_greedy_token", "tllm_model_topk", "tllm_model_state", "tllm_model_tokens",
                 "tllm_model_sample_idx", "tllm_model_request_buffer", "tllm_model_request_capacity",
                 "tllm_model_canary_arm", "tllm_model_canary_ok", "tllm_model_region_canary_ok",
                 "tllm_model_stack_bytes", "tllm_weights_check", "tllm_weights_base", "tllm_weights_blob",
                 "tllm_vocab_bytes", "tllm_model_guess_values", "tllm_model_guess_ids")


def check_symbol_prefix(prefix: str) -> None:
    """Refuse a --symbol-prefix that is not tllm_<name>_ (one line, UserError)."""
    if not _PREFIX.match(prefix):
        raise UserError(f"--symbol-prefix {prefix[:40]!r}: write tllm_<name>_ with <name> lower-case letters and "
                        "digits (e.g. tllm_draft_)")


def prefixed(symbol: str, prefix: str = DEFAULT_PREFIX) -> str:
    """symbol (a default name: tllm_model[_x] or tllm_x) under `prefix`:
    tllm_model_step -> tllm_draft_step, tllm_model -> tllm_draft,
    tllm_weights_blob -> tllm_draft_weights_blob."""
    if prefix == DEFAULT_PREFIX:
        return symbol
    if symbol == "tllm_model":
        return prefix[:-1]
    if symbol.startswith(DEFAULT_PREFIX):
        return prefix + symbol[len(DEFAULT_PREFIX):]
    return prefix + symbol[len("tllm_"):]


def arena_symbol(region: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The static array holding one memory region's arena."""
    return prefixed("tllm_arena_" + ident(region).lower(), prefix)


def arena_macro(region: str) -> str:
    return "TLLM_ARENA_" + ident(region) + "_BYTES"


def canary_macro(region: str) -> str:
    return "TLLM_CANARY_OFFSET_" + ident(region)


def region_macro(region: str) -> str:
    return "TLLM_REGION_" + ident(region) + "_BYTES"
