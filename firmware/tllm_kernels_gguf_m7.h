/* llama.cpp's Q4_0 / Q4_1 / Q8_0 blocks in 4-row tiles: the "q40x4",
 * "q41x4" and "q80x4" layouts (codegen/quant/formats.py states them, with
 * the float order every kernel here keeps; pack_gguf_tiled writes them).
 * The file's integers and fp16 scales, only moved: a tile-block holds the
 * 4 rows' blocks b, so one activation load serves 4 rows (as q4x4).
 *
 * Activations are the x16 stream of group 32 (tllm_kernels_m7.h:
 * tllm_quantize_x16, tllm_rmsnorm_x16, tllm_silu_mul_pairs_x16 with group
 * 32 write tllm_quantize_i8's integers and scales), and for P >= 2 tokens
 * its x16b form (tllm_x16_batch, the *_x16b producers).  Every output is
 * the float the kept build's kernel (tllm_kernels_gguf.c) computes for that
 * row, bit for bit: per block, in block order,
 *   Q4_0: t = (d * sx) * (float)(isum - 8 * xsum)
 *   Q4_1: t = (d * sx) * (float)isum;  t = t + (m * sx) * (float)xsum
 *   Q8_0: t = (d * sx) * (float)isum
 *   acc = acc + t;  then out = acc (+ bias).
 * The Cortex-M7 builds run SMLAD/SXTB16 assembly, every other target the
 * portable C (the *_c functions, callable everywhere, are the twins the M7
 * assembly is checked against); twins in numpy: codegen/reference/exact.py
 * matvec_gguf / matmat_gguf on the unpacked fields. */
#ifndef TLLM_KERNELS_GGUF_M7_H
#define TLLM_KERNELS_GGUF_M7_H

#include "tllm_numerics.h" /* first: the float rules, see there */
#include "tllm_abi.h"      /* TLLM_MAX_BATCH */

#include <stdint.h>

#include "tllm_kernels_gguf.h" /* the file's block structs */

#define TLLM_GGUF_TILE 4 /* rows per tile (formats.py GGUF_TILE) */
/* Bytes of one tile-block (4 rows x one 32-input block; formats.py GGUF_TILE_BLOCK_BYTES) */
#define TLLM_Q40X4_TILE_BLOCK 72
#define TLLM_Q41X4_TILE_BLOCK 80
#define TLLM_Q80X4_TILE_BLOCK 136
_Static_assert(TLLM_Q40X4_TILE_BLOCK == TLLM_GGUF_TILE * sizeof(tllm_block_q4_0), "q40x4 tile-block: 4 Q4_0 blocks");
_Static_assert(TLLM_Q41X4_TILE_BLOCK == TLLM_GGUF_TILE * sizeof(tllm_block_q4_1), "q41x4 tile-block: 4 Q4_1 blocks");
_Static_assert(TLLM_Q80X4_TILE_BLOCK == TLLM_GGUF_TILE * sizeof(tllm_block_q8_0), "q80x4 tile-block: 4 Q8_0 blocks");

/* rows x cols (cols a multiple of 32, rows >= 1) in one tiled layout; the
 * function called says which.  tiles: 4-byte aligned; for a row range of a
 * larger matrix (a stream chunk), its first tile and its row count. */
typedef struct {
    const uint8_t *tiles;
    uint16_t rows;
    uint16_t cols;
} tllm_ggufx4_matrix;

/* One layout's kernels as values: the weight stream (tllm_stream.h) and the
 * top-K loop (tllm_topk.h) take the layout's kernel instead of one copy of
 * their loop per layout. */
typedef void (*tllm_ggufx4_matvec_fn)(const tllm_ggufx4_matrix *, const uint8_t *, const float *, float *);
typedef void (*tllm_ggufx4_matmat_fn)(const tllm_ggufx4_matrix *, const uint8_t *, int32_t, const float *, float *);
typedef void (*tllm_ggufx4_argmax_from_fn)(const tllm_ggufx4_matrix *, const uint8_t *, const float *, float *,
                                           int32_t, int32_t, int32_t *, float *);
typedef int32_t (*tllm_ggufx4_tile_bytes_fn)(const tllm_ggufx4_matrix *);
typedef void (*tllm_ggufx4_embed_fn)(const tllm_ggufx4_matrix *, int32_t, float *);

/* Bytes of one 4-row tile: cols / 32 tile-blocks (a row range starting at a
 * multiple of 4 starts at (row0 / 4) times this). */
int32_t tllm_q40x4_tile_bytes(const tllm_ggufx4_matrix *m);
int32_t tllm_q41x4_tile_bytes(const tllm_ggufx4_matrix *m);
int32_t tllm_q80x4_tile_bytes(const tllm_ggufx4_matrix *m);

/* out[r] = row r . x (+ bias[r]) for r < m->rows, from the x16 stream
 * (group 32, 4-byte aligned); out holds m->rows floats. */
void tllm_matvec_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);
void tllm_matvec_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);
void tllm_matvec_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);
void tllm_matvec_q40x4_c(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);
void tllm_matvec_q41x4_c(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);
void tllm_matvec_q80x4_c(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out);

/* Batched prefill: P tokens through one matrix, each tile read once.  xb is
 * the P tokens' x16b stream (group 32; for P = 1 the x16 stream), 4-byte
 * aligned; out[p * rows + r] equals tllm_matvec_*(m, token p's x16, bias)[r]
 * bit for bit (out holds P * rows floats).  The assembly takes P = 1..4
 * (TLLM_MAX_BATCH); a larger P runs the portable twin.  On the M7,
 * tllm_matmat_q41x4 at P = 2..4 rewrites xb's block heads for the duration
 * of the call (their -8 * xsum as float32 -xsum) and puts the same bytes
 * back before it returns: xb must be in RAM, as every activation buffer is. */
void tllm_matmat_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);
void tllm_matmat_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);
void tllm_matmat_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);
void tllm_matmat_q40x4_c(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);
void tllm_matmat_q41x4_c(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);
void tllm_matmat_q80x4_c(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out);

/* Greedy-only builds: the matvec chunk_rows rows (a multiple of 4) at a time
 * into chunk, returning the index of the first maximum (as tllm_argmax). */
int32_t tllm_argmax_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                          int32_t chunk_rows);
int32_t tllm_argmax_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                          int32_t chunk_rows);
int32_t tllm_argmax_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                          int32_t chunk_rows);

/* Weight streaming: the same over a row range view m of the matrix that
 * starts at row0 (a multiple of 4), continuing the first-maximum race in
 * *best / *best_v (row 0 starts it): over consecutive ranges it returns
 * tllm_argmax_*'s token. */
void tllm_argmax_q40x4_from(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                            int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v);
void tllm_argmax_q41x4_from(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                            int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v);
void tllm_argmax_q80x4_from(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                            int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v);

/* Embedding: out = row `token` dequantized, ggml's dequantize_row_*
 * arithmetic (as tllm_embed_q40/q41/q80).  m may be a one-tile view (the
 * streamed table's tile of the token, rows 4) with token % 4. */
void tllm_embed_q40x4(const tllm_ggufx4_matrix *m, int32_t token, float *out);
void tllm_embed_q41x4(const tllm_ggufx4_matrix *m, int32_t token, float *out);
void tllm_embed_q80x4(const tllm_ggufx4_matrix *m, int32_t token, float *out);

#endif
