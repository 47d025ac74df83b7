"""The one generic C harness: generated from the registry, one `main` that
dispatches by kernel name (argv[1]), reads the arguments as binary from
stdin in the order spec.Kernel.args declares them, calls the kernel once
(elementwise kernels: once per element) and writes its outputs to stdout.

Built with the host gcc and the project's numerics flags (board.py
NUMERICS_CFLAGS, the same contract the firmware is built with), linked with
every runtime kernel source the registry's headers need.  Only the I/O layer
and main depend on the target: HOST_IO / HOST_MAIN here, harness_m7.py's for
the Cortex-M7 under QEMU; the per-kernel runners are the same text."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterable

from tinyllm_gen.board import NUMERICS_CFLAGS
from tinyllm_gen.resources import firmware_dir

from .spec import FILL_BYTE, Array, Kernel, Role, Scalar, Struct

# The runtime source that defines each header's functions (tllm_math.h is
# header-only: static inline helpers).
HEADER_SOURCES = {
    "tllm_kernels.h": "tllm_kernels.c",
    "tllm_kernels_m7.h": "tllm_kernels_m7.c",
    "tllm_kernels_gguf.h": "tllm_kernels_gguf.c",
    "tllm_kernels_gguf_m7.h": "tllm_kernels_gguf_m7.c",
    "tllm_cmsis.h": "tllm_cmsis.c",
    "tllm_sampler.h": "tllm_sampler.c",
    "tllm_math.h": None,
    "tllm_topk.h": None,  # static inline loops over tllm_kernels*.c's matvecs and tllm_sampler.c's push
    "tllm_draft.h": None,  # the prompt-lookup draft: static inline
    "tllm_verify.h": None,  # static inline loops over the batched matmuls, argmax_chunk and tllm_topk_push
}
WARNINGS = ("-Wall", "-Wextra", "-Werror")

COMMON = """\
/* Generated from tests/kernel_registry (harness_c.py): do not edit.
 * Per call: the kernel's arguments in, its outputs out, in the order and
 * format tests/kernel_registry/spec.py states. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
%INCLUDES%
"""

# Host: argv[1] names the kernel, stdin holds its arguments, stdout gets its outputs.
HOST_IO = """\
static void fail(int code) { exit(code); }
static void *harness_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 16);
    if (!p) fail(4);
    return p;
}
static void read_exact(void *p, size_t n) {
    if (fread(p, 1, n, stdin) != n) fail(2); /* fewer bytes than the declaration */
}
static void done_reading(void) {
    if (fgetc(stdin) != EOF) fail(5); /* more bytes than the declaration */
}
static void put(const void *p, size_t n) {
    if (fwrite(p, 1, n, stdout) != n) fail(6);
}
"""

HOST_MAIN = """
int main(int argc, char **argv) {
    if (argc != 2) return 3;
    for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; i++)
        if (!strcmp(argv[1], KERNELS[i].name)) {
            KERNELS[i].run();
            return fflush(stdout) ? 6 : 0;
        }
    return 3; /* no such kernel in the registry */
}
"""

# Shared by both targets: a uint32 element count, then (sent) the elements;
# otherwise the array is filled so an element the kernel never writes shows up.
TAKE_ARRAY = f"""\
static void *take_array(size_t elem, int sent, uint32_t *count) {{
    read_exact(count, 4);
    const size_t bytes = (size_t)*count * elem;
    void *p = harness_alloc(bytes);
    if (sent) read_exact(p, bytes);
    else memset(p, 0x{FILL_BYTE:02X}, bytes);
    return p;
}}
"""


def _param(k: Kernel, name: str) -> str:
    a = k.arg(name)
    if isinstance(a, Struct):
        return f"&{a.name}"
    if isinstance(a, Array) and a.nullable:
        return f"(n_{a.name} ? {a.name} : NULL)"
    return a.name


def _runner(k: Kernel) -> str:
    lines = [f"static void run_{k.name}(void) {{"]
    if k.elementwise:
        lines.append("    uint32_t count;")
        lines.append("    read_exact(&count, 4);")
        for a in k.args:
            lines.append(f"    {a.ctype} *in_{a.name} = harness_alloc(sizeof *in_{a.name} * count);")
            lines.append(f"    read_exact(in_{a.name}, sizeof *in_{a.name} * count);")
        lines.append(f"    {k.returns} *ret = harness_alloc(sizeof *ret * count);")
        lines.append("    done_reading();")
        call = ", ".join(f"in_{a.name}[i]" for a in k.args)
        lines.append(f"    for (uint32_t i = 0; i < count; i++) ret[i] = {k.name}({call});")
        lines.append("    put(ret, sizeof *ret * count);")
        lines.append("}")
        return "\n".join(lines)
    for a in k.args:
        if isinstance(a, Scalar):
            lines.append(f"    {a.ctype} {a.name};")
            lines.append(f"    read_exact(&{a.name}, sizeof {a.name});")
        elif isinstance(a, Array):
            lines.append(f"    uint32_t n_{a.name};")
            lines.append(f"    {a.ctype} *{a.name} = take_array(sizeof *{a.name}, {int(a.sent)}, &n_{a.name});")
    lines.append("    done_reading();")
    for a in k.args:
        if isinstance(a, Struct):
            init = ", ".join(f".{f} = {_param(k, arg)}" for f, arg in a.fields + a.pointers)
            lines.append(f"    {a.ctype} {a.name} = {{{init}}};")
    call = f"{k.name}({', '.join(_param(k, p) for p in k.call)})"
    lines.append(f"    {k.returns} ret = {call};" if k.returns else f"    {call};")
    for a in k.args:
        if isinstance(a, Array) and a.role in (Role.OUT, Role.INOUT):
            lines.append(f"    put({a.name}, sizeof *{a.name} * n_{a.name});")
        elif isinstance(a, Struct) and a.write_back:
            for f, _ in a.fields:
                lines.append(f"    put(&{a.name}.{f}, sizeof {a.name}.{f});")
    if k.returns:
        lines.append("    put(&ret, sizeof ret);")
    lines.append("}")
    return "\n".join(lines)


def headers_of(kernels: Iterable[Kernel]) -> list[str]:
    seen: list[str] = []
    for k in kernels:
        if k.header not in seen:
            seen.append(k.header)
    return seen


def harness_source(kernels: Iterable[Kernel], io: str = HOST_IO, main: str = HOST_MAIN) -> str:
    """The harness C: the I/O layer of the target (io), one runner per kernel,
    the name table, and the target's main."""
    kernels = list(kernels)
    includes = "\n".join(f'#include "{h}"' for h in headers_of(kernels))
    parts = [COMMON.replace("%INCLUDES%", includes), io, TAKE_ARRAY]
    parts += [_runner(k) for k in kernels]
    table = "\n".join(f'    {{"{k.name}", run_{k.name}}},' for k in kernels)
    parts.append(f"""static const struct {{
    const char *name;
    void (*run)(void);
}} KERNELS[] = {{
{table}
}};
""")
    parts.append(main)
    return "\n".join(parts)


def runtime_sources(kernels: Iterable[Kernel]) -> list[Path]:
    fw = firmware_dir()
    return [fw / s for h in headers_of(kernels) if (s := HEADER_SOURCES[h])]


def build_host_harness(kernels: Iterable[Kernel], tmp: Path) -> Path:
    kernels = list(kernels)
    src = tmp / "kernel_harness.c"
    src.write_text(harness_source(kernels))
    exe = tmp / "kernel_harness"
    proc = subprocess.run(["gcc", "-O2", *NUMERICS_CFLAGS, *WARNINGS, "-I", str(firmware_dir()), str(src),
                           *map(str, runtime_sources(kernels)), "-lm", "-o", str(exe)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the kernel harness ({src}) does not build:\n{proc.stderr}")
    return exe
