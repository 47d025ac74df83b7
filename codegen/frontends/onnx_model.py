"""ONNX frontend: a decoder exported to ONNX (`torch.onnx.export` of a
transformers model, or optimum's export) -> Graph.

The export is a forward pass over a whole sequence; weights are initializers,
usually renamed and transposed (`val_104` [in, out] for a MatMul), so names
are not trusted.  The config.json the model was exported from, which the
exporters write beside model.onnx, gives the architecture; the graph gives
the weights, found by walking the data flow of the residual stream:

    input_ids -> Gather(table)                              embedding
    h -> Pow/ReduceMean/Add(eps)/Sqrt/Reciprocal.. -> Mul(w) RMSNorm weight
    norm -> MatMul(W) [-> Add(b)]                           projections
    h + MatMul(attention) / h + MatMul(mlp)                  o_proj, down_proj

Which projection is which comes from the flow, not from the order of the
nodes: k and q pass through RoPE's rotate-half (a Neg) on their way to the
attention scores, where q is the left operand and k the right; v does not;
gate feeds the SiLU's Sigmoid and up does not.  A fused projection (Phi-3's
qkv_proj and gate_up_proj) is split as the Hugging Face frontend splits it.
Then every weight goes through the same canonical names and graph builder
as the other frontends, so what compiles is the same decoder whatever the
file format.  Anything the walk cannot place is refused with the node it
stopped at; the math is checked against onnxruntime in the tests."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..errors import UserError, check_regular_file, first_line, read_json
from ..ir import ModelConfig, build_decoder_graph, expected_weight_shapes
from ..verify import verify_graph
from .derived import check_inv_freq
from .hf import ImportedModel, load_tokenizer, parse_config
from .limits import check_finite

# Ops a value passes through unchanged in meaning (dtype or layout only).
_PASS = {"Cast", "Identity"}
# Ops inside an RMSNorm between its input and its weight multiply.
_NORM_OPS = {"Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div", "Mul", "Cast", "Rsqrt", "Identity"}
# Ops on the way from a projection to the attention MatMuls (reshapes, RoPE, GQA repeat).
_ATTN_PATH = {"Reshape", "Transpose", "Mul", "Add", "Slice", "Neg", "Concat", "Unsqueeze", "Expand", "Cast",
              "Identity", "Squeeze", "Split", "Gather"}


def find_onnx(path: Path) -> Path | None:
    """model.onnx when `path` is an ONNX file, or a directory holding exactly
    one *.onnx and no safetensors (an export directory); else None."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix == ".onnx" else None
    if path.is_dir() and not any(path.glob("*.safetensors")):
        found = sorted(path.glob("*.onnx"))
        if len(found) == 1:
            return found[0]
    return None


def load_onnx(model_path: Path, tokenizer: Path | None = None) -> ImportedModel:
    model_path = Path(model_path)
    folder = model_path.parent
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise UserError(f"{model_path}: no config.json beside it; copy the config.json of the model it was "
                        "exported from (transformers and optimum write it next to model.onnx)")
    cfg = read_json(cfg_path, "config.json", 16 * 1024 * 1024)
    if not isinstance(cfg, dict):
        raise UserError(f"{cfg_path}: expected a JSON object at top level")
    config = parse_config(cfg, cfg_path)
    graph = _OnnxGraph.load(model_path)
    walker = _Walker(graph, config)
    try:
        weights = walker.weights()
    except (IndexError, KeyError, ValueError, TypeError, RecursionError) as e:
        # a node without the inputs/outputs its op has, or constants of impossible shapes
        raise walker.fail(f"malformed graph ({type(e).__name__}: {first_line(e)[:120]})") from None
    for name, w in weights.items():
        check_finite(model_path.name, name, w)
    ignored = _other_constants(graph, config)
    g = verify_graph(build_decoder_graph(config, weights))

    tok = load_tokenizer(config, folder, tokenizer)
    return ImportedModel(graph=g, tokenizer=tok, source=f"onnx:{model_path} ({cfg['architectures'][0]})",
                         ignored=ignored)


