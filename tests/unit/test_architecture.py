"""The package's shape, checked from its source: each stage on its own
floor, imports running one way (down), no import cycle, no import hidden
inside a function but the optional heavy dependencies and the CLI's lazy
loading; a compile lowers its graph once; the README stays short."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "codegen"
# The floors, lowest first: a module may import from a lower floor (or its own
# package, without a cycle), never from a higher one.  The pipeline reads
# bottom to top: import -> IR -> quantize -> lower -> plan -> fit -> bind ->
# emit -> build / run -> compile (-> compile_draft) -> cli.
FLOORS = [
    ("ground", ("errors", "abi", "resources", "ir", "verify", "memory_map", "context")),
    ("data", ("board", "frontends", "quant.formats", "quant.kv")),
    ("families", ("families",)),
    ("reference", ("reference",)),
    ("quantize", ("quant", "compress", "vocab", "timing", "describe")),
    ("kernels", ("kernels",)),
    ("lower", ("lower",)),
    ("plan", ("plan",)),
    ("fit", ("fit",)),
    ("bind", ("bind",)),
    ("emit", ("emit",)),
    ("build", ("build",)),
    ("run", ("run", "convert")),
    ("compile", ("compile",)),
    ("compile with a draft", ("compile_draft",)),  # a second model beside the target: two compiles
    ("tools", ("bench", "cli", "__main__")),
]
# Imports that may stay inside a function: optional heavy dependencies (not
# installed with the core package) and the CLI's lazy loading of its commands.
LAZY_OK_MODULES = {"torch", "transformers", "onnx", "onnxruntime", "onnxscript", "unicorn", "accelerate", "tqdm"}
LAZY_OK_IMPORTERS = {"cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def floor_of(mod: str) -> int:
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > depth:
                best, depth = i, len(pre)
    assert best is not None, f"module {mod} has no floor in tests/unit/test_architecture.py FLOORS"
    return best


def imports(mod: str) -> list[tuple[str, bool, int]]:
    """(imported package module, inside a function?, line) for every in-package import."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text())
    base = mod.split(".") if mod else []
    if path.name != "__init__.py":
        base = base[:-1]
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level:
            target = base[:len(base) - (n.level - 1)] + (n.module.split(".") if n.module else [])
            names = [".".join(target + [a.name]) for a in n.names]
            for t in names if all(x in MODULES for x in names) else [".".join(target)]:
                out.append((t, id(n) in inner, n.lineno))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tinyllm_gen"):
            out.append((n.module.removeprefix("tinyllm_gen").lstrip("."), id(n) in inner, n.lineno))
    return out


def test_every_import_runs_down_the_floors():
    bad = [f"{mod}:{line} imports {target} (floor {FLOORS[floor_of(target)][0]} from {FLOORS[floor_of(mod)][0]})"
           for mod in MODULES for target, _, line in imports(mod)
           if target and floor_of(target) > floor_of(mod)]
    assert not bad, "imports up the floors:\n" + "\n".join(bad)


def test_no_import_cycle():
    graph = defaultdict(set)
    for mod in MODULES:
        for target, _, _ in imports(mod):
            if target and target != mod:
                graph[mod].add(target)
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_no_package_import_hides_in_a_function():
    hidden = [f"{mod}:{line} imports {target}" for mod in MODULES if mod not in LAZY_OK_IMPORTERS
              for target, inner, line in imports(mod) if inner]
    assert not hidden, "imports inside functions (a cycle dodged?):\n" + "\n".join(hidden)


def test_function_level_imports_are_optional_dependencies_only():
    hidden = []
    for mod, path in MODULES.items():
        if mod in LAZY_OK_IMPORTERS:
            continue
        tree = ast.parse(path.read_text())
        for f in ast.walk(tree):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(f):
                if isinstance(n, ast.Import):
                    names = [a.name.split(".")[0] for a in n.names]
                elif isinstance(n, ast.ImportFrom) and not n.level:
                    names = [(n.module or "").split(".")[0]]
                else:
                    continue
                hidden += [f"{mod}:{n.lineno} imports {x}" for x in names if x not in LAZY_OK_MODULES]
    assert not hidden, "imports inside functions that are not optional dependencies:\n" + "\n".join(hidden)


@pytest.mark.parametrize("options", [{}, {"board": "weact-h750", "max_seq": "auto", "stream": "auto"},
                                     {"board": "stm32h750b-dk", "stream": "all", "sampler": "greedy"},
                                     {"kv_bits": 4, "sampler": "topk:8", "max_seq": "auto"}])
def test_a_compile_lowers_its_graph_once(options, monkeypatch):
    import tinyllm_gen.compile as compile_mod
    from tinyllm_gen.lower import step

    calls = []
    real = step.lower_step

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(compile_mod, "lower_step", counted)
    monkeypatch.setattr(step, "lower_step", counted)
    compile_mod.compile_path(ROOT / "models" / "story-260k", compile_mod.CompileOptions(**options))
    assert len(calls) == 1


def test_the_searches_live_in_fit():
    """No pass calls the planner and no planner lowers: the candidates are tried in fit/ only."""
    searches = ("largest_fitting_seq", "auto_max_seq", "chunk_sizes", "choose_pinned", "fit_stream")
    for mod, path in MODULES.items():
        if mod.startswith(("fit", "lower.stream")) or mod in ("compile",):
            continue
        tree = ast.parse(path.read_text())
        called = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                  for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not called & set(searches), f"{mod} runs a search: {sorted(called & set(searches))}"


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md is {len(lines)} lines: move topics to docs/"
