"""Emulator tier: every registry case on the Cortex-M7 under QEMU
mps2-an500, against the same numpy twin bit for bit.  The harness is the
host one's runners with an M7 I/O layer (kernel_registry/harness_m7.py);
the M7 paths differ from the host's in the SMLAD/VMLA assembly (q4x4
matvec/matmat, attention, GGUF dots), VCVTA rounding, VCVTB fp16, VSQRT and
VMAXNM.  All cases run in a few boots; each is then compared on its own."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from kernel_registry import REGISTRY
from kernel_registry.harness_m7 import IN_BYTES, OUT_BYTES, build_m7_harness, run_batch
from kernel_registry.spec import bits, decode, encode, expected, output_bytes

pytestmark = pytest.mark.emu


def _marks(c):
    reason = c.known_difference or c.m7_difference
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


CASES = [pytest.param(k, c, id=f"{k.name}-{c.label}", marks=_marks(c)) for k in REGISTRY for c in k.cases]


@pytest.fixture(scope="module")
def m7_outputs(tmp_path_factory):
    """(kernel, label) -> (values, the M7's output bytes), every case run in batches."""
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gcc-arm-none-eabi qemu-system-arm)")
    tmp = tmp_path_factory.mktemp("kernel_twins_m7")
    harness = build_m7_harness(REGISTRY, tmp)
    results, batch, keys, in_size, out_size = {}, [], [], 8, 0

    def flush():
        nonlocal batch, keys, in_size, out_size
        if batch:
            for key, raw in zip(keys, run_batch(harness, batch, tmp)):
                results[key] = (results[key], raw)
        batch, keys, in_size, out_size = [], [], 8, 0

    for k in REGISTRY:
        for c in k.cases:
            values = c.values()
            data = encode(k, values)
            need_in, need_out = 8 + len(data) + 3, 4 + output_bytes(k, values)
            if in_size + need_in > IN_BYTES or out_size + need_out > OUT_BYTES:
                flush()
            results[(k.name, c.label)] = values
            batch.append((k.name, data))
            keys.append((k.name, c.label))
            in_size, out_size = in_size + need_in, out_size + need_out
    flush()
    return results


@pytest.mark.parametrize("kernel,case", CASES)
def test_m7_kernel_equals_its_twin(m7_outputs, kernel, case):
    values, raw = m7_outputs[(kernel.name, case.label)]
    got = decode(kernel, values, raw)
    with np.errstate(over="ignore", invalid="ignore"):
        want = expected(kernel, values)
    for name, w in want.items():
        g = got[name][: len(w)]
        assert len(g) == len(w)
        bad = np.flatnonzero(bits(g) != bits(w))
        assert len(bad) == 0, (f"{kernel.name} {case.label} on the M7: {name} differs at {len(bad)} of {len(w)} "
                               f"elements, first [{bad[0]}]: M7 {g[bad[0]]!r} twin {w[bad[0]]!r}")
