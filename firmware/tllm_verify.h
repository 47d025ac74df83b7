/* The classifier of speculative decoding's verification pass
 * (tllm_model_verify, codegen/lower/speculate.py), batched: the P tokens'
 * final-norm outputs go through the classifier together, each row chunk's
 * weights read once for the P of them (tllm_matmat_*), and every token keeps
 * what the single-token classifier keeps:
 *
 *   tllm_argmax_batch_*  greedy-only builds: token p's first maximum, as
 *                        tllm_argmax_* (best[p], with its value best_v[p]);
 *   tllm_topk_batch_*    top-K builds: token p's K-entry set at value/id +
 *                        p * cap with held[p] entries, as tllm_topk_* (a
 *                        tllm_topk per token, pushed chunk by chunk).
 *
 * Bit-identical per position by construction: the batched kernels give
 * token p exactly the matvec's floats for token p (their contract, checked
 * by the kernel registry), and each token's chunk then goes through the
 * same race or set as in tllm_argmax_* / tllm_topk_*.  chunk holds P x
 * chunk_rows floats (token p's rows at p * n for a chunk of n rows), plus
 * TLLM_TILE_SPILL for the q4x4 tile kernel (the tiled GGUF kernels write
 * exactly their rows).  Twins: the layout's matvec
 * twin per token, then argmax / sampler.top_k_ids
 * (tests/kernel_registry/entries_verify.py). */
#ifndef TLLM_VERIFY_H
#define TLLM_VERIFY_H

#include <stdint.h>

#include "tllm_kernels.h"
#include "tllm_kernels_gguf.h"
#include "tllm_kernels_gguf_m7.h"
#include "tllm_kernels_m7.h"
#include "tllm_math.h"
#include "tllm_sampler.h"

/* Token p's chunk (n rows, the rows row0 .. of the logits) into its race or its set. */
static inline void tllm_verify_argmax_chunks(const float *chunk, int32_t n, int32_t P, int32_t row0, int32_t *best,
                                             float *best_v) {
    for (int32_t p = 0; p < P; p++) argmax_chunk(chunk + p * n, n, row0, &best[p], &best_v[p]);
}

static inline void tllm_verify_topk_chunks(const float *chunk, int32_t n, int32_t P, int32_t row0, float *value,
                                           uint16_t *id, int32_t cap, int32_t *held) {
    for (int32_t p = 0; p < P; p++) {
        tllm_topk t = {value + p * cap, id + p * cap, cap, held[p]};
        tllm_topk_push(&t, chunk + p * n, n, row0);
        held[p] = t.n;
    }
}

/* Each layout's chunk loop below feeds token p's race (race: best, best_v)
 * or its set (value, id, cap, held); race is a constant of the per-layout
 * entry points (what the generated code calls), so each keeps one path. */
static inline void tllm_verify_chunks(const float *chunk, int32_t n, int32_t P, int32_t row0, int race, int32_t *best,
                                      float *best_v, float *value, uint16_t *id, int32_t cap, int32_t *held) {
    if (race) tllm_verify_argmax_chunks(chunk, n, P, row0, best, best_v);
    else tllm_verify_topk_chunks(chunk, n, P, row0, value, id, cap, held);
}

/* ---- q4: packed nibbles, int8 activations (token p's at xq + p * cols) ---- */
static inline void tllm_verify_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                  const float *bias, float *chunk, int32_t chunk_rows, int race, int32_t *best,
                                  float *best_v, float *value, uint16_t *id, int32_t cap, int32_t *held) {
    const int32_t row_bytes = (m->cols + 1) / 2, n_groups = (m->cols + m->group - 1) / m->group;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4_matrix part = {m->packed + r0 * row_bytes, m->scales + r0 * n_groups, (uint16_t)n, m->cols,
                                     m->group};
        tllm_matmat_q4(&part, xq, xs, P, bias ? bias + r0 : 0, chunk);
        tllm_verify_chunks(chunk, n, P, r0, race, best, best_v, value, id, cap, held);
    }
}

static inline void tllm_argmax_batch_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                        const float *bias, float *chunk, int32_t chunk_rows, int32_t *best,
                                        float *best_v) {
    tllm_verify_q4(m, xq, xs, P, bias, chunk, chunk_rows, 1, best, best_v, 0, 0, 0, 0);
}

static inline void tllm_topk_batch_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                      const float *bias, float *chunk, int32_t chunk_rows, float *value,
                                      uint16_t *id, int32_t cap, int32_t *held) {
    tllm_verify_q4(m, xq, xs, P, bias, chunk, chunk_rows, 0, 0, 0, value, id, cap, held);
}

