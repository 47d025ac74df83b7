/* Rounding and multiply-accumulate helpers shared by the kernel files, each
 * matching tinyllm_gen/exact.py exactly. Internal to the runtime. */
#ifndef TLLM_MATH_H
#define TLLM_MATH_H

#include <math.h>
#include <stdint.h>

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

/* 1 / sqrt(mean(x^2) + eps), the sum of squares left to right (RMSNorm). */
static inline float rms_inverse(const float *x, int32_t n, float eps) {
    float ss = 0.0f;
    for (int32_t i = 0; i < n; i++) ss = mla(ss, x[i], x[i]);
    ss = ss / (float)n;
    ss = ss + eps;
    return 1.0f / sqrtf(ss);
}

#endif