_DTYPE_NAMES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def _other_constants(g: "_OnnxGraph", c: ModelConfig) -> tuple[str, ...]:
    """The float constants the import did not take as weights nor check (the
    RMSNorm eps): a RoPE inv_freq, which the graph computes its cos/sin from,
    must be the compiler's (derived.py); NaN is refused anywhere (no graph
    means it); the rest (attention scale, mask fill, the norm's exponent)
    the compiled graph computes itself, and they are named as ignored."""
    ignored = []
    for name, arr in sorted(g.const.items()):
        if arr.dtype.kind != "f" or id(arr) in g.used:
            continue
        if name.endswith("inv_freq"):
            check_inv_freq(g.path.name, name, arr, c, _DTYPE_NAMES.get(arr.dtype, "BF16"),
                           fix="config.json's rope_theta must be the exported model's: copy its config.json "
                           "beside model.onnx, or re-export the model")
            continue
        if np.isnan(arr).any():
            raise UserError(f"{g.path.name}: constant {name} holds NaN; the file is corrupt, re-export the model")
        ops = sorted({n.op_type for n in g.consumers.get(name, [])})
        what = f"= {float(arr.reshape(-1)[0]):g}" if arr.size == 1 else f"{list(arr.shape)}"
        ignored.append(f"{name} {what} (read by {', '.join(ops) or 'no node'}): not used, the compiled graph "
                       "computes this part itself")
    return tuple(ignored)


def _check_external_files(path: Path, model) -> None:
    """Tensors kept in external data files: each file must be a regular
    file beside the model (opening a FIFO would block)."""
    tensors = list(model.graph.initializer)
    for n in model.graph.node:
        tensors += [a.t for a in n.attribute if a.HasField("t")]
    for t in tensors:
        if t.data_location != 1:  # onnx.TensorProto.EXTERNAL
            continue
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        if not loc or Path(loc).is_absolute() or ".." in Path(loc).parts:
            raise UserError(f"{path}: initializer {t.name} names external data {loc!r}, not a file beside the "
                            "model; re-export it")
        check_regular_file(path.parent / loc, "ONNX external data file")


class _OnnxGraph:
    """Nodes, constants (initializers and Constant nodes, as float32/int64
    arrays), producer and consumers of every value."""

    def __init__(self, path: Path, model):
        from onnx import numpy_helper

        self.path = path
        g = model.graph
        self.nodes = list(g.node)
        self.const: dict[str, np.ndarray] = {}

        def array(t, what):
            try:
                return numpy_helper.to_array(t)
            except Exception as e:  # raw data of the wrong length (a truncated file), unknown data types
                raise UserError(f"{path.name}: {what} {t.name or '(unnamed)'} is unreadable ({first_line(e)[:160]}); "
                                "the file is truncated or corrupt, re-export the model") from None

        for t in g.initializer:
            self.const[t.name] = array(t, "initializer")
        for n in self.nodes:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value" and n.output:
                self.const[n.output[0]] = array(n.attribute[0].t, "constant")
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.consumers: dict[str, list] = defaultdict(list)
        for n in self.nodes:
            for i in n.input:
                self.consumers[i].append(n)
        self.inputs = [i.name for i in g.input if i.name not in self.const]
        self.used: set[int] = set()  # id() of the constants taken as weights or checked

    @classmethod
    def load(cls, path: Path) -> "_OnnxGraph":
        try:
            import onnx
        except ImportError:
            raise UserError("reading ONNX models needs the onnx package: pip install 'tinyllm-gen[onnx]'") from None
        check_regular_file(path, "ONNX model")
        try:
            model = onnx.load(str(path), load_external_data=False)
            _check_external_files(path, model)
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(path.parent))
        except UserError:
            raise
        except Exception as e:  # protobuf and external-data errors have no common base
            raise UserError(f"{path}: not a readable ONNX model ({first_line(e)[:160]}); "
                            "re-export it, keeping model.onnx.data beside it") from None
        if not model.graph.node:
            raise UserError(f"{path}: an ONNX file without a graph (empty or truncated); re-export the model")
        return cls(path, model)

    def where(self, node) -> str:
        return f"{self.path.name}: node {node.name or node.op_type} ({node.op_type})"

    def origin(self, value: str) -> str:
        """The value behind dtype-only ops (Cast, Identity)."""
        p = self.producer.get(value)
        seen = {value}
        while p is not None and p.op_type in _PASS and p.input and p.input[0] not in seen:
            value = p.input[0]
            seen.add(value)
            p = self.producer.get(value)
        return value

    def follow(self, value: str) -> list:
        """Consumers of a value, looking through dtype-only ops (iteratively:
        a malformed graph may chain or loop them)."""
        out: list = []
        path, on_path = [(value, iter(self.consumers.get(value, [])))], {value}
        while path:
            v, it = path[-1]
            n = next(it, None)
            if n is None:
                path.pop()
                on_path.discard(v)
            elif n.op_type not in _PASS:
                out.append(n)
            elif n.output and n.output[0] not in on_path:  # a loop of Cast/Identity ends here
                on_path.add(n.output[0])
                path.append((n.output[0], iter(self.consumers.get(n.output[0], []))))
        return out

    def weight_of(self, node) -> np.ndarray | None:
        """The constant right operand of a MatMul/Gemm as [out, in] (the
        Hugging Face layout), or None when the operand is computed."""
        if node.op_type == "MatMul":
            b = self._const_through(node.input[1])
            return None if b is None else np.ascontiguousarray(b[1].T if not b[0] else b[1])
        if node.op_type == "Gemm":
            attrs = {a.name: a.i for a in node.attribute}
            b = self._const_through(node.input[1])
            if b is None or attrs.get("transA", 0):
                return None
            w = b[1] if not b[0] else b[1].T
            return np.ascontiguousarray(w if attrs.get("transB", 0) else w.T)
        return None

    def _const_through(self, name: str) -> tuple[bool, np.ndarray] | None:
        """(transposed once on the way, float32 array) for a constant seen
        through Cast/Identity/Transpose([1,0])."""
        transposed = False
        while name not in self.const:
            p = self.producer.get(name)
            if p is None:
                return None
            if p.op_type in _PASS:
                name = p.input[0]
            elif p.op_type == "Transpose" and [a.ints for a in p.attribute if a.name == "perm"] in ([[1, 0]], []):
                transposed, name = not transposed, p.input[0]
            else:
                return None
        arr = self.const[name]
        if arr.ndim != 2:
            return None
        return transposed, self.float_weight(arr, name)

    def float_weight(self, arr: np.ndarray, name: str) -> np.ndarray:
        """A constant used as a weight: it must be floating point (an
        integer initializer would be silently cast)."""
        if arr.dtype.kind != "f":
            raise UserError(f"{self.path.name}: initializer {name} is used as a weight but has dtype {arr.dtype}; "
                            "export float weights (dequantize the model first)")
        self.used.add(id(arr))
        return arr.astype(np.float32)