/* ---- q4x4: 4-row tiles against the x16b batch stream (Cortex-M7 SMLAD) ----
 * m may be a row range view whose first row is row0 of the whole matrix
 * (the weight stream's chunks, tllm_stream.h): the race and the sets go on
 * across the calls; row0 == 0 starts them.  chunk_rows a multiple of 4. */
static inline void tllm_verify_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                    float *chunk, int32_t chunk_rows, int32_t row0, int race, int32_t *best,
                                    float *best_v, float *value, uint16_t *id, int32_t cap, int32_t *held) {
    const int32_t tile_bytes = tllm_q4x4_tile_bytes(m);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {m->stream + (r0 / 4) * tile_bytes, (uint16_t)n, m->cols, m->group};
        tllm_matmat_q4x4(&part, xb, P, bias ? bias + r0 : 0, chunk);
        tllm_verify_chunks(chunk, n, P, row0 + r0, race, best, best_v, value, id, cap, held);
    }
}

static inline void tllm_argmax_batch_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P,
                                          const float *bias, float *chunk, int32_t chunk_rows, int32_t row0,
                                          int32_t *best, float *best_v) {
    tllm_verify_q4x4(m, xb, P, bias, chunk, chunk_rows, row0, 1, best, best_v, 0, 0, 0, 0);
}

static inline void tllm_topk_batch_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                        float *chunk, int32_t chunk_rows, int32_t row0, float *value, uint16_t *id,
                                        int32_t cap, int32_t *held) {
    tllm_verify_q4x4(m, xb, P, bias, chunk, chunk_rows, row0, 0, 0, 0, value, id, cap, held);
}

/* ---- llama.cpp's kept blocks (Q4_0 / Q4_1 / Q8_0), int8 activations ----
 * One loop for the three formats, the batched block kernel passed in. */
typedef void (*tllm_gguf_matmat_fn)(const tllm_gguf_matrix *, const int8_t *, const float *, int32_t, const float *,
                                    float *);

static inline void tllm_verify_gguf(tllm_gguf_matmat_fn mm, uint32_t block_bytes, const tllm_gguf_matrix *m,
                                    const int8_t *xq, const float *xs, int32_t P, const float *bias, float *chunk,
                                    int32_t chunk_rows, int race, int32_t *best, float *best_v, float *value,
                                    uint16_t *id, int32_t cap, int32_t *held) {
    const uint32_t row_bytes = (uint32_t)(m->cols / TLLM_GGUF_BLOCK) * block_bytes;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_gguf_matrix part = {m->blocks + (uint32_t)r0 * row_bytes, (uint16_t)n, m->cols};
        mm(&part, xq, xs, P, bias ? bias + r0 : 0, chunk);
        tllm_verify_chunks(chunk, n, P, r0, race, best, best_v, value, id, cap, held);
    }
}

static inline void tllm_argmax_batch_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                         const float *bias, float *chunk, int32_t chunk_rows, int32_t *best,
                                         float *best_v) {
    tllm_verify_gguf(tllm_matmat_q40, sizeof(tllm_block_q4_0), m, xq, xs, P, bias, chunk, chunk_rows, 1, best,
                     best_v, 0, 0, 0, 0);
}

static inline void tllm_argmax_batch_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                         const float *bias, float *chunk, int32_t chunk_rows, int32_t *best,
                                         float *best_v) {
    tllm_verify_gguf(tllm_matmat_q41, sizeof(tllm_block_q4_1), m, xq, xs, P, bias, chunk, chunk_rows, 1, best,
                     best_v, 0, 0, 0, 0);
}

static inline void tllm_argmax_batch_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                         const float *bias, float *chunk, int32_t chunk_rows, int32_t *best,
                                         float *best_v) {
    tllm_verify_gguf(tllm_matmat_q80, sizeof(tllm_block_q8_0), m, xq, xs, P, bias, chunk, chunk_rows, 1, best,
                     best_v, 0, 0, 0, 0);
}

static inline void tllm_topk_batch_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                       const float *bias, float *chunk, int32_t chunk_rows, float *value,
                                       uint16_t *id, int32_t cap, int32_t *held) {
    tllm_verify_gguf(tllm_matmat_q40, sizeof(tllm_block_q4_0), m, xq, xs, P, bias, chunk, chunk_rows, 0, 0, 0,
                     value, id, cap, held);
}

static inline void tllm_topk_batch_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                       const float *bias, float *chunk, int32_t chunk_rows, float *value,
                                       uint16_t *id, int32_t cap, int32_t *held) {
    tllm_verify_gguf(tllm_matmat_q41, sizeof(tllm_block_q4_1), m, xq, xs, P, bias, chunk, chunk_rows, 0, 0, 0,
                     value, id, cap, held);
}

