/* Portable C kernels of the tinyllm-gen runtime.
 *
 * Each kernel has a bit-exact numpy twin in codegen/exact.py: same
 * float32 operations in the same order (build with -ffp-contract=off so the
 * compiler cannot fuse a*b+c), exact integer dot products, our own expf.
 * Change one side and the other together, or the host/QEMU equality tests
 * fail. */
#ifndef TLLM_KERNELS_H
#define TLLM_KERNELS_H

#include "tllm_numerics.h" /* first: the float rules, see there */
#include "tllm_abi.h"      /* TLLM_MAX_BATCH */

#include <stdint.h>

/* A Q4 matrix in the "q4_rowmajor_lo_first" layout (quant/formats.py):
 * rows of ceil(cols/2) bytes, element 2j in the low nibble of byte j,
 * symmetric int4 in [-7, 7]; float32 scales [rows][ceil(cols/group)]. */
typedef struct {
    const uint8_t *packed;
    const float *scales;
    uint16_t rows;
    uint16_t cols;
    uint16_t group;
} tllm_q4_matrix;

/* One layer's int8 KV cache: [max_seq][n_kv_heads][head_dim] values and
 * [max_seq][n_kv_heads] float32 scales. */
typedef struct {
    int8_t *k;
    int8_t *v;
    float *k_scale;
    float *v_scale;
} tllm_kv_layer;

/* Largest head_dim the attention kernels take (stack scratch per head). */
#define TLLM_MAX_HEAD_DIM 256

typedef struct {
    uint16_t n_heads;
    uint16_t n_kv_heads;
    uint16_t head_dim;
    float scale; /* 1/sqrt(head_dim), rounded once on the host */
} tllm_attention_shape;

float tllm_expf(float x);

/* out[i] = (float)q[token][i] * scale[token][group(i)] */
void tllm_embed_q4(const tllm_q4_matrix *m, int32_t token, float *out);

/* out = x / sqrt(mean(x^2) + eps) * w, the sum of squares left to right. */
void tllm_rmsnorm(const float *x, const float *w, int32_t n, float eps, float *out);

/* Per group of `group`: scale = max|x| / 127, q = round(x * 127/max|x|). */
void tllm_quantize_i8(const float *x, int32_t n, int32_t group, int8_t *q, float *scales);

/* out[r] = sum_g ((float)dot_g * w_scale[r][g]) * x_scale[g]  (+ bias[r]).
 * The one matvec interface every linear layer goes through. */
void tllm_matvec_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *out);

/* Batched prefill, P tokens through one matrix (TLLM_MAX_BATCH at a time): token p's
 * int8 activations at xq + p * cols, its scales at xs + p * n_groups;
 * out[p * rows + r] equals tllm_matvec_q4 of token p bit for bit (each
 * group's nibbles are unpacked once for the P tokens). Twin: exact.matmat_q4. */
void tllm_matmat_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias,
                    float *out);

/* Greedy-only builds: tllm_matvec_q4 over chunk_rows rows at a time into
 * chunk, returning the index of the first maximum (as tllm_argmax). */
int32_t tllm_argmax_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *chunk,
                       int32_t chunk_rows);

/* In place, rotate-half layout: pairs (i, i + head_dim/2) per head;
 * cos/sin point at this position's row of head_dim/2 entries. */
void tllm_rope(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin);

/* Stores k and v at `pos` in the int8 cache, then attends q over positions
 * 0..pos. Scratch: q8 [head_dim] int8, scores [pos+1] float. */
void tllm_attention_i8(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                       const tllm_kv_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out);

/* One layer's int4 KV cache (codegen/quant/kv.py): values
 * [max_seq][n_kv_heads][head_dim/2] bytes, element 2j in the LOW nibble of
 * byte j, in [-7, 7]; float32 scales [max_seq][n_kv_heads][head_dim/group].
 * A centred cache (codegen/quant/kv_center.py) stores k - k_center and
 * v - v_center ([n_kv_heads * head_dim] each, k_center in the rotated frame),
 * both with clipped group scales, and adds v_center back to the output:
 * the same attention in exact arithmetic. */
typedef struct {
    uint8_t *k;
    uint8_t *v;
    float *k_scale;
    float *v_scale;
    uint16_t group;        /* elements per scale; divides head_dim */
    const float *k_center; /* NULL: uncentred */
    const float *v_center; /* NULL: uncentred */
} tllm_kv4_layer;

/* Per group: scale = max|x| / 7, q = round(x * 7/max|x|) in [-7, 7], packed
 * low nibble first into packed[n/2].  Twin: exact.quantize_rows_i4. */
