"""The decode step's layers as one loop over a per-layer descriptor table.

When every layer makes the same calls (same kernels, same shapes) and they
differ only in which weights, vectors, buffers and KV entry they use, the
step is printed like llama2.c's forward(): a `for` over the layers whose
body reads the differing arguments from `LAYERS[l]`.  The decision is made
per call position and argument on the typed C calls (c_calls.py): a weight
differs by name, a buffer by its planned region and offset (a buffer the
planner put at the same offset in every layer stays a literal macro), a
number by value; a shape number that differs makes the layers different,
and then (or with `compile --unroll-layers`) the step stays unrolled."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ..bind import Program
from ..kernels.c_names import buffer_macro, check_unique, layer_field, layer_generic
from ..kernels.c_text import BUFFER, FIXED, KV, PARAM, SHAPE, WEIGHT, CArg, CCall, block_comment, packed
from ..lower.prefill import CHUNK_OUT
from ..lower.records import KernelCall
from .c_calls import c_call, c_comment, describe, last_token_c_call, prefill_c_call, verify_c_call

BODY_INDENT = 8  # inside tllm_model_step's for loop

# Why each stage of a layer exists: printed once above the stage in the loop body.
# A stage is named by the labels of its calls (ir.py); a quantize call belongs to the stage it feeds.
STAGES = (
    (("attention_norm",),
     "Attention norm: RMSNorm brings the residual stream to unit RMS (times a learned gain), so every layer's "
     "projections see inputs of one size."),
    (("attn.wq", "attn.wk", "attn.wv"),
     "Q, K, V: project the normed input; K and V have n_kv_heads heads, each shared by a group of query heads "
     "(grouped-query attention)."),
    (("rope.q", "rope.k"),
     "RoPE: rotate q and k by this position's angles, so q.k depends on how far apart two tokens are, not on "
     "where they are."),
    (("attention",),
     "Attention over the KV cache: store this position's k and v (quantized), then each head's "
     "softmax(q.k / sqrt(head_dim)) over positions 0..pos weights their v."),
    (("attn.wo", "residual.attn"),
     "Output projection of the heads back to the residual width, added onto the residual stream (the skip "
     "connection)."),
    (("ffn_norm",), "FFN norm: RMSNorm of the residual stream again, the feed-forward block's input."),
    (("ffn.w_gate", "ffn.w_up", "ffn.w_gate+w_up"),
     "Gate and up projections to the hidden width (one interleaved matrix where the Cortex-M7 kernels fuse "
     "the two)."),
    (("ffn.silu_mul",), "SwiGLU: silu(gate) * up, the feed-forward block's nonlinearity."),
    (("ffn.w_down", "residual.ffn"), "Down projection back to the residual width, added onto the residual stream."),
)
_STAGE_OF = {label: i for i, (labels, _) in enumerate(STAGES) for label in labels}


@dataclass(frozen=True)
class Field:
    """One member of the per-layer descriptor: its C type and each layer's initializer."""

    name: str
    ctype: str
    values: tuple[str, ...]  # layer l's initializer
    what: str  # the generic IR name it stands for, "layers.<i>.wq"


@dataclass(frozen=True)
class SharedBuffer:
    """A buffer planned at the same offset in every layer: one macro for the loop body."""

    name: str  # "l<i>.q"
    macro: str  # B_L_I_Q
    target: str  # layer 0's macro, B_L0_Q
    what: str  # "l<i>.q float[64] @ram+0x3cd00"


@dataclass(frozen=True)
class LoopStatement:
    stage: str  # the stage's why-comment when this call starts a stage, else ""
    comment: str  # the call's own comment, the layer-varying parts shown generically
    statement: str


@dataclass(frozen=True)
class LayerLoop:
    fields: tuple[Field, ...]
    shared: tuple[SharedBuffer, ...]
    body: tuple[LoopStatement, ...]


