/* Weight streaming (DWUP): the generated model's side of the
 * stream schedule codegen/lower/stream.py makes.
 *
 * The compiler writes the step's chunk table and two stream buffers into
 * the plan.  The table is run-length: one run per streamed matrix, in
 * execution order, its chunks equal and back to back (chunk i of a run
 * starts at src + i * stride and copies len bytes, the last one last_len),
 * so a real model's thousands of chunks take a few kilobytes of code flash.
 * One transfer is in flight at any time (tllm_board.h's contract):
 *
 *   take():  wait for chunk k (it lands in buf[slot]);
 *            start chunk k+1 (mod n: the step's last chunk starts the next
 *            step's first) into the other buffer, free since the previous
 *            take's caller is done with it;
 *            return buf[slot] holding chunk k.
 *
 * A step without logits (a prompt token before the last) skips the head's
 * chunks (the classifier's, the table's last runs): with skip_head set, the
 * take that would start run `head`'s first chunk starts chunk 0 instead, the
 * next step's first.  So at every step boundary chunk 0 is the one in flight, whichever
 * kind of step comes next, and no transfer is wasted on a skipped head.
 *
 * The embedding tile depends on the token, so it is copied synchronously
 * into the free buffer (fetch_now) after the chunk in flight has landed.
 * Pinned entries are copied once, at the first step, into the planned
 * "stream.pinned" buffer. Host and QEMU copy with memcpy behind the same
 * calls, so every test tier runs this code. */
#ifndef TLLM_STREAM_H
#define TLLM_STREAM_H

#include <stdint.h>
#include <string.h>

#include "tllm_board.h"
#include "tllm_kernels_gguf_m7.h"
#include "tllm_kernels_m7.h"
#include "tllm_sampler.h" /* tllm_topk */
#include "tllm_verify.h"  /* the verification pass's batched classifier */

typedef struct {
    uint32_t src;      /* blob offset of the run's first chunk */
    uint32_t stride;   /* bytes from one chunk's start to the next (whole tiles) */
    uint32_t len;      /* bytes copied per chunk: whole 32-byte lines */
    uint32_t last_len; /* bytes copied for the run's last chunk */
    uint32_t count;    /* chunks in the run (at least 1) */
} tllm_stream_run;

typedef struct {
    uint32_t src;  /* blob offset (a line at or below the entry) */
    uint32_t len;  /* bytes copied */
    uint32_t dst;  /* offset in the pinned buffer */
} tllm_stream_pin;

typedef struct {
    const tllm_stream_run *runs;
    uint32_t n_runs;
    const tllm_stream_pin *pins;
    uint32_t n_pins;
    const uint8_t *base; /* the weights blob (TLLM_WEIGHTS_BASE) */
    uint8_t *buf[2];
    uint8_t *pinned;
    uint32_t run;    /* the chunk in flight (or landed): its run */
    uint32_t chunk;  /* and its index in the run */
    uint32_t slot;   /* the buffer it goes to */
    uint32_t booted;
    uint32_t head;      /* the head's first run; n_runs when the head streams nothing */
    uint32_t skip_head; /* this step computes no logits: wrap to chunk 0 at run `head` */
} tllm_stream;

/* The per-matrix stream loops stay one out-of-line copy each: inlined, gcc
 * copies the chunk loop and the kernel's setup into every call site of an
 * unrolled step (about 1 KB per layer measured, 4-layer qwen2 at dim 96) and
 * the code-flash estimate (plan/codesize.py) could not bound it; one call per
 * matrix against thousands of MACs costs nothing measurable. */
#define TLLM_STREAM_CALL static __attribute__((noinline, unused))

/* Start the copy of chunk (run, chunk) of the table into dst. */
static inline void tllm_stream_start(tllm_stream *s, uint8_t *dst) {
    const tllm_stream_run *r = &s->runs[s->run];
    const uint32_t len = s->chunk + 1u == r->count ? r->last_len : r->len;
    tllm_board_copy_start(dst, s->base + r->src + s->chunk * r->stride, len);
}

