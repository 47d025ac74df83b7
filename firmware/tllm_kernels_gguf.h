/* Kernels for llama.cpp's own block formats, kept as a GGUF file holds them
 * (codegen/quant/formats.py states the layouts; codegen/exact.py has the
 * numpy twins: matvec_gguf, dequant_row_gguf).
 *
 *   Q4_0  18 B per 32 weights: fp16 d, 16 B nibbles;        w = d * (q - 8)
 *   Q4_1  20 B per 32 weights: fp16 d, fp16 m, 16 B nibbles; w = d * q + m
 *   Q8_0  34 B per 32 weights: fp16 d, 32 int8;              w = d * q
 *
 * Byte j of a Q4_0/Q4_1 block holds element j in its low nibble and element
 * j + 16 in its high nibble.  Rows are cols / 32 consecutive blocks.
 *
 * Matvec arithmetic (W4A8 / W8A8), activations int8 per group of 32 (xq, one
 * float32 scale sx per group, tllm_quantize_i8): per block
 *   isum = sum(q * xq), xsum = sum(xq)            (int32, exact)
 *   Q8_0: t = (d * sx) * (float)isum
 *   Q4_0: t = (d * sx) * (float)(isum - 8 * xsum)
 *   Q4_1: t = (d * sx) * (float)isum;  t = t + (m * sx) * (float)xsum
 *   acc = acc + t, blocks left to right; then acc + bias.
 * fp16 -> float32 is exact (tllm_fp16_to_f32). */
#ifndef TLLM_KERNELS_GGUF_H
#define TLLM_KERNELS_GGUF_H

#include "tllm_numerics.h" /* first: the float rules, see there */
#include "tllm_abi.h"      /* TLLM_MAX_BATCH */

#include <stdint.h>

#define TLLM_GGUF_BLOCK 32

typedef struct {
    uint16_t d; /* fp16 bits */
    uint8_t qs[16];
} tllm_block_q4_0;

typedef struct {
    uint16_t d; /* fp16 bits */
    uint16_t m; /* fp16 bits */
    uint8_t qs[16];
} tllm_block_q4_1;

typedef struct {
    uint16_t d; /* fp16 bits */
    int8_t qs[32];
} tllm_block_q8_0;

_Static_assert(sizeof(tllm_block_q4_0) == 18, "Q4_0 block is 18 bytes (quant/formats.py GGUF_BLOCK_BYTES)");
_Static_assert(sizeof(tllm_block_q4_1) == 20, "Q4_1 block is 20 bytes (quant/formats.py GGUF_BLOCK_BYTES)");
_Static_assert(sizeof(tllm_block_q8_0) == 34, "Q8_0 block is 34 bytes (quant/formats.py GGUF_BLOCK_BYTES)");

/* A matrix of rows x cols (cols a multiple of 32) in one of the formats; the
 * function called says which. */
typedef struct {
    const uint8_t *blocks;
    uint16_t rows;
    uint16_t cols;
} tllm_gguf_matrix;

float tllm_fp16_to_f32(uint16_t h);

/* out = row `token` dequantized (ggml's dequantize_row_* arithmetic). */
void tllm_embed_q40(const tllm_gguf_matrix *m, int32_t token, float *out);
void tllm_embed_q41(const tllm_gguf_matrix *m, int32_t token, float *out);
void tllm_embed_q80(const tllm_gguf_matrix *m, int32_t token, float *out);

void tllm_matvec_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *out);
void tllm_matvec_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *out);
void tllm_matvec_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *out);

/* Batched prefill, P tokens through one matrix: token p's int8 activations
 * at xq + p * cols, its scales at xs + p * cols / 32; out[p * rows + r] equals
 * tllm_matvec_* of token p bit for bit (each block's scales, and its weights
 * in SMLAD lanes, are unpacked once for TLLM_MAX_BATCH tokens). */
void tllm_matmat_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias,
                     float *out);
void tllm_matmat_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias,
                     float *out);
void tllm_matmat_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias,
                     float *out);

/* Greedy-only builds: the matvec over chunk_rows rows at a time into chunk,
 * returning the index of the first maximum (as tllm_argmax). */
int32_t tllm_argmax_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *chunk,
                        int32_t chunk_rows);
int32_t tllm_argmax_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *chunk,
                        int32_t chunk_rows);
int32_t tllm_argmax_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *chunk,
                        int32_t chunk_rows);

#endif
