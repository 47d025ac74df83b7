"""Host tier: every C kernel in the registry (tests/kernel_registry) against
its numpy twin, bit for bit: integers and float bit patterns, tolerance 0.
One generated harness, built once per session with the firmware's numerics
flags; one subprocess call per case."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from firmware_harness import need
from kernel_registry import REGISTRY
from kernel_registry.harness_c import build_host_harness
from kernel_registry.spec import Array, Role, Struct, bits, decode, encode, expected

pytestmark = pytest.mark.host

CASES = [pytest.param(k, c, id=f"{k.name}-{c.label}",
                      marks=[pytest.mark.xfail(strict=True, reason=c.known_difference)] if c.known_difference else [])
         for k in REGISTRY for c in k.cases]


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    need("gcc")
    return build_host_harness(REGISTRY, tmp_path_factory.mktemp("kernel_twins"))


def returned_names(k) -> set[str]:
    names = {a.name for a in k.args if isinstance(a, Array) and a.role in (Role.OUT, Role.INOUT)}
    names |= {f"{a.name}.{f}" for a in k.args if isinstance(a, Struct) and a.write_back for f, _ in a.fields}
    return names | ({"return"} if k.returns else set())


def run_case(exe, kernel, case):
    values = case.values()
    proc = subprocess.run([str(exe), kernel.name], input=encode(kernel, values), capture_output=True)
    assert proc.returncode == 0, f"harness exit {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return values, decode(kernel, values, proc.stdout)


@pytest.mark.parametrize("kernel,case", CASES)
def test_kernel_equals_its_twin(harness, kernel, case):
    values, got = run_case(harness, kernel, case)
    with np.errstate(over="ignore", invalid="ignore"):  # extreme cases overflow on purpose, in C as in numpy
        want = expected(kernel, values)
    assert set(want) == returned_names(kernel), "the twin must give every output the harness returns"
    for name, w in want.items():
        g = got[name][: len(w)]
        assert len(g) == len(w), f"{kernel.name} {case.label}: {name} has {len(g)} elements, the twin {len(w)}"
        bad = np.flatnonzero(bits(g) != bits(w))
        assert len(bad) == 0, (f"{kernel.name} {case.label}: {name} differs at {len(bad)} of {len(w)} elements, "
                               f"first [{bad[0]}]: C {g[bad[0]]!r} twin {w[bad[0]]!r}")


def test_the_harness_refuses_bytes_that_do_not_fit_the_declaration(harness):
    """A twin/declaration drift must not pass silently: short input exits 2,
    extra input 5, an unknown kernel 3."""
    from kernel_registry import BY_NAME
    k = BY_NAME["tllm_add"]
    data = encode(k, dict(a=np.ones(4, np.float32), b=np.ones(4, np.float32), n=4))
    run = [str(harness), k.name]
    assert subprocess.run(run, input=data, capture_output=True).returncode == 0
    assert subprocess.run(run, input=data[:-1], capture_output=True).returncode == 2
    assert subprocess.run(run, input=data + b"\0", capture_output=True).returncode == 5
    assert subprocess.run([str(harness), "tllm_no_such_kernel"], input=data, capture_output=True).returncode == 3
