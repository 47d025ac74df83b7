/* The numerics contract, enforced in the C itself.
 *
 * Tokens are bit-identical to the numpy reference only if every float
 * operation rounds exactly as written: a*b+c is a multiply, a rounding, an
 * add and a rounding.  The CMake target tinyllm::numerics carries the flags
 * that say so (cmake/TinyLLM.cmake); this header is for builds that do not
 * use it (a vendor IDE, a Makefile, a user's own CMake target with GCC's
 * defaults).  Every runtime header and every generated source includes it
 * first.  Not for user code: tllm_api.h does not include it.
 *
 * - Contraction (fusing a*b+c into one FMA, rounded once).  GCC's default
 *   for C in GNU mode (-std=gnu11, CMake's default) is -ffp-contract=fast,
 *   and on a Cortex-M7 with an FPU it emits VFMA: the tokens of the bundled
 *   model diverge at token 34 (sampling, T 0.8, top-p 0.9, seed 42).  GCC
 *   ignores `#pragma STDC FP_CONTRACT OFF` (and warns about it under -Wall),
 *   and no macro tells a translation unit which -ffp-contract mode it got.
 *   `#pragma GCC optimize("fp-contract=off")` does work: it applies to every
 *   function defined after it, so a -ffp-contract=fast build of the runtime
 *   and the generated model has no VFMA/VFMS/VFNMA/VFNMS and the same code
 *   as a -ffp-contract=off build (tests/emu/test_own_firmware.py checks the
 *   disassembly and the tokens).  Clang honours the standard pragma, except
 *   under -ffp-contract=fast, which ignores pragmas: there only the flags of
 *   tinyllm::numerics help.
 * - -ffast-math (and -ffinite-math-only) reorder sums, replace divisions by
 *   reciprocals and assume no NaN/inf: a per-function pragma cannot undo all
 *   of that reliably, so they stop the build here, naming the fix. */
#ifndef TLLM_NUMERICS_H
#define TLLM_NUMERICS_H

#if defined(__FAST_MATH__)
#error "tinyllm-gen: compiled with -ffast-math, which breaks bit-exact tokens. Remove -ffast-math from the flags of the runtime and the generated model (CMAKE_C_FLAGS, add_compile_options, IDE settings); what they need is tinyllm::numerics: -ffp-contract=off -fno-math-errno."
#endif
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "tinyllm-gen: compiled with -ffinite-math-only, which breaks bit-exact tokens. Remove it from the flags of the runtime and the generated model; what they need is tinyllm::numerics: -ffp-contract=off -fno-math-errno."
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif
