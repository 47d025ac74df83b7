"""The kernel registry (tests/kernel_registry) covers the firmware: every
function a kernel header declares has an entry with cases (or a reason in
headers.EXCLUDED), no entry names a function that no header declares, and
every firmware header is classified.  Plus the checker itself: it does
notice a new kernel, a stale entry, an entry without cases."""
from __future__ import annotations

import shutil
from dataclasses import replace

from kernel_registry import REGISTRY
from kernel_registry.headers import declared_functions, registry_problems
from tinyllm_gen.resources import firmware_dir


def test_every_kernel_has_a_twin_and_cases():
    assert registry_problems(firmware_dir(), REGISTRY) == []


def test_the_parser_sees_prototypes_and_inline_definitions_only():
    text = """
    #ifndef X_H
    #define X_H
    #define tllm_macro(x) (x)                  /* a macro, not a function */
    #ifdef __cplusplus
    extern "C" {
    #endif
    typedef struct { int a; void (*cb)(int); } tllm_thing;
    typedef enum { A = 1, B = 2 } tllm_enum;
    typedef int (*tllm_callback)(const tllm_thing *t);
    _Static_assert(sizeof(tllm_thing) > 0, "size");
    extern const tllm_thing tllm_table;
    float tllm_expf(float x);   // a prototype
    void tllm_exit(int code) __attribute__((noreturn));
    static inline __attribute__((always_inline)) float helper(float x) { if (x) { return x; } return 0.0f; }
    int32_t tllm_after(const float *x,
                       int32_t n);
    #ifdef __cplusplus
    }
    #endif
    #endif
    """
    assert declared_functions(text) == ["tllm_expf", "tllm_exit", "helper", "tllm_after"]


def test_the_check_notices_a_new_kernel_a_stale_entry_and_missing_cases(tmp_path):
    fw = tmp_path / "firmware"
    shutil.copytree(firmware_dir(), fw)
    with open(fw / "tllm_kernels.h", "a") as f:
        f.write("\nvoid tllm_new_kernel(float *x, int32_t n);\n")
    (fw / "tllm_newthing.h").write_text("void tllm_newthing(void);\n")
    stale = replace(REGISTRY[0], name="tllm_gone")
    caseless = replace(REGISTRY[1], cases=())
    problems = registry_problems(fw, (stale, caseless) + REGISTRY[2:])
    assert any(p.startswith("tllm_new_kernel (tllm_kernels.h) has no registry entry") for p in problems)
    assert "firmware/tllm_newthing.h: not in headers.KERNEL_HEADERS nor OTHER_HEADERS (say which, and why)" in problems
    assert "registry entry tllm_gone: no kernel header declares it" in problems
    assert f"registry entry {REGISTRY[1].name}: no case" in problems
    assert any(p.startswith(f"{REGISTRY[0].name} (tllm_kernels.h) has no registry entry") for p in problems)