#define TLLM_STREAM_PIN_PIECE 65536u /* one copy moves at most 64 KiB (a multiple of 32) */

/* Once, before the first step computes: the pins, then chunk 0 in flight. */
static inline void tllm_stream_boot(tllm_stream *s) {
    if (s->booted) return;
    s->booted = 1;
    for (uint32_t i = 0; i < s->n_pins; i++) {
        const tllm_stream_pin *p = &s->pins[i];
        for (uint32_t o = 0; o < p->len; o += TLLM_STREAM_PIN_PIECE) {
            const uint32_t n = p->len - o < TLLM_STREAM_PIN_PIECE ? p->len - o : TLLM_STREAM_PIN_PIECE;
            tllm_board_copy_start(s->pinned + p->dst + o, s->base + p->src + o, n);
            tllm_board_copy_wait();
        }
    }
    s->run = 0;
    s->chunk = 0;
    s->slot = 0;
    if (s->n_runs) tllm_stream_start(s, s->buf[0]);
}

/* At every step's start, after tllm_stream_boot: whether this step runs the head. */
static inline void tllm_stream_begin_step(tllm_stream *s, int need_logits) { s->skip_head = !need_logits; }

static inline const uint8_t *tllm_stream_take(tllm_stream *s) {
    tllm_board_copy_wait();
    const uint8_t *ready = s->buf[s->slot];
    if (++s->chunk == s->runs[s->run].count) { /* the next run, wrapping at the table's end (or at the head) */
        s->chunk = 0;
        s->run++;
        if (s->run == s->n_runs || (s->skip_head && s->run == s->head)) s->run = 0;
    }
    s->slot ^= 1u;
    tllm_stream_start(s, s->buf[s->slot]);
    return ready;
}

static inline const uint8_t *tllm_stream_fetch_now(tllm_stream *s, const uint8_t *src, uint32_t len) {
    tllm_board_copy_wait(); /* the chunk in flight lands in buf[slot]; buf[slot ^ 1] is free */
    uint8_t *dst = s->buf[s->slot ^ 1u];
    tllm_board_copy_start(dst, src, len);
    tllm_board_copy_wait();
    return dst;
}

/* tllm_matvec_q4x4 over the stream: chunk_rows rows (whole tiles) per chunk,
 * each chunk's rows computed from its buffer into out + r0. */
TLLM_STREAM_CALL void tllm_stream_matvec_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                              const uint8_t *x_stream, const float *bias, float *out) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols, m->group};
        tllm_matvec_q4x4(&part, x_stream, bias ? bias + r0 : 0, out + r0);
    }
}

/* Batched prefill (codegen/lower/prefill.py): tllm_matmat_q4x4 over the stream
 * for P tokens, chunk by chunk. The kernel writes token-major over the rows
 * it is given (token p at p * n), so each chunk's P x n rows land in
 * chunk_out (P * chunk_rows + TLLM_TILE_SPILL floats, planned) and are copied to token p's
 * vector at out + p * m->rows + r0: one float move per output, against
 * m->cols MACs each. */
TLLM_STREAM_CALL void tllm_stream_matmat_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                              const uint8_t *xb, int32_t P, const float *bias, float *chunk_out,
                                              float *out) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols, m->group};
        tllm_matmat_q4x4(&part, xb, P, bias ? bias + r0 : 0, chunk_out);
        for (int32_t p = 0; p < P; p++)
            memcpy(out + p * m->rows + r0, chunk_out + p * n, (size_t)n * sizeof(float));
    }
}

/* tllm_argmax_q4x4 over the stream: one running first maximum. */
static inline int32_t tllm_stream_argmax_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                              const uint8_t *x_stream, const float *bias, float *chunk,
                                              int32_t argmax_rows) {
    int32_t best = 0;
    float best_v = 0.0f;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols, m->group};
        tllm_argmax_q4x4_from(&part, x_stream, bias ? bias + r0 : 0, chunk, argmax_rows, r0, &best, &best_v);
    }
    return best;
}