void tllm_quantize_i4(const float *x, int32_t n, int32_t group, uint8_t *packed, float *scales);
/* tllm_quantize_i4 with each group's scale chosen among max|x| times 1, 0.95,
 * 0.9, 0.85, 0.8 by least squared error: the rotated int4 keys' quantizer
 * (tllm_attention_kv4_hadamard, tllm_kv_shift_kv4_hadamard).  Twin:
 * exact.quantize_rows_i4_clip. */
void tllm_quantize_i4_clip(const float *x, int32_t n, int32_t group, uint8_t *packed, float *scales);

/* tllm_attention_i8 over an int4 cache (keys and values stored by
 * tllm_quantize_i4).  Scores sum the groups' exact int32
 * dot products times the key scales left to right, then * q scale * 1/sqrt(hd).
 * Twin: exact.attention_kv4. */
void tllm_attention_kv4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                        const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out);

/* Context shift (compile --context-policy roll, docs/rolling-context.md): in
 * one layer's cache, rows to + delta .. to + delta + n_rows - 1 move to rows
 * to .. to + n_rows - 1.  V moves as it is; each key head is dequantized
 * (x = (float)q * scale), turned back by delta positions (a' = a*c + b*s,
 * b' = b*c - a*s, cos/sin: the RoPE tables' row delta) and quantized again.
 * Twins: exact.kv_shift_i8, exact.kv_shift_kv4. */
void tllm_kv_shift_i8(const tllm_attention_shape *shape, const tllm_kv_layer *kv, int32_t to, int32_t delta,
                      int32_t n_rows, const float *cos, const float *sin);
void tllm_kv_shift_kv4(const tllm_attention_shape *shape, const tllm_kv4_layer *kv, int32_t to, int32_t delta,
                       int32_t n_rows, const float *cos, const float *sin);
/* tllm_kv_shift_kv4 over a Hadamard-rotated int4 cache (--kv-rotate): each key head,
 * dequantized, is turned back to RoPE's frame (tllm_hadamard_heads, then * 1/head_dim: exact, a power
 * of two), turned back by delta positions, rotated again and quantized.  Twin: exact.kv_shift_kv4
 * with rotated=True. */
void tllm_kv_shift_kv4_hadamard(const tllm_attention_shape *shape, const tllm_kv4_layer *kv, int32_t to, int32_t delta,
                                int32_t n_rows, const float *cos, const float *sin);

/* Unnormalised Walsh-Hadamard transform of each of n_heads rows of head_dim
 * floats (a power of two), in place; its own inverse up to the factor
 * head_dim.  Twin: exact.hadamard_heads. */
void tllm_hadamard_heads(float *x, int32_t n_heads, int32_t head_dim);

/* tllm_attention_kv4 with k and q Hadamard-rotated per head before they are
 * quantized (--kv-rotate, quant/kv.py), the keys by tllm_quantize_i4_clip,
 * the scale divided by head_dim: the same scores in exact arithmetic,
 * spread outliers across the key groups.  head_dim is a power of two.
 * Twin: exact.attention_kv4 after exact.hadamard_heads on q and k, the keys
 * by exact.quantize_rows_i4_clip. */
void tllm_attention_kv4_hadamard(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                                 const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out);

/* One layer's 8:4 cache (--kv-bits 8:4, codegen/quant/kv.py): keys as
 * tllm_kv_layer stores them (int8 [max_seq][n_kv_heads][head_dim], one float32
 * scale per row), values as tllm_kv4_layer stores them (int4, low nibble
 * first, [max_seq][n_kv_heads][head_dim/2] bytes, float32 scales
 * [max_seq][n_kv_heads][head_dim/group]). */
typedef struct {
    int8_t *k;
    uint8_t *v;
    float *k_scale;
    float *v_scale;
    uint16_t group; /* value elements per scale; divides head_dim */
} tllm_kv8v4_layer;

/* Attention over the 8:4 cache: tllm_attention_i8's scores over the int8
 * keys, tllm_attention_kv4's weights and value sums over the int4 values.
 * Twin: exact.attention_k8v4. */
void tllm_attention_k8v4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                         const tllm_kv8v4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out);
/* Context shift of the 8:4 cache: keys as tllm_kv_shift_i8, values moved as
 * they are.  Twin: exact.kv_shift_k8v4. */
void tllm_kv_shift_k8v4(const tllm_attention_shape *shape, const tllm_kv8v4_layer *kv, int32_t to, int32_t delta,
                        int32_t n_rows, const float *cos, const float *sin);

/* a += b */
void tllm_add(float *a, const float *b, int32_t n);

/* gate = silu(gate) * up */
void tllm_silu_mul(float *gate, const float *up, int32_t n);

/* Row-wise softmax in place: m = max, e = expf(x - m), p = e / sum(e). */
void tllm_softmax(float *x, int32_t n);

#endif
