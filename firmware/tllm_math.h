/* Rounding and multiply-accumulate helpers shared by the kernel files, each
 * matching codegen/exact.py exactly. Internal to the runtime. */
#ifndef TLLM_MATH_H
#define TLLM_MATH_H

#include "tllm_numerics.h" /* first: the float rules, see there */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The smallest group maximum that quantizes: below it 127/amax (and 7/amax)
 * would overflow float to inf, so such a group is stored as zeros with scale
 * 0, as an all-zero group is (codegen/exact.py AMAX_MIN). 127 * 2^120 is
 * below FLT_MAX. */
#define TLLM_AMAX_MIN 0x1p-120f

/* Nearest, ties away from zero, exact: one VCVTA on the M7 (with
 * -fno-math-errno), glibc/newlib lroundf elsewhere. */
static inline int32_t round_half_away(float v) { return (int32_t)lroundf(v); }

/* acc + a * b with two roundings. On the M7 that is one VMLA.F32 (ARMv7-M's
 * chained, not fused, multiply-accumulate); -ffp-contract=off keeps gcc from
 * emitting it on its own, so it is spelled out here. */
static inline float mla(float acc, float a, float b) {
#if defined(__ARM_FP) && defined(__thumb2__)
    __asm__("vmla.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
#else
    return acc + a * b;
#endif
}

/* Constants with exactly the bits exact.py uses (hex floats avoid any
 * decimal-to-binary doubt). */
#define EXP_LOG2E 0x1.715476p+0f
#define EXP_LN2_HI 0x1.62e4p-1f
#define EXP_LN2_LO 0x1.7f7d1cp-20f
#define EXP_MIN (-86.0f)
#define EXP_MAX 88.0f

/* Always inlined into its callers (softmax, SiLU) so that instruction
 * counts per function attribute exp to the op that needed it. */
static inline __attribute__((always_inline)) float exp_poly(float x) {
    if (x > EXP_MAX) x = EXP_MAX;
    if (x < EXP_MIN) return 0.0f;
    int32_t n = round_half_away(x * EXP_LOG2E);
    float nf = (float)n;
    float r = x - nf * EXP_LN2_HI;
    r = r - nf * EXP_LN2_LO;
    float p = 0x1.6c16c2p-10f;            /* 1/720 */
    p = p * r + 0x1.111112p-7f;           /* 1/120 */
    p = p * r + 0x1.555556p-5f;           /* 1/24 */
    p = p * r + 0x1.555556p-3f;           /* 1/6 */
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { uint32_t u; float f; } scale;
    scale.u = (uint32_t)(n + 127) << 23;
    return p * scale.f;
}

/* 2^y for y <= 0, for softmax weights that are then rounded to 15-bit
 * integers (tllm_attention_i8): relative error 2.9e-6, 17 instructions.
 * n = round(y) by the 1.5*2^23 trick, r = y - n in [-0.5, 0.5], 2^r by a
 * degree-4 polynomial (constant term exactly 1), 2^n by adding n << 23 to
 * the exponent bits: bits(t) << 23 is n << 23 because bits(MAGIC) << 23
 * vanishes mod 2^32.  Twin: exact.exp2_nonpos (constants and the why). */
#define EXP2_MAGIC 0x1.8p+23f
#define EXP2_FLOOR (-64.0f)
static inline __attribute__((always_inline)) float exp2_nonpos(float y) {
    y = fmaxf(y, EXP2_FLOOR); /* one VMAXNM on the M7 */
    const float t = y + EXP2_MAGIC;
    const float r = y - (t - EXP2_MAGIC);
    float p = 0x1.3a0282p-7f;
    p = p * r + 0x1.c9fc28p-5f;
    p = p * r + 0x1.ec0378p-3f;
    p = p * r + 0x1.62e12cp-1f;
    p = p * r + 1.0f;
    uint32_t pb, tb;
    memcpy(&pb, &p, 4);
    memcpy(&tb, &t, 4);
    pb += tb << 23;
    memcpy(&p, &pb, 4);
    return p;
}

/* One chunk of a streamed argmax (greedy-only builds): rows r0.. of the
 * logits are x[0..n); keeps the first maximum, in tllm_argmax's order (row 0
 * starts the race, later rows win only when strictly greater). */
static inline void argmax_chunk(const float *x, int32_t n, int32_t r0, int32_t *best, float *best_v) {
    int32_t i = 0;
    if (r0 == 0) {
        *best = 0;
        *best_v = x[0];
        i = 1;
    }
    for (; i < n; i++) {
        if (x[i] > *best_v) {
            *best = r0 + i;
            *best_v = x[i];
        }
    }
}

/* 1 / sqrt(mean(x^2) + eps), the sum of squares left to right (RMSNorm). */
static inline float rms_inverse(const float *x, int32_t n, float eps) {
    float ss = 0.0f;
    for (int32_t i = 0; i < n; i++) ss = mla(ss, x[i], x[i]);
    ss = ss / (float)n;
    ss = ss + eps;
    return 1.0f / sqrtf(ss);
}

#endif