/* tllm_topk_q4x4 (tllm_topk.h) over the stream: per chunk, topk_rows rows
 * (a multiple of 4) at a time into chunk, each pushed into the set. */
static inline void tllm_stream_topk_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                         const uint8_t *x_stream, const float *bias, float *chunk, int32_t topk_rows,
                                         tllm_topk *t) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const uint8_t *tiles = tllm_stream_take(s);
        const tllm_q4x4_matrix part = {tiles, (uint16_t)n, m->cols, m->group};
        const int32_t tile_bytes = tllm_q4x4_tile_bytes(&part);
        for (int32_t q0 = 0; q0 < n; q0 += topk_rows) {
            const int32_t k = n - q0 < topk_rows ? n - q0 : topk_rows;
            const tllm_q4x4_matrix rows = {tiles + (q0 / 4) * tile_bytes, (uint16_t)k, m->cols, m->group};
            tllm_matvec_q4x4(&rows, x_stream, bias ? bias + r0 + q0 : 0, chunk);
            tllm_topk_push(t, chunk, k, r0 + q0);
        }
    }
}

/* Speculative decoding's verification pass (tllm_verify.h): the classifier
 * batched over the stream, per chunk chunk_rows rows for the P tokens,
 * batch_rows of them at a time into chunk (P x batch_rows floats + spill). */
static inline void tllm_stream_argmax_batch_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                                 const uint8_t *xb, int32_t P, const float *bias, float *chunk,
                                                 int32_t batch_rows, int32_t *best, float *best_v) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols, m->group};
        tllm_argmax_batch_q4x4(&part, xb, P, bias ? bias + r0 : 0, chunk, batch_rows, r0, best, best_v);
    }
}

static inline void tllm_stream_topk_batch_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, int32_t chunk_rows,
                                               const uint8_t *xb, int32_t P, const float *bias, float *chunk,
                                               int32_t batch_rows, float *value, uint16_t *id, int32_t cap,
                                               int32_t *held) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols, m->group};
        tllm_topk_batch_q4x4(&part, xb, P, bias ? bias + r0 : 0, chunk, batch_rows, r0, value, id, cap, held);
    }
}

/* llama.cpp's blocks in 4-row tiles (tllm_kernels_gguf_m7.h) over the
 * stream: the same loops as q4x4's above, the layout's kernel passed in
 * (tllm_matvec_q41x4 ...); a chunk is a view {its tiles, its rows, cols}. */
static inline tllm_ggufx4_matrix tllm_stream_take_ggufx4(tllm_stream *s, const tllm_ggufx4_matrix *m, int32_t r0,
                                                        int32_t chunk_rows) {
    const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
    const tllm_ggufx4_matrix part = {tllm_stream_take(s), (uint16_t)n, m->cols};
    return part;
}

TLLM_STREAM_CALL void tllm_stream_matvec_ggufx4(tllm_stream *s, tllm_ggufx4_matvec_fn mv, const tllm_ggufx4_matrix *m,
                                                int32_t chunk_rows, const uint8_t *x16, const float *bias, float *out) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        mv(&part, x16, bias ? bias + r0 : 0, out + r0);
    }
}

/* Batched prefill: each chunk's P x n rows (token-major) in chunk_out, then
 * copied to token p's vector (tllm_stream_matmat_q4x4's scheme). */
TLLM_STREAM_CALL void tllm_stream_matmat_ggufx4(tllm_stream *s, tllm_ggufx4_matmat_fn mm, const tllm_ggufx4_matrix *m,
                                                int32_t chunk_rows, const uint8_t *xb, int32_t P, const float *bias,
                                                float *chunk_out, float *out) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        mm(&part, xb, P, bias ? bias + r0 : 0, chunk_out);
        for (int32_t p = 0; p < P; p++)
            memcpy(out + p * m->rows + r0, chunk_out + p * part.rows, (size_t)part.rows * sizeof(float));
    }
}

