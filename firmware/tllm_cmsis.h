/* The "per-channel" linear layer (codegen/quant/per_channel.py): int8
 * activations with static scales, int4 weights with one scale per output
 * row, int32 accumulation and CMSIS-NN's requantization to int8.
 *
 * Built with TLLM_USE_CMSIS_NN (a CMSIS-NN checkout handed to CMake as
 * CMSIS_NN_ROOT) it calls arm_convolve_1x1_s4, which on a 1x1 input is a
 * per-channel int4 fully connected layer; otherwise it runs our own C twin
 * of the same integer arithmetic. Both match codegen/exact.py. */
#ifndef TLLM_CMSIS_H
#define TLLM_CMSIS_H

#include "tllm_numerics.h" /* first: the float rules, see there */

#include <stdint.h>

typedef struct {
    const uint8_t *filter;      /* int4, low nibble first, rows back to back (CMSIS-NN s4 packing) */
    const int32_t *bias;        /* [rows], at scale s_in * s_w[r] */
    const int32_t *multipliers; /* [rows] */
    const int32_t *shifts;      /* [rows], > 0 shifts left */
    uint16_t rows;
    uint16_t cols;
    float out_scale;            /* dequantization of the int8 result */
} tllm_fc_s4pc_layer;

/* q = clamp(round(x * inv_scale), -127, 127) */
void tllm_quantize_static_s8(const float *x, int32_t n, float inv_scale, int8_t *q);

/* out = out_scale * requantize(W xq + bias); q_out is int8 scratch [rows]. */
void tllm_fc_s4pc(const tllm_fc_s4pc_layer *fc, const int8_t *xq, int8_t *q_out, float *out);

#endif
