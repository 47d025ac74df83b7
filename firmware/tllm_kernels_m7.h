/* Cortex-M7 kernel set: the "q4x4" weight layout (quant/formats.py) and an
 * int16 activation stream, with SMLAD inline assembly on the M7 and a
 * portable C twin everywhere else. Results are bit-identical to
 * tllm_kernels.c (and so to codegen/exact.py): only the data layout
 * and the order of exact integer additions differ. */
#ifndef TLLM_KERNELS_M7_H
#define TLLM_KERNELS_M7_H

#include "tllm_numerics.h" /* first: the float rules, see there */
#include "tllm_abi.h"      /* TLLM_MAX_BATCH */

#include <stdint.h>

typedef struct {
    const uint8_t *stream; /* q4x4 tiles: words and scales interleaved */
    uint16_t rows;
    uint16_t cols;
    uint16_t group;
} tllm_q4x4_matrix;

/* Quantizes x exactly as tllm_quantize_i8 and writes the x16 stream: per
 * group the int16 values padded to a multiple of 8, int32 8*sum, float scale. */
void tllm_quantize_x16(const float *x, int32_t n, int32_t group, uint8_t *stream);

/* RMSNorm (as tllm_rmsnorm) fused with tllm_quantize_x16 of its output: the
 * normalized vector is never stored as floats. group <= 128. */
void tllm_rmsnorm_x16(const float *x, const float *w, int32_t n, float eps, int32_t group, uint8_t *stream);

/* SiLU(gate) * up (as tllm_silu_mul) from a fused gate/up matvec whose output
 * holds (gate 2t, gate 2t+1, up 2t, up 2t+1) per tile, quantized into the
 * x16 stream of the next linear. n = hidden size (even). */
void tllm_silu_mul_pairs_x16(const float *gu, int32_t n, int32_t group, uint8_t *stream);

/* out[r] = sum_g ((float)dot_g * w_scale[r][g]) * x_scale[g]  (+ bias[r]).
 * out must have room for rows rounded up to a multiple of 4. */
void tllm_matvec_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *out);

/* Greedy-only builds: the matvec chunk_rows rows (a multiple of 4) at a
 * time into chunk, returning the index of the first maximum. */
int32_t tllm_argmax_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *chunk,
                         int32_t chunk_rows);

/* Weight streaming (tllm_stream.h): bytes of one 4-row tile (a row range of
 * whole tiles is one contiguous byte range), and tllm_argmax_q4x4 over a
 * row range view m of the matrix starting at row0 (chunk_rows a multiple
 * of 4), continuing the first-maximum race in *best / *best_v (row 0
 * starts it): over consecutive ranges it returns tllm_argmax_q4x4's token. */
int32_t tllm_q4x4_tile_bytes(const tllm_q4x4_matrix *m);
void tllm_argmax_q4x4_from(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *chunk,
                           int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v);

/* Embedding row lookup from the q4x4 layout. */
void tllm_embed_q4x4(const tllm_q4x4_matrix *m, int32_t token, float *out);

/* The portable twin, callable on any target (tests compare it with the asm). */
void tllm_matvec_q4x4_c(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *out);

/* --- batched prefill: one weight pass for P tokens ----------------------
 * TLLM_MAX_BATCH tokens at most per call (P = 1..4). A fifth activation
 * vector would need more registers than the 14 the kernel has (4
 * accumulators, 4 activation words, weight word, lane, mask, 2 pointers,
 * group counter are all of them).
 *
 * The x16 batch stream ("x16b", quant/formats.py), for P >= 2, per group:
 * P int32 -8*sum(q_p) (the offset correction, negated: it starts the
 * accumulators), then per block of 8 inputs and per lane pair j = 0..3 the
 * P words (x_p[k+2j], x_p[k+2j+1]) for p = 0..P-1, then P float32 scales.
 * It is exactly as long as P x16 streams. For P = 1 it IS the x16 stream.
 *
 * Prefill with these, per chunk of P prompt tokens: the producers below
 * (tllm_rmsnorm_x16b, tllm_silu_mul_pairs_x16b, tllm_quantize_x16b) write
 * each token's activations into the chunk's x16b stream; every linear,
 * the fused gate/up matrix included, is one tllm_matmat_q4x4 (outputs
 * token-major: token p's vector at out + p * rows, e.g. its gu tiles for
 * tllm_silu_mul_pairs_x16b); RoPE and attention stay per token, in order
 * (store token p's k/v, then attend over positions <= p: causal inside
 * the chunk as in step-by-step decoding). Only the last prompt token needs
 * logits: its final norm as a plain x16 stream, then the classifier
 * (tllm_matvec_q4x4 or tllm_argmax_q4x4) once. */

/* Bytes of an x16 (and of a P = 1 x16b) stream of n inputs. */
int32_t tllm_x16_bytes(int32_t n, int32_t group);

/* Interleaves P x16 streams (stream p at x16 + p * stride bytes, each as
 * tllm_quantize_x16 / tllm_rmsnorm_x16 / tllm_silu_mul_pairs_x16 wrote it)
 * into one x16b stream. Integers only: moves and one negation per group. */
void tllm_x16_batch(const uint8_t *x16, int32_t stride, int32_t P, int32_t n, int32_t group, uint8_t *xb);

/* The producers of the x16 stream, writing token p's places of an x16b
 * stream of P tokens directly (no per-token stream, no interleaving pass):
 * the bytes equal tllm_x16_batch of the per-token streams. P = 1 is
 * tllm_quantize_x16 / tllm_rmsnorm_x16 / tllm_silu_mul_pairs_x16. */
void tllm_quantize_x16b(const float *x, int32_t n, int32_t group, int32_t P, int32_t p, uint8_t *xb);
void tllm_rmsnorm_x16b(const float *x, const float *w, int32_t n, float eps, int32_t group, int32_t P, int32_t p,
                       uint8_t *xb);
void tllm_silu_mul_pairs_x16b(const float *gu, int32_t n, int32_t group, int32_t P, int32_t p, uint8_t *xb);

/* out[p * rows + r] = tllm_matvec_q4x4(m, x16 stream p, bias)[r] bit for
 * bit, for p < P (the contract; tests/host/test_kernel_twins.py and
 * bench/micro.c check it): each weight word is unpacked once for the P
 * tokens, and per token and group the epilogue is the matvec's, the same
 * float operations in the same order. Serves the fused gate/up matrix too
 * (its output per token is the interleaved gu vector of the matvec).
 * out must have room for P * rows + TLLM_TILE_SPILL floats (P = 1 is the matvec, which
 * writes whole 4-row tiles); xb 4-byte aligned, as every x16 stream. The
 * assembly takes P = 2..4 and group sizes 32/64/128, anything else (P > 4
 * too) runs the portable twin. */
void tllm_matmat_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);

/* Its portable twin (reads the x16b layout; the M7 assembly is checked
 * against it in QEMU). */
void tllm_matmat_q4x4_c(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);

#endif