static inline int32_t tllm_stream_argmax_ggufx4(tllm_stream *s, tllm_ggufx4_argmax_from_fn am,
                                                const tllm_ggufx4_matrix *m, int32_t chunk_rows, const uint8_t *x16,
                                                const float *bias, float *chunk, int32_t argmax_rows) {
    int32_t best = 0;
    float best_v = 0.0f;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        am(&part, x16, bias ? bias + r0 : 0, chunk, argmax_rows, r0, &best, &best_v);
    }
    return best;
}

static inline void tllm_stream_topk_ggufx4(tllm_stream *s, tllm_ggufx4_matvec_fn mv, tllm_ggufx4_tile_bytes_fn tb,
                                           const tllm_ggufx4_matrix *m, int32_t chunk_rows, const uint8_t *x16,
                                           const float *bias, float *chunk, int32_t topk_rows, tllm_topk *t) {
    const int32_t tile_bytes = tb(m);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        for (int32_t q0 = 0; q0 < part.rows; q0 += topk_rows) {
            const int32_t k = part.rows - q0 < topk_rows ? part.rows - q0 : topk_rows;
            const tllm_ggufx4_matrix rows = {part.tiles + (q0 / 4) * tile_bytes, (uint16_t)k, m->cols};
            mv(&rows, x16, bias ? bias + r0 + q0 : 0, chunk);
            tllm_topk_push(t, chunk, k, r0 + q0);
        }
    }
}

/* The verification pass's classifier over the stream for the tiled GGUF
 * layouts (tllm_verify.h's ggufx4 loop per chunk, its first row r0). */
static inline void tllm_stream_argmax_batch_ggufx4(tllm_stream *s, tllm_ggufx4_matmat_fn mm,
                                                   tllm_ggufx4_tile_bytes_fn tb, const tllm_ggufx4_matrix *m,
                                                   int32_t chunk_rows, const uint8_t *xb, int32_t P, const float *bias,
                                                   float *chunk, int32_t batch_rows, int32_t *best, float *best_v) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        tllm_argmax_batch_ggufx4(mm, tb, &part, xb, P, bias ? bias + r0 : 0, chunk, batch_rows, r0, best, best_v);
    }
}

static inline void tllm_stream_topk_batch_ggufx4(tllm_stream *s, tllm_ggufx4_matmat_fn mm, tllm_ggufx4_tile_bytes_fn tb,
                                                 const tllm_ggufx4_matrix *m, int32_t chunk_rows, const uint8_t *xb,
                                                 int32_t P, const float *bias, float *chunk, int32_t batch_rows,
                                                 float *value, uint16_t *id, int32_t cap, int32_t *held) {
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const tllm_ggufx4_matrix part = tllm_stream_take_ggufx4(s, m, r0, chunk_rows);
        tllm_topk_batch_ggufx4(mm, tb, &part, xb, P, bias ? bias + r0 : 0, chunk, batch_rows, r0, value, id, cap,
                               held);
    }
}

/* The embedding row from the token's tile, fetched into the free buffer. */
static inline void tllm_stream_embed_ggufx4(tllm_stream *s, tllm_ggufx4_embed_fn embed, tllm_ggufx4_tile_bytes_fn tb,
                                            const tllm_ggufx4_matrix *m, uint32_t copy_bytes, int32_t token,
                                            float *out) {
    const tllm_ggufx4_matrix tile = {tllm_stream_fetch_now(s, m->tiles + (token / 4) * tb(m), copy_bytes), 4,
                                     m->cols};
    embed(&tile, token % 4, out);
}

/* tllm_embed_q4x4 from the token's tile, fetched into the free buffer. */
static inline void tllm_stream_embed_q4x4(tllm_stream *s, const tllm_q4x4_matrix *m, uint32_t copy_bytes,
                                          int32_t token, float *out) {
    const int32_t tile_bytes = tllm_q4x4_tile_bytes(m);
    const tllm_q4x4_matrix tile = {tllm_stream_fetch_now(s, m->stream + (token / 4) * tile_bytes, copy_bytes), 4,
                                   m->cols, m->group};
    tllm_embed_q4x4(&tile, token % 4, out);
}

#endif
