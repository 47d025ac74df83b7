/* See tllm_cmsis.h. The C twin follows CMSIS-NN's documented arithmetic
 * (arm_nn_requantize without CMSIS_NN_USE_SINGLE_ROUNDING); the Python
 * mirror is exact.cmsis_fc_s4. */
#include "tllm_cmsis.h"

#include <math.h>

#ifdef TLLM_USE_CMSIS_NN
#include "arm_nnfunctions.h"
#endif

void tllm_quantize_static_s8(const float *x, int32_t n, float inv_scale, int8_t *q) {
    for (int32_t i = 0; i < n; i++) {
        /* clamped before the conversion, which would wrap past 2^31 (same result in range) */
        float t = x[i] * inv_scale;
        t = t > 127.0f ? 127.0f : (t < -127.0f ? -127.0f : t);
        q[i] = (int8_t)lroundf(t);
    }
}

#ifndef TLLM_USE_CMSIS_NN
/* round-half-up high word of 2*a*b (no saturation: a = b = INT32_MIN never occurs) */
static int32_t doubling_high_mult(int32_t a, int32_t b) {
    return (int32_t)(((int64_t)a * b + (1LL << 30)) >> 31);
}

/* arithmetic shift right rounding half away from zero */
static int32_t divide_by_pow2(int32_t v, int32_t exponent) {
    const int32_t mask = (int32_t)((1u << exponent) - 1u);
    const int32_t rem = v & mask;
    int32_t result = v >> exponent;
    int32_t threshold = mask >> 1;
    if (result < 0) threshold++;
    if (rem > threshold) result++;
    return result;
}

static int32_t requantize(int32_t acc, int32_t multiplier, int32_t shift) {
    const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    return divide_by_pow2(doubling_high_mult((int32_t)((uint32_t)acc << left), multiplier), right);
}

static void fc_twin(const tllm_fc_s4pc_layer *fc, const int8_t *xq, int8_t *q_out) {
    const uint8_t *w = fc->filter;
    uint32_t k = 0; /* nibble index, continuous across rows */
    for (int32_t r = 0; r < fc->rows; r++) {
        int32_t acc = fc->bias[r];
        for (int32_t i = 0; i < fc->cols; i++, k++) {
            const uint8_t b = w[k >> 1];
            const int32_t nib = (k & 1) ? (b >> 4) : (b & 0xF);
            acc += (nib > 7 ? nib - 16 : nib) * (int32_t)xq[i];
        }
        int32_t v = requantize(acc, fc->multipliers[r], fc->shifts[r]);
        q_out[r] = (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v));
    }
}
#endif

void tllm_fc_s4pc(const tllm_fc_s4pc_layer *fc, const int8_t *xq, int8_t *q_out, float *out) {
#ifdef TLLM_USE_CMSIS_NN
    const cmsis_nn_context ctx = {0, 0};
    const cmsis_nn_conv_params conv = {0, 0, {1, 1}, {0, 0}, {1, 1}, {-128, 127}};
    const cmsis_nn_per_channel_quant_params quant = {(int32_t *)fc->multipliers, (int32_t *)fc->shifts};
    const cmsis_nn_dims in_dims = {1, 1, 1, fc->cols}, filter_dims = {fc->rows, 1, 1, fc->cols},
                        bias_dims = {1, 1, 1, fc->rows}, out_dims = {1, 1, 1, fc->rows};
    arm_convolve_1x1_s4(&ctx, &conv, &quant, &in_dims, xq, &filter_dims, (const int8_t *)fc->filter, &bias_dims,
                        fc->bias, &out_dims, q_out);
#else
    fc_twin(fc, xq, q_out);
#endif
    for (int32_t r = 0; r < fc->rows; r++) out[r] = (float)q_out[r] * fc->out_scale;
}