@dataclass(frozen=True)
class StepForm:
    """How the body of tllm_model_step prints (everything before the head,
    Program.head_calls, which a prompt token skips): the calls before the
    first layer, the layers (a loop, or each layer's calls), the calls after
    the last layer."""

    before: tuple[KernelCall, ...]
    layers: tuple[tuple[KernelCall, ...], ...]
    after: tuple[KernelCall, ...]
    loop: LayerLoop | None
    why: str  # the comment at the top of the step: which form, and why
    prefill: "PrefillForm | None" = None  # tllm_model_prefill's batched body (None: prefill_batch 1)
    verify: "VerifyForm | None" = None  # tllm_model_verify's head (None: no speculative decoding)


@dataclass(frozen=True)
class PrefillForm:
    """tllm_model_prefill's body for n <= P tokens: the step's calls as
    batched C (c_calls.prefill_c_call), in the step's form (a loop when the
    step is one), then the head on the last token."""

    before: tuple[str, ...]  # statements, each with its comment line
    layers: tuple[tuple[str, ...], ...]  # unrolled: each layer's statements
    after: tuple[str, ...]
    loop: LayerLoop | None
    head: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class VerifyForm:
    """tllm_model_verify (speculative decoding): the layers as
    tllm_model_prefill runs them (one static function both call), then the
    head's calls in their batched form, on every position."""

    head: tuple[str, ...]  # statements, each with its comment line
    why: str


class NotIsomorphic(Exception):
    """The layers cannot share one loop body; the message says where they differ."""


def _split(calls: tuple[KernelCall, ...]) -> tuple[tuple, list[tuple], tuple]:
    """(head, per-layer calls, tail); layers must follow each other in order."""
    head, layers, tail = [], [], []
    for call in calls:
        if call.layer is None:
            (tail if layers else head).append(call)
        elif tail or call.layer > len(layers) or (call.layer < len(layers) - 1):
            raise NotIsomorphic(f"layer {call.layer}'s calls are not in one run after layer {len(layers) - 1}'s")
        else:
            if call.layer == len(layers):
                layers.append([])
            layers[call.layer].append(call)
    return tuple(head), [tuple(l) for l in layers], tuple(tail)


class _Builder:
    def __init__(self):
        self.fields: dict[tuple, Field] = {}  # (ctype, each layer's text) -> field
        self.shared: dict[str, SharedBuffer] = {}

    def field(self, args: list[CArg], what: str) -> str:
        """The member holding this argument (one per distinct per-layer value list: the
        input of wq, wk and wv is one buffer, so one field)."""
        key = (args[0].ctype, tuple(a.text for a in args))
        if key not in self.fields:
            f = Field(layer_field(what), args[0].ctype, key[1], what)
            if any(g.name == f.name for g in self.fields.values()):
                raise AssertionError(f"two layer descriptor fields are named {f.name} ({what})")
            self.fields[key] = f
        return "L->" + self.fields[key].name

    def generic(self, args: list[CArg], where: str) -> str:
        """The argument's name with the layer shown as <i>, the same in every layer."""
        names = [layer_generic(a.name, l) for l, a in enumerate(args)]
        for l, name in enumerate(names):
            if name != names[0]:
                raise NotIsomorphic(f"{where} reads {args[0].name} in layer 0 but {args[l].name} in layer {l}")
        return names[0]

    def argument(self, args: list[CArg], where: str) -> str:
        """The loop body's text for one argument position (args: each layer's)."""
        a0 = args[0]
        if any(a.kind != a0.kind or a.ctype != a0.ctype for a in args):
            raise NotIsomorphic(f"{where}: argument {a0.text} is of a different kind in another layer")
        texts = {a.text for a in args}
        if a0.kind in (FIXED, SHAPE):
            if len(texts) > 1:
                l, a = next((l, a) for l, a in enumerate(args) if a.text != a0.text)
                raise NotIsomorphic(f"{where}: layer {l} passes {a.text} where layer 0 passes {a0.text}")
            return a0.text
        if a0.kind == KV:
            if any(a.ref != l for l, a in enumerate(args)):
                raise NotIsomorphic(f"{where}: a layer reads another layer's KV cache")
            return f"&{a0.name}[l]"
        if a0.kind == PARAM:
            return a0.text if len(texts) == 1 else self.field(args, self.generic(args, where))
        if a0.kind == WEIGHT:
            return a0.text if len(texts) == 1 else self.field(args, self.generic(args, where))
        assert a0.kind == BUFFER, a0.kind
        refs = [a.ref for a in args]
        if len({(r.ctype, r.count) for r in refs}) > 1:
            raise NotIsomorphic(f"{where}: buffer {a0.name} has another size in another layer")
        if len(texts) == 1:
            return a0.text  # one buffer for every layer (the residual stream)
        name = self.generic(args, where)
        if len({(r.region, r.offset) for r in refs}) > 1:
            return self.field(args, name)
        macro = buffer_macro(name)
        r = refs[0]
        self.shared.setdefault(macro, SharedBuffer(name, macro, a0.text, f"{name} {r.ctype}[{r.count}] "
                                                                   f"@{r.region}+0x{r.offset:x}"))
        return macro


