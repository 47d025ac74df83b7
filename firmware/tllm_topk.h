/* The classifier of a `--sampler topk:K` build (codegen/lower/step.py
 * TopKClassifier): the matvec chunk_rows rows at a time into one chunk
 * buffer, each chunk pushed into the running K-entry set (tllm_topk_push,
 * tllm_sampler.h), so the [vocab] logits vector never exists.  Each row's
 * logit is the same float the full matvec writes (rows do not depend on
 * each other), so the set is the top K of the full build's logits: the
 * twin is codegen/sampler.py top_k_ids over the reference's logits.  One
 * loop per weight layout, as the greedy builds' tllm_argmax_* kernels. */
#ifndef TLLM_TOPK_H
#define TLLM_TOPK_H

#include <stdint.h>

#include "tllm_kernels.h"
#include "tllm_kernels_gguf.h"
#include "tllm_kernels_gguf_m7.h"
#include "tllm_kernels_m7.h"
#include "tllm_sampler.h"

static inline void tllm_topk_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, const float *bias,
                                float *chunk, int32_t chunk_rows, tllm_topk *t) {
    const int32_t row_bytes = (m->cols + 1) / 2, n_groups = (m->cols + m->group - 1) / m->group;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4_matrix part = {m->packed + r0 * row_bytes, m->scales + r0 * n_groups, (uint16_t)n, m->cols,
                                     m->group};
        tllm_matvec_q4(&part, xq, xs, bias ? bias + r0 : 0, chunk);
        tllm_topk_push(t, chunk, n, r0);
    }
}

/* chunk_rows a multiple of the 4-row tile (lifetimes.ARGMAX_CHUNK_ROWS). */
static inline void tllm_topk_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *chunk,
                                  int32_t chunk_rows, tllm_topk *t) {
    const int32_t tile_bytes = tllm_q4x4_tile_bytes(m);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {m->stream + (r0 / 4) * tile_bytes, (uint16_t)n, m->cols, m->group};
        tllm_matvec_q4x4(&part, x_stream, bias ? bias + r0 : 0, chunk);
        tllm_topk_push(t, chunk, n, r0);
    }
}

typedef void (*tllm_gguf_matvec_fn)(const tllm_gguf_matrix *, const int8_t *, const float *, const float *, float *);

static inline void tllm_topk_gguf(tllm_gguf_matvec_fn mv, uint32_t block_bytes, const tllm_gguf_matrix *m,
                                  const int8_t *xq, const float *xs, const float *bias, float *chunk,
                                  int32_t chunk_rows, tllm_topk *t) {
    const uint32_t row_bytes = (uint32_t)(m->cols / TLLM_GGUF_BLOCK) * block_bytes;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_gguf_matrix part = {m->blocks + (uint32_t)r0 * row_bytes, (uint16_t)n, m->cols};
        mv(&part, xq, xs, bias ? bias + r0 : 0, chunk);
        tllm_topk_push(t, chunk, n, r0);
    }
}

static inline void tllm_topk_q40(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias,
                                 float *chunk, int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_gguf(tllm_matvec_q40, sizeof(tllm_block_q4_0), m, xq, xs, bias, chunk, chunk_rows, t);
}

static inline void tllm_topk_q41(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias,
                                 float *chunk, int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_gguf(tllm_matvec_q41, sizeof(tllm_block_q4_1), m, xq, xs, bias, chunk, chunk_rows, t);
}

static inline void tllm_topk_q80(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias,
                                 float *chunk, int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_gguf(tllm_matvec_q80, sizeof(tllm_block_q8_0), m, xq, xs, bias, chunk, chunk_rows, t);
}

/* llama.cpp's blocks in 4-row tiles (tllm_kernels_gguf_m7.h): chunk_rows a
 * multiple of the 4-row tile (each chunk is whole tiles but the last). */

static inline void tllm_topk_ggufx4(tllm_ggufx4_matvec_fn mv, int32_t tile_bytes, const tllm_ggufx4_matrix *m,
                                    const uint8_t *x16, const float *bias, float *chunk, int32_t chunk_rows,
                                    tllm_topk *t) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_ggufx4_matrix part = {m->tiles + (r0 / 4) * tile_bytes, (uint16_t)n, m->cols};
        mv(&part, x16, bias ? bias + r0 : 0, chunk);
        tllm_topk_push(t, chunk, n, r0);
    }
}

static inline void tllm_topk_q40x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                                   int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_ggufx4(tllm_matvec_q40x4, tllm_q40x4_tile_bytes(m), m, x16, bias, chunk, chunk_rows, t);
}

static inline void tllm_topk_q41x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                                   int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_ggufx4(tllm_matvec_q41x4, tllm_q41x4_tile_bytes(m), m, x16, bias, chunk, chunk_rows, t);
}

static inline void tllm_topk_q80x4(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,
                                   int32_t chunk_rows, tllm_topk *t) {
    tllm_topk_ggufx4(tllm_matvec_q80x4, tllm_q80x4_tile_bytes(m), m, x16, bias, chunk, chunk_rows, t);
}

#endif
