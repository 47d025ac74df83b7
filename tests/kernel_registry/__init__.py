"""The kernel registry: every C kernel of the firmware paired with its numpy
twin, a typed description of its arguments and inputs that cover its edge
cases.  It drives one generic harness (harness_c.py, one C `main`
generated from these entries): tests/host/test_kernel_twins.py runs it built
with the host gcc, tests/emu/test_kernel_twins_m7.py built for the Cortex-M7
under QEMU (harness_m7.py), and both compare every case's outputs with the
twin's bit for bit;
tests/unit/test_kernel_registry_complete.py fails when a kernel declared in a
firmware header has no entry (and no reason in headers.EXCLUDED), when an
entry names a function no header declares, or when an entry has no case.

Why under tests/ and not in the package: it is test data (input generators,
seeds, layout encoders for the comparison); the twins it pairs stay where
the compiler uses them (codegen/exact.py, codegen/sampler.py,
codegen/quant/*).

Adding a kernel (say `tllm_foo(const float *x, int32_t n, float *out)` in
tllm_kernels.h): in the entries file of its header add

    FOO = Kernel("tllm_foo", "tllm_kernels.h",
                 args=(In("x", "float", "n"), Scalar("n", "int32_t"), Out("out", "float", "n")),
                 call=("x", "n", "out"),
                 twin=lambda v: {"out": exact.foo(v["x"])},
                 cases=(Case("n7", lambda r: dict(x=inputs.normal(r, 7), n=7), seed=1), ...))

and list it in that file's ENTRIES.  Arguments are read by the harness in
the order of `args`; `call` names the C parameters in order (a struct
argument is passed as &name; a written-back struct that points at arrays
names them in `pointers`, as entries_topk.SET_ARGS).  Lengths are Python
expressions over the scalars (spec.LENGTH_HELPERS).  The twin returns every OUT and INOUT array
(and "return" for a return value) as float32 / integer numpy arrays.  A
kernel in a new header also needs its source in harness_c.HEADER_SOURCES and
the header in headers.KERNEL_HEADERS.  A case the C is known to get wrong
carries `known_difference` (or `m7_difference`, Cortex-M7 only): the tests
then expect it to fail, strictly, so it stays visible until fixed.
"""
from __future__ import annotations

from . import (entries_cmsis_sampler, entries_context, entries_draft, entries_gguf, entries_gguf_m7, entries_kernels,
               entries_m7, entries_math, entries_topk, entries_verify)
from .spec import Case, Kernel

REGISTRY: tuple[Kernel, ...] = (entries_kernels.ENTRIES + entries_m7.ENTRIES + entries_gguf.ENTRIES
                                + entries_gguf_m7.ENTRIES + entries_cmsis_sampler.ENTRIES + entries_math.ENTRIES
                                + entries_topk.ENTRIES + entries_verify.ENTRIES + entries_draft.ENTRIES
                                + entries_context.ENTRIES)
BY_NAME = {k.name: k for k in REGISTRY}
assert len(BY_NAME) == len(REGISTRY), "a kernel is registered twice"

__all__ = ["BY_NAME", "REGISTRY", "Case", "Kernel"]