def _loop(layers: list[tuple[KernelCall, ...]], b: "_Builder", to_c: Callable[[KernelCall], CCall] = c_call
          ) -> LayerLoop:
    """The loop body of the layers' calls as `to_c` prints them (the decode
    step's, or tllm_model_prefill's batched ones); the table's fields go into
    b, which both loops share (one LAYERS table)."""
    if len(layers) < 2:
        raise NotIsomorphic("one layer: nothing to loop over")
    if len({len(l) for l in layers}) > 1:
        raise NotIsomorphic(f"layer 0 makes {len(layers[0])} calls, another layer "
                            f"{next(len(l) for l in layers if len(l) != len(layers[0]))}")
    body, stage_now = [], None
    stage_of = _stages(layers[0])
    for k in range(len(layers[0])):
        calls = [layer[k] for layer in layers]
        c_calls: list[CCall] = [to_c(c) for c in calls]
        where = f"call {k} ({calls[0].label})"
        heads = [describe(c)[0] for c in calls]
        for l, (cc, head) in enumerate(zip(c_calls, heads)):
            if (cc.fn, cc.assign, len(cc.args), head) != (c_calls[0].fn, c_calls[0].assign, len(c_calls[0].args),
                                                          heads[0]):
                raise NotIsomorphic(f"layer {l}'s call {k} is {cc.fn}: {head}, layer 0's {c_calls[0].fn}: {heads[0]}")
        texts = [b.argument([cc.args[j] for cc in c_calls], where) for j in range(len(c_calls[0].args))]
        starts = stage_of[k] is not None and stage_of[k] != stage_now
        body.append(LoopStatement(block_comment(STAGES[stage_of[k]][1], BODY_INDENT) if starts else "",
                                  _comment(calls), c_calls[0].text(texts, BODY_INDENT)))
        stage_now = stage_of[k] if stage_of[k] is not None else stage_now
    fields = tuple(b.fields.values())
    check_unique([f.what for f in fields], "layer descriptor field", layer_field)
    return LayerLoop(fields, tuple(b.shared.values()), tuple(body))


def _loops(layers: list[tuple[KernelCall, ...]], prefill_c) -> tuple[LayerLoop, LayerLoop | None]:
    """The decode step's loop and tllm_model_prefill's (None: prefill_c None),
    both with the fields and shared macros of the two (one LAYERS table)."""
    b = _Builder()
    step = _loop(layers, b)
    pre = _loop(layers, b, prefill_c) if prefill_c is not None else None
    fields, shared = tuple(b.fields.values()), tuple(b.shared.values())
    return (LayerLoop(fields, shared, step.body),
            LayerLoop(fields, shared, pre.body) if pre is not None else None)


def _stages(calls: tuple[KernelCall, ...]) -> list[int | None]:
    """Each call's stage (index into STAGES); a quantize call takes the stage of the call after it."""
    out: list[int | None] = [_STAGE_OF.get(c.label) for c in calls]
    for k in range(len(out) - 2, -1, -1):
        if out[k] is None and calls[k].label.startswith("quantize "):
            out[k] = out[k + 1]
    return out