static inline void tllm_topk_batch_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P,
                                       const float *bias, float *chunk, int32_t chunk_rows, float *value,
                                       uint16_t *id, int32_t cap, int32_t *held) {
    tllm_verify_gguf(tllm_matmat_q80, sizeof(tllm_block_q8_0), m, xq, xs, P, bias, chunk, chunk_rows, 0, 0, 0,
                     value, id, cap, held);
}

/* ---- llama.cpp's blocks in 4-row tiles (q40x4 / q41x4 / q80x4, tllm_kernels_gguf_m7.h) ----
 * One loop for the three layouts, the layout's batched kernel and tile size
 * passed in (as tllm_stream.h's ggufx4 loops, which call it per chunk); the
 * per-layout entry points below are what the generated code calls.  m may be
 * a stream chunk's view whose first row is row0 of the whole matrix, as
 * q4x4's above. */
static inline void tllm_verify_ggufx4(tllm_ggufx4_matmat_fn mm, tllm_ggufx4_tile_bytes_fn tb,
                                      const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                      float *chunk, int32_t chunk_rows, int32_t row0, int race, int32_t *best,
                                      float *best_v, float *value, uint16_t *id, int32_t cap, int32_t *held) {
    const int32_t tile_bytes = tb(m);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_ggufx4_matrix part = {m->tiles + (r0 / 4) * tile_bytes, (uint16_t)n, m->cols};
        mm(&part, xb, P, bias ? bias + r0 : 0, chunk);
        tllm_verify_chunks(chunk, n, P, row0 + r0, race, best, best_v, value, id, cap, held);
    }
}

static inline void tllm_argmax_batch_ggufx4(tllm_ggufx4_matmat_fn mm, tllm_ggufx4_tile_bytes_fn tb,
                                            const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P,
                                            const float *bias, float *chunk, int32_t chunk_rows, int32_t row0,
                                            int32_t *best, float *best_v) {
    tllm_verify_ggufx4(mm, tb, m, xb, P, bias, chunk, chunk_rows, row0, 1, best, best_v, 0, 0, 0, 0);
}

static inline void tllm_topk_batch_ggufx4(tllm_ggufx4_matmat_fn mm, tllm_ggufx4_tile_bytes_fn tb,
                                          const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                          float *chunk, int32_t chunk_rows, int32_t row0, float *value, uint16_t *id,
                                          int32_t cap, int32_t *held) {
    tllm_verify_ggufx4(mm, tb, m, xb, P, bias, chunk, chunk_rows, row0, 0, 0, 0, value, id, cap, held);
}

static inline void tllm_argmax_batch_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                           float *chunk, int32_t chunk_rows, int32_t row0, int32_t *best,
                                           float *best_v) {
    tllm_argmax_batch_ggufx4(tllm_matmat_q40x4, tllm_q40x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, best,
                             best_v);
}

static inline void tllm_argmax_batch_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                           float *chunk, int32_t chunk_rows, int32_t row0, int32_t *best,
                                           float *best_v) {
    tllm_argmax_batch_ggufx4(tllm_matmat_q41x4, tllm_q41x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, best,
                             best_v);
}

static inline void tllm_argmax_batch_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                           float *chunk, int32_t chunk_rows, int32_t row0, int32_t *best,
                                           float *best_v) {
    tllm_argmax_batch_ggufx4(tllm_matmat_q80x4, tllm_q80x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, best,
                             best_v);
}

static inline void tllm_topk_batch_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                         float *chunk, int32_t chunk_rows, int32_t row0, float *value, uint16_t *id,
                                         int32_t cap, int32_t *held) {
    tllm_topk_batch_ggufx4(tllm_matmat_q40x4, tllm_q40x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, value, id,
                           cap, held);
}

static inline void tllm_topk_batch_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                         float *chunk, int32_t chunk_rows, int32_t row0, float *value, uint16_t *id,
                                         int32_t cap, int32_t *held) {
    tllm_topk_batch_ggufx4(tllm_matmat_q41x4, tllm_q41x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, value, id,
                           cap, held);
}

static inline void tllm_topk_batch_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,
                                         float *chunk, int32_t chunk_rows, int32_t row0, float *value, uint16_t *id,
                                         int32_t cap, int32_t *held) {
    tllm_topk_batch_ggufx4(tllm_matmat_q80x4, tllm_q80x4_tile_bytes, m, xb, P, bias, chunk, chunk_rows, row0, value, id,
                           cap, held);
}

#endif