class _Walker:
    def __init__(self, g: _OnnxGraph, c: ModelConfig):
        self.g, self.c = g, c

    def fail(self, what: str, node=None) -> UserError:
        at = f" at {self.g.where(node)}" if node is not None else f" in {self.g.path.name}"
        return UserError(f"ONNX import: {what}{at}; export a Llama/Qwen2/Phi-3 decoder with "
                         "torch.onnx.export (dynamo) or optimum, with use_cache=False")

    # ---- the residual stream, layer by layer
    def weights(self) -> dict[str, np.ndarray]:
        c = self.c
        w: dict[str, np.ndarray] = {}
        h, table = self._embedding()
        w["tok_embeddings"] = table
        for i in range(c.n_layers):
            p = f"layers.{i}."
            n1, w[p + "attention_norm"] = self._rmsnorm(h, f"layer {i} attention norm")
            self._attention_projections(n1, p, w, i)
            h, w[p + "wo"] = self._residual(h, f"layer {i} attention output")
            n2, w[p + "ffn_norm"] = self._rmsnorm(h, f"layer {i} FFN norm")
            self._mlp_projections(n2, p, w, i)
            h, w[p + "w_down"] = self._residual(h, f"layer {i} FFN output")
        nf, w["norm"] = self._rmsnorm(h, "final norm")
        head = [(n, wt) for n in self.g.follow(nf) if (wt := self.g.weight_of(n)) is not None]
        if len(head) != 1:
            raise self.fail(f"expected one classifier MatMul after the final norm, found {len(head)}")
        node, out = head[0]
        if c.tied_embeddings:
            if out.shape != table.shape or not np.array_equal(out, table):
                raise self.fail("config.json ties the embeddings, but the classifier differs from them", node)
        else:
            w["output"] = out
        self._check_shapes(w)
        return w

    def _embedding(self) -> tuple[str, np.ndarray]:
        # The [vocab, dim] table gathered by a graph input: position_ids may
        # gather a RoPE cos/sin table too, which this shape tells apart.
        want = (self.c.vocab_size, self.c.dim)
        for name in self.g.inputs:
            for n in self.g.follow(name):
                table = self.g.const.get(n.input[0]) if n.op_type == "Gather" else None
                if table is not None and table.shape == want:
                    return n.output[0], self.g.float_weight(table, n.input[0])
        raise self.fail(f"no embedding lookup (Gather of a constant {want[0]}x{want[1]} table by the input ids)")

    def _norm_nodes(self, h: str):
        """The nodes of the RMSNorm reading h, breadth-first through norm ops,
        each with its constant operands and, for the weight multiply (a Mul
        by a [dim] constant), that weight.  Residual adds (no constant
        operand) are not followed, nor is anything after the weight."""
        seen, frontier = set(), [h]
        for _depth in range(10):
            nxt = []
            for v in frontier:
                for n in self.g.consumers.get(v, []):
                    if n.op_type not in _NORM_OPS or id(n) in seen:
                        continue
                    seen.add(id(n))
                    consts = [self.g.const[i] for i in n.input if i in self.g.const]
                    if n.op_type == "Add" and not consts:
                        continue  # a residual add, not the norm's + eps
                    weight = [k for k in consts if k.shape == (self.c.dim,)] if n.op_type == "Mul" else []
                    yield n, consts, (weight[0] if weight else None)
                    if not weight:
                        nxt += list(n.output)
            frontier = nxt

    def _rmsnorm(self, h: str, what: str) -> tuple[str, np.ndarray]:
        """The weight-multiply output and weight of the RMSNorm reading h;
        the scalar it adds before the square root must be config.json's eps."""
        found = None
        for n, consts, weight in self._norm_nodes(h):
            if n.op_type == "Add":
                if consts[0].size != 1:
                    raise self.fail(f"the {what} adds a constant of {consts[0].size} values, expected the scalar eps", n)
                eps = float(consts[0].reshape(-1)[0])
                if not np.isclose(eps, self.c.norm_eps, rtol=1e-3, atol=0):
                    raise self.fail(f"the {what} adds eps {eps:g} but config.json says rms_norm_eps "
                                    f"{self.c.norm_eps:g}", n)
                self.g.used.add(id(consts[0]))  # checked
            if weight is not None and found is None:
                found = n.output[0], self.g.float_weight(weight, f"(the {what} weight)")
        if found is None:
            raise self.fail(f"no RMSNorm with a [{self.c.dim}] weight found for the {what}")
        return found

    def _projections(self, x: str, what: str) -> list[tuple[object, np.ndarray, np.ndarray | None, str]]:
        """(node, weight [out, in], bias or None, output value) of each
        constant-weight MatMul reading x."""
        out = []
        for n in self.g.follow(x):
            wt = self.g.weight_of(n)
            if wt is None:
                continue
            y, bias = n.output[0], None
            adds = [a for a in self.g.follow(y) if a.op_type == "Add"]
            for a in adds:
                k = [self.g.const[i] for i in a.input if i in self.g.const and self.g.const[i].ndim == 1]
                if k and k[0].shape == (wt.shape[0],):
                    y, bias = a.output[0], self.g.float_weight(k[0], f"(a bias of {n.name or n.op_type})")
            out.append((n, wt, bias, y))
        if not out:
            raise self.fail(f"no projection MatMul reads the {what}")
        return out

    def _attention_projections(self, n1: str, p: str, w: dict, i: int) -> None:
        c = self.c
        projs = self._projections(n1, f"layer {i} attention norm")
        if len(projs) == 1 and projs[0][1].shape[0] == c.vocab_size and i > 0:
            raise self.fail(f"config.json says {c.n_layers} layers but the graph reaches its classifier after {i}",
                            projs[0][0])
        if len(projs) == 1:  # Phi-3: one fused qkv_proj, rows q, k, v
            node, wt, bias, _ = projs[0]
            if wt.shape[0] != c.q_dim + 2 * c.kv_dim or bias is not None:
                raise self.fail(f"layer {i}: a fused qkv projection of {wt.shape[0]} rows, expected "
                                f"{c.q_dim + 2 * c.kv_dim}", node)
            w[p + "wq"], w[p + "wk"] = wt[:c.q_dim].copy(), wt[c.q_dim:c.q_dim + c.kv_dim].copy()
            w[p + "wv"] = wt[c.q_dim + c.kv_dim:].copy()
            return
        if len(projs) != 3:
            raise self.fail(f"layer {i}: {len(projs)} projections read the attention norm, expected q, k, v "
                            "(or one fused qkv)", projs[0][0])
        roles = {}
        for node, wt, bias, y in projs:
            roped, side = self._attention_side(y)
            role = "v" if not roped else ("q" if side == 0 else "k")
            if role in roles:
                raise self.fail(f"layer {i}: two projections look like {role}", node)
            roles[role] = (node, wt, bias)
        for role in ("q", "k", "v"):
            node, wt, bias = roles[role]
            w[p + "w" + role] = wt
            if c.qkv_bias:
                if bias is None:
                    raise self.fail(f"layer {i}: config.json says Qwen2 (q/k/v biases) but {role}_proj has none",
                                    node)
                w[p + "b" + role] = bias
            elif bias is not None:
                raise self.fail(f"layer {i}: {role}_proj has a bias the {c.arch} graph has no slot for", node)

    def _attention_side(self, y: str) -> tuple[bool, int]:
        """(passes RoPE's Neg, operand index at the first MatMul of two
        computed operands it reaches) for a projection's output."""
        seen, frontier, roped = set(), [y], False
        for _depth in range(24):
            nxt = []
            for v in frontier:
                for n in self.g.consumers.get(v, []):
                    if id(n) in seen:
                        continue
                    seen.add(id(n))
                    if n.op_type == "Neg":
                        roped = True
                    if n.op_type == "MatMul" and all(i not in self.g.const for i in n.input):
                        return roped, list(n.input).index(v)
                    if n.op_type in _ATTN_PATH:
                        nxt += list(n.output)
            frontier = nxt
        return roped, -1

    def _mlp_projections(self, n2: str, p: str, w: dict, i: int) -> None:
        c = self.c
        projs = self._projections(n2, f"layer {i} FFN norm")
        if any(b is not None for _, _, b, _ in projs):
            raise self.fail(f"layer {i}: the MLP projections have biases (not supported)", projs[0][0])
        if len(projs) == 1:  # Phi-3: gate_up_proj, first half gate
            node, wt, _, _ = projs[0]
            if wt.shape[0] != 2 * c.hidden_dim:
                raise self.fail(f"layer {i}: a fused gate/up projection of {wt.shape[0]} rows, expected "
                                f"{2 * c.hidden_dim}", node)
            w[p + "w_gate"], w[p + "w_up"] = wt[:c.hidden_dim].copy(), wt[c.hidden_dim:].copy()
            return
        if len(projs) != 2:
            raise self.fail(f"layer {i}: {len(projs)} projections read the FFN norm, expected gate and up",
                            projs[0][0])
        gates = [pr for pr in projs if any(n.op_type in ("Sigmoid", "Silu", "HardSwish")
                                           for n in self.g.follow(pr[3]))]
        if len(gates) != 1:
            raise self.fail(f"layer {i}: cannot tell gate_proj (the one feeding the SiLU) from up_proj",
                            projs[0][0])
        w[p + "w_gate"] = gates[0][1]
        w[p + "w_up"] = [pr for pr in projs if pr is not gates[0]][0][1]

    def _residual(self, h: str, what: str) -> tuple[str, np.ndarray]:
        """h + MatMul(...): the new stream and the [dim, in] weight that made
        the other operand."""
        for n in self.g.follow(h):
            if n.op_type != "Add" or any(i in self.g.const for i in n.input):
                continue
            other = [i for i in n.input if self.g.origin(i) != self.g.origin(h)]
            prod = self.g.producer.get(self.g.origin(other[0])) if len(other) == 1 else None
            wt = self.g.weight_of(prod) if prod is not None else None
            if wt is not None and wt.shape[0] == self.c.dim:
                return n.output[0], wt
        raise self.fail(f"no residual add of a projection for the {what}")

    def _check_shapes(self, w: dict) -> None:
        for name, shape in expected_weight_shapes(self.c).items():
            if name not in w:
                raise self.fail(f"tensor for {name} not found")
            if tuple(w[name].shape) != tuple(shape):
                raise self.fail(f"{name} has shape {tuple(w[name].shape)}, config.json implies {tuple(shape)}")