def _comment(calls: list[KernelCall]) -> str:
    """The call's description once for every layer: l<i>.q for the output, and
    its offset where the planner gave every layer the same one."""
    what, out0 = describe(calls[0])
    outs = [describe(c)[1] for c in calls]
    name = layer_generic(out0.name, calls[0].layer)
    where = (f"@{out0.region}+0x{out0.offset:x}" if len({(o.region, o.offset) for o in outs}) == 1
             else "@a per-layer offset")
    return block_comment(f"{what} -> {name} {where}", BODY_INDENT)


def step_form(program: Program, unroll: bool = False) -> StepForm:
    calls = program.body_calls
    head, layers, tail = (), [], ()
    prefill_c = _prefill_c(program)
    try:
        head, layers, tail = _split(calls)
        if len(layers) != program.config.n_layers:
            raise NotIsomorphic(f"{len(layers)} layers of calls for a model of {program.config.n_layers}")
        if unroll:
            form = StepForm(head, tuple(layers), tail, None, "The layers are unrolled (compile --unroll-layers).")
            return _with_prefill(form, program, prefill_c, None)
        loop, prefill_loop = _loops(layers, prefill_c)
    except (NotIsomorphic, AssertionError) as e:
        if not layers:
            head, layers, tail = calls, [], ()
        form = StepForm(head, tuple(layers), tail, None, f"The layers are unrolled: they differ ({e}).")
        return _with_prefill(form, program, prefill_c, None)
    form = StepForm(head, tuple(layers), tail, loop,
                    f"The {len(layers)} layers run as one loop: they make the same calls and differ only in the "
                    "weights, buffers and KV cache named in LAYERS[l] (compile --unroll-layers prints each layer).")
    return _with_prefill(form, program, prefill_c, prefill_loop)


def _prefill_c(program: Program) -> Callable[[KernelCall], CCall] | None:
    """The batched printer of tllm_model_prefill's calls (None: prefill_batch 1)."""
    if program.prefill_batch == 1:
        return None
    planned = {b.name: b for b in program.buffers()}
    batched = program.prefill.batched
    return lambda call: prefill_c_call(call, batched, planned.get(CHUNK_OUT))


def _with_prefill(form: StepForm, program: Program, prefill_c, loop: LayerLoop | None) -> StepForm:
    if prefill_c is None:
        return form

    def statements(calls, indent=4) -> tuple[str, ...]:
        return tuple(f"{c_comment(c, indent)}\n{' ' * indent}{prefill_c(c).text(indent=indent)}" for c in calls)

    batched = program.prefill.batched
    head = tuple(f"{c_comment(c)}\n    {last_token_c_call(c, batched).text()}" for c in program.head_calls)
    pre = PrefillForm(statements(form.before), tuple(statements(l) for l in form.layers) if loop is None else (),
                      statements(form.after), loop, head, program.prefill.why)
    return dataclasses.replace(form, prefill=pre, verify=_verify_form(program))


def _verify_form(program: Program) -> VerifyForm | None:
    """The verification pass's head: each head call batched over the positions
    (the head's buffers hold one value per position, lower/speculate.py)."""
    sp = program.speculate
    if sp is None:
        return None
    planned = {b.name: b for b in program.buffers()}
    both = program.prefill.batched | sp.batched
    head = tuple(f"{c_comment(c)}\n    {verify_c_call(c, both, planned.get(CHUNK_OUT)).text()}"
                 for c in program.head_calls)
    return VerifyForm(head, sp.why)


def c_layer_table(loop: LayerLoop) -> str:
    """The descriptor type and the LAYERS[TLLM_N_LAYERS] table, with designated initializers."""
    width = max(len(f.ctype) + len(f.name) + (0 if f.ctype.endswith("*") else 1) for f in loop.fields)
    lines = ["typedef struct {"]
    for f in loop.fields:
        decl = f"{f.ctype}{'' if f.ctype.endswith('*') else ' '}{f.name};"
        lines.append(f"    {decl:<{width + 1}} /* {f.what} */")
    lines += ["} tllm_layer;", "", "static const tllm_layer LAYERS[TLLM_N_LAYERS] = {"]
    for layer in range(len(loop.fields[0].values)):
        head = f"    [{layer}] = {{"
        lines.append(packed(head, [f".{f.name} = {f.values[layer]}" for f in loop.fields], "},"))
    lines.append("};")
    return "\n".join(lines)
