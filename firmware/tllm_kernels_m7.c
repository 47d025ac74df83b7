/* Cortex-M7 kernels: see tllm_kernels_m7.h for the contract and
 * codegen/quant/formats.py for the q4x4 layout.
 *
 * The INT4 x INT8 matvec does, per 8 inputs and row, one LDR, four AND and
 * four SMLAD: AND with 0x000F000F (optionally after a shift by 4/8/12 in
 * the same instruction) leaves two offset-binary nibbles as int16 lanes,
 * and SMLAD multiplies them with an (x[k], x[k+1]) pair and accumulates.
 * Four rows share every activation load. The group epilogue removes the
 * +8 offset (8*sum(x), precomputed once per vector) and does the float
 * part in the reference's order; VMLA.F32 is the ARMv7-M chained (not
 * fused) multiply-accumulate, i.e. exactly round(acc + round(a*b)). */
#include "tllm_kernels_m7.h"
#include "tllm_m7_asm.h"
#include "tllm_math.h"

#include <math.h>
#include <string.h>

#define TILE 4
#define TLLM_MAX_GROUP 128
#define BLOCK 8



static inline int32_t n_blocks(int32_t len) { return (len + BLOCK - 1) / BLOCK; }

/* One group of the x16 stream: int16 values padded to a multiple of 8, then
 * int32 8*sum and the float scale. Returns the position after it. */
static inline __attribute__((always_inline)) uint8_t *quantize_group_x16(const float *xg, int32_t len,
                                                                          uint8_t *stream) {
    const int32_t padded = n_blocks(len) * BLOCK;
    int16_t *q = (int16_t *)stream;
    float amax = 0.0f;
    for (int32_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(xg[i])); /* VMAXNM on the M7 */
    int32_t sum = 0;
    float scale = 0.0f;
    if (amax >= TLLM_AMAX_MIN) {
        scale = amax / 127.0f;
        const float inv = 127.0f / amax;
        /* |x * inv| <= 127 * (1 + 2^-23)^2 < 127.5: the rounding never leaves [-127, 127] */
        for (int32_t i = 0; i < len; i++) {
            const int32_t v = round_half_away(xg[i] * inv);
            q[i] = (int16_t)v;
            sum += v;
        }
    } else {
        for (int32_t i = 0; i < len; i++) q[i] = 0;
    }
    for (int32_t i = len; i < padded; i++) q[i] = 0;
    stream += 2 * padded;
    const int32_t sum8 = 8 * sum;
    memcpy(stream, &sum8, 4);
    memcpy(stream + 4, &scale, 4);
    return stream + 8;
}

void tllm_quantize_x16(const float *x, int32_t n, int32_t group, uint8_t *stream) {
    for (int32_t g0 = 0; g0 < n; g0 += group)
        stream = quantize_group_x16(x + g0, g0 + group < n ? group : n - g0, stream);
}

void tllm_rmsnorm_x16(const float *x, const float *w, int32_t n, float eps, int32_t group, uint8_t *stream) {
    float y[TLLM_MAX_GROUP]; /* one group of the normalized vector at a time */
    const float r = rms_inverse(x, n, eps);
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int32_t len = g0 + group < n ? group : n - g0;
        for (int32_t i = 0; i < len; i++) y[i] = (x[g0 + i] * r) * w[g0 + i];
        stream = quantize_group_x16(y, len, stream);
    }
}

void tllm_silu_mul_pairs_x16(const float *gu, int32_t n, int32_t group, uint8_t *stream) {
    float y[TLLM_MAX_GROUP];
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int32_t len = g0 + group < n ? group : n - g0;
        const float *tile = gu + 2 * g0; /* tiles: gate 2t, gate 2t+1, up 2t, up 2t+1 (g0 and len are even) */
        for (int32_t i = 0; i < len; i += 2, tile += 4) {
            const float ga = tile[0], gb = tile[1];
            y[i] = (ga / (1.0f + exp_poly(-ga))) * tile[2]; /* as tllm_silu_mul */
            y[i + 1] = (gb / (1.0f + exp_poly(-gb))) * tile[3];
        }
        stream = quantize_group_x16(y, len, stream);
    }
}

/* --- portable twin ------------------------------------------------------ */
static inline int32_t smlad_c(uint32_t a, uint32_t b, int32_t acc) {
    return acc + (int32_t)(int16_t)(a & 0xFFFF) * (int32_t)(int16_t)(b & 0xFFFF) +
           (int32_t)(int16_t)(a >> 16) * (int32_t)(int16_t)(b >> 16);
}

void tllm_matvec_q4x4_c(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *out) {
    const int32_t tiles = (m->rows + TILE - 1) / TILE;
    const uint8_t *w = m->stream;
    for (int32_t t = 0; t < tiles; t++) {
        float f[TILE] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint8_t *xa = x_stream;
        for (int32_t g0 = 0; g0 < m->cols; g0 += m->group) {
            const int32_t len = g0 + m->group < m->cols ? m->group : m->cols - g0;
            int32_t acc[TILE] = {0, 0, 0, 0};
            for (int32_t b = 0; b < n_blocks(len); b++) {
                uint32_t x[4], wd[TILE];
                memcpy(x, xa, 16);
                memcpy(wd, w, 16);
                xa += 16;
                w += 16;
                for (int32_t s = 0; s < TILE; s++)
                    for (int32_t j = 0; j < 4; j++) acc[s] = smlad_c((wd[s] >> (4 * j)) & 0x000F000Fu, x[j], acc[s]);
            }
            int32_t sum8;
            float xs, ws[TILE];
            memcpy(&sum8, xa, 4);
            memcpy(&xs, xa + 4, 4);
            memcpy(ws, w, 16);
            xa += 8;
            w += 16;
            for (int32_t s = 0; s < TILE; s++) f[s] = f[s] + ((float)(acc[s] - sum8) * ws[s]) * xs;
        }
        for (int32_t s = 0; s < TILE; s++) out[t * TILE + s] = f[s];
    }
    if (bias)
        for (int32_t r = 0; r < m->rows; r++) out[r] = out[r] + bias[r];
}

/* Bytes of one 4-row tile: per group its 16-byte blocks and 4 scales. */
static int32_t tile_bytes_of(const tllm_q4x4_matrix *m) {
    int32_t bytes = 0;
    for (int32_t g0 = 0; g0 < m->cols; g0 += m->group) {
        const int32_t len = g0 + m->group < m->cols ? m->group : m->cols - g0;
        bytes += n_blocks(len) * 16 + 16;
    }
    return bytes;
}

void tllm_embed_q4x4(const tllm_q4x4_matrix *m, int32_t token, float *out) {
    const int32_t tile = token / TILE, slot = token % TILE;
    const uint8_t *w = m->stream + tile * tile_bytes_of(m);
    for (int32_t g0 = 0; g0 < m->cols; g0 += m->group) {
        const int32_t len = g0 + m->group < m->cols ? m->group : m->cols - g0;
        const int32_t nb = n_blocks(len);
        float s;
        memcpy(&s, w + nb * 16 + 4 * slot, 4);
        for (int32_t i = 0; i < len; i++) {
            uint32_t word;
            memcpy(&word, w + (i / BLOCK) * 16 + 4 * slot, 4);
            const int32_t k = i % BLOCK; /* input k+... sits at bit 4*(k/2) + 16*(k%2) */
            const int32_t u = (int32_t)((word >> (4 * (k / 2) + 16 * (k % 2))) & 0xF);
            out[g0 + i] = (float)(u - 8) * s;
        }
        w += nb * 16 + 16;
    }
}

/* Greedy-only builds: tllm_matvec_q4x4 over chunk_rows rows (a multiple of
 * the 4-row tile) at a time, keeping the first maximum as tllm_argmax does. */
int32_t tllm_argmax_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *chunk,
                         int32_t chunk_rows) {
    const int32_t tile_bytes = tile_bytes_of(m);
    int32_t best = 0;
    float best_v = 0.0f;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {m->stream + (r0 / TILE) * tile_bytes, (uint16_t)n, m->cols, m->group};
        tllm_matvec_q4x4(&part, x_stream, bias ? bias + r0 : 0, chunk);
        argmax_chunk(chunk, n, r0, &best, &best_v);
    }
    return best;
}

int32_t tllm_q4x4_tile_bytes(const tllm_q4x4_matrix *m) { return tile_bytes_of(m); }

/* Weight streaming: tllm_argmax_q4x4 over rows row0.. of the whole matrix
 * (m is the row range's view), continuing the race in *best / *best_v. */
void tllm_argmax_q4x4_from(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *chunk,
                           int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v) {
    const int32_t tile_bytes = tile_bytes_of(m);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4x4_matrix part = {m->stream + (r0 / TILE) * tile_bytes, (uint16_t)n, m->cols, m->group};
        tllm_matvec_q4x4(&part, x_stream, bias ? bias + r0 : 0, chunk);
        argmax_chunk(chunk, n, row0 + r0, best, best_v);
    }
}

/* --- batched prefill (see tllm_kernels_m7.h) ------------------------------ */
int32_t tllm_x16_bytes(int32_t n, int32_t group) {
    int32_t bytes = 0;
    for (int32_t g0 = 0; g0 < n; g0 += group) bytes += n_blocks(g0 + group < n ? group : n - g0) * 2 * BLOCK + 8;
    return bytes;
}

void tllm_x16_batch(const uint8_t *x16, int32_t stride, int32_t P, int32_t n, int32_t group, uint8_t *xb) {
    if (P == 1) {
        memcpy(xb, x16, (size_t)tllm_x16_bytes(n, group));
        return;
    }
    int32_t off = 0; /* of this group in every x16 stream */
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int32_t nb = n_blocks(g0 + group < n ? group : n - g0);
        uint8_t *head = xb, *words = xb + 4 * P, *tail = words + nb * 16 * P;
        for (int32_t p = 0; p < P; p++) {
            const uint8_t *g = x16 + p * stride + off;
            int32_t sum8;
            memcpy(&sum8, g + nb * 16, 4);
            sum8 = -sum8; /* |8 * sum| <= 8 * 127 * 128: no overflow */
            memcpy(head + 4 * p, &sum8, 4);
            memcpy(tail + 4 * p, g + nb * 16 + 4, 4);
            for (int32_t b = 0; b < nb; b++)
                for (int32_t j = 0; j < 4; j++) memcpy(words + ((b * 4 + j) * P + p) * 4, g + b * 16 + 4 * j, 4);
        }
        xb = tail + 4 * P;
        off += nb * 16 + 8;
    }
}

/* quantize_group_x16 for token p of P >= 2, written straight into its
 * places in one group of the x16b stream g (the same values: the same
 * scale, rounding and sum). Returns the position after the group. */
static inline __attribute__((always_inline)) uint8_t *quantize_group_x16b(const float *xg, int32_t len, int32_t P,
                                                                           int32_t p, uint8_t *g) {
    const int32_t nb = n_blocks(len);
    /* inputs i, i+1 are lane pair i/2 of the group: word (i/2)*P + p, so consecutive pairs are P words apart */
    uint8_t *word = g + 4 * P + 4 * p;
    const int32_t step = 4 * P;
    float amax = 0.0f;
    for (int32_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(xg[i]));
    int32_t sum = 0, i = 0;
    float scale = 0.0f;
    if (amax >= TLLM_AMAX_MIN) {
        scale = amax / 127.0f;
        const float inv = 127.0f / amax;
        for (; i + 1 < len; i += 2, word += step) {
            const int32_t v0 = round_half_away(xg[i] * inv), v1 = round_half_away(xg[i + 1] * inv);
            const uint32_t pair = (uint32_t)(uint16_t)v0 | (uint32_t)(uint16_t)v1 << 16;
            memcpy(word, &pair, 4);
            sum += v0 + v1;
        }
        if (i < len) { /* odd length: the last input and a zero */
            const int32_t v0 = round_half_away(xg[i] * inv);
            const uint32_t pair = (uint32_t)(uint16_t)v0;
            memcpy(word, &pair, 4);
            sum += v0;
            i += 2;
            word += step;
        }
    }
    for (; i < nb * BLOCK; i += 2, word += step) memset(word, 0, 4);
    const int32_t neg8 = -8 * sum;
    memcpy(g + 4 * p, &neg8, 4);
    memcpy(g + 4 * P + 16 * nb * P + 4 * p, &scale, 4);
    return g + 4 * P + 16 * nb * P + 4 * P;
}

void tllm_quantize_x16b(const float *x, int32_t n, int32_t group, int32_t P, int32_t p, uint8_t *xb) {
    if (P == 1) {
        tllm_quantize_x16(x, n, group, xb);
        return;
    }
    for (int32_t g0 = 0; g0 < n; g0 += group)
        xb = quantize_group_x16b(x + g0, g0 + group < n ? group : n - g0, P, p, xb);
}

void tllm_rmsnorm_x16b(const float *x, const float *w, int32_t n, float eps, int32_t group, int32_t P, int32_t p,
                       uint8_t *xb) {
    if (P == 1) {
        tllm_rmsnorm_x16(x, w, n, eps, group, xb);
        return;
    }
    float y[TLLM_MAX_GROUP];
    const float r = rms_inverse(x, n, eps);
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int32_t len = g0 + group < n ? group : n - g0;
        for (int32_t i = 0; i < len; i++) y[i] = (x[g0 + i] * r) * w[g0 + i];
        xb = quantize_group_x16b(y, len, P, p, xb);
    }
}

void tllm_silu_mul_pairs_x16b(const float *gu, int32_t n, int32_t group, int32_t P, int32_t p, uint8_t *xb) {
    if (P == 1) {
        tllm_silu_mul_pairs_x16(gu, n, group, xb);
        return;
    }
    float y[TLLM_MAX_GROUP];
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int32_t len = g0 + group < n ? group : n - g0;
        const float *tile = gu + 2 * g0;
        for (int32_t i = 0; i < len; i += 2, tile += 4) {
            const float ga = tile[0], gb = tile[1];
            y[i] = (ga / (1.0f + exp_poly(-ga))) * tile[2];
            y[i + 1] = (gb / (1.0f + exp_poly(-gb))) * tile[3];
        }
        xb = quantize_group_x16b(y, len, P, p, xb);
    }
}

/* Row by row (each weight word once for the P tokens), per group: the
 * accumulators start at -8*sum, so acc is the matvec's acc - sum8 exactly.
 * Any P >= 2 (TLLM_MAX_BATCH tokens at a time). */
void tllm_matmat_q4x4_c(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out) {
    if (P == 1) {
        tllm_matvec_q4x4_c(m, xb, bias, out);
        return;
    }
    const int32_t tile_bytes = tile_bytes_of(m), rows = m->rows;
    for (int32_t r = 0; r < rows; r++)
        for (int32_t p0 = 0; p0 < P; p0 += TLLM_MAX_BATCH) {
            const int32_t np = P - p0 < TLLM_MAX_BATCH ? P - p0 : TLLM_MAX_BATCH;
            const uint8_t *w = m->stream + (r / TILE) * tile_bytes + 4 * (r % TILE);
            const uint8_t *xa = xb;
            float f[TLLM_MAX_BATCH] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int32_t g0 = 0; g0 < m->cols; g0 += m->group) {
                const int32_t nb = n_blocks(g0 + m->group < m->cols ? m->group : m->cols - g0);
                int32_t acc[TLLM_MAX_BATCH];
                memcpy(acc, xa + 4 * p0, 4 * (size_t)np);
                xa += 4 * P;
                for (int32_t b = 0; b < nb; b++) {
                    uint32_t wd;
                    memcpy(&wd, w + 16 * b, 4);
                    for (int32_t j = 0; j < 4; j++, xa += 4 * P)
                        for (int32_t p = 0; p < np; p++) {
                            uint32_t xw;
                            memcpy(&xw, xa + 4 * (p0 + p), 4);
                            acc[p] = smlad_c((wd >> (4 * j)) & 0x000F000Fu, xw, acc[p]);
                        }
                }
                float ws;
                memcpy(&ws, w + 16 * nb, 4);
                w += 16 * nb + 16;
                for (int32_t p = 0; p < np; p++) {
                    float xs;
                    memcpy(&xs, xa + 4 * (p0 + p), 4);
                    f[p] = f[p] + ((float)acc[p] * ws) * xs;
                }
                xa += 4 * P;
            }
            for (int32_t p = 0; p < np; p++) out[(p0 + p) * rows + r] = f[p];
        }
    if (bias)
        for (int32_t p = 0; p < P; p++)
            for (int32_t r = 0; r < rows; r++) out[p * rows + r] = out[p * rows + r] + bias[r];
}

#if defined(__ARM_ARCH_7EM__) && defined(__ARM_FEATURE_DSP) && defined(__ARM_FP)
/* --- Cortex-M7 ----------------------------------------------------------
 * tllm_mv_q4x4_bNN(w, x, out, dims): NN = blocks per full group (4, 8, 16
 * for group sizes 32, 64, 128), fully unrolled; dims = {tiles, full
 * groups, blocks of the short last group (0: none)}.
 * Registers in the hot loop: r0-r3 activation pairs, r4-r7 row
 * accumulators, r8 weight word, r9 lanes, r10 mask, r11 weights, r12
 * activations, lr group counter. */
__asm__(
    TLLM_M7_ASM_MACROS
    "    .macro TLLM_ROW acc, first\n"
    "    ldr r8, [r11], #4\n"
    "    TLLM_NIB_ROW \\acc, r8, \\first\n"
    "    .endm\n"
    "    .macro TLLM_BLOCK first\n"
    "    ldm r12!, {r0-r3}\n"
    "    TLLM_ROW r4, \\first\n"
    "    TLLM_ROW r5, \\first\n"
    "    TLLM_ROW r6, \\first\n"
    "    TLLM_ROW r7, \\first\n"
    "    .endm\n"
    /* remove the +8 offset, then f += ((float)acc * ws) * xs for 4 rows */
    "    .macro TLLM_GROUP_END\n"
    "    ldrd r1, r2, [r12], #8\n"
    "    subs r4, r4, r1\n"
    "    subs r5, r5, r1\n"
    "    subs r6, r6, r1\n"
    "    subs r7, r7, r1\n"
    "    TLLM_SUMS_TO_S 4\n"
    "    TLLM_CVT_SUMS 4\n"
    "    vldm r11!, {s8-s11}\n"
    "    vmul.f32 s4, s4, s8\n"
    "    vmul.f32 s5, s5, s9\n"
    "    vmul.f32 s6, s6, s10\n"
    "    vmul.f32 s7, s7, s11\n"
    "    vmov s12, r2\n"
    "    vmla.f32 s0, s4, s12\n"
    "    vmla.f32 s1, s5, s12\n"
    "    vmla.f32 s2, s6, s12\n"
    "    vmla.f32 s3, s7, s12\n"
    "    .endm\n"
    "    .macro TLLM_MATVEC name, nb\n"
    "    TLLM_FUNC \\name, .text\n"
    "    push {r4-r11, lr}\n"
    "    sub sp, sp, #24\n"
    "    str r1, [sp, #0]\n"        /* activation stream */
    "    str r2, [sp, #4]\n"        /* out */
    "    ldm r3, {r4-r6}\n"
    "    str r4, [sp, #8]\n"        /* tiles left */
    "    str r5, [sp, #12]\n"       /* full groups */
    "    str r6, [sp, #16]\n"       /* blocks in the short last group */
    "    mov r11, r0\n"
    "    TLLM_MASK\n"
    "1:  TLLM_ROW_START\n"
    "    ldr lr, [sp, #12]\n"
    "    cmp lr, #0\n"
    "    beq 3f\n"
    "2:  TLLM_BLOCK 1\n"
    "    .rept \\nb - 1\n"
    "    TLLM_BLOCK 0\n"
    "    .endr\n"
    "    TLLM_GROUP_END\n"
    "    subs lr, lr, #1\n"
    "    bne 2b\n"
    "3:  ldr lr, [sp, #16]\n"
    "    cmp lr, #0\n"
    "    beq 5f\n"
    "    movs r4, #0\n"
    "    movs r5, #0\n"
    "    movs r6, #0\n"
    "    movs r7, #0\n"
    "4:  TLLM_BLOCK 0\n"
    "    subs lr, lr, #1\n"
    "    bne 4b\n"
    "    TLLM_GROUP_END\n"
    "5:  TLLM_MV_NEXT_TILE\n"
    "    TLLM_RETURN 24, 0\n"
    "    .size \\name, . - \\name\n"
    "    .endm\n"
    "    TLLM_MATVEC tllm_mv_q4x4_b4, 4\n"
    "    TLLM_MATVEC tllm_mv_q4x4_b8, 8\n"
    "    TLLM_MATVEC tllm_mv_q4x4_b16, 16\n");

void tllm_mv_q4x4_b4(const uint8_t *w, const uint8_t *x, float *out, const uint32_t *dims);
void tllm_mv_q4x4_b8(const uint8_t *w, const uint8_t *x, float *out, const uint32_t *dims);
void tllm_mv_q4x4_b16(const uint8_t *w, const uint8_t *x, float *out, const uint32_t *dims);

void tllm_matvec_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *out) {
    const uint32_t full = m->cols / m->group, rest = m->cols % m->group;
    const uint32_t dims[3] = {(uint32_t)(m->rows + TILE - 1) / TILE, full, (uint32_t)n_blocks((int32_t)rest)};
    switch (m->group) {
    case 32: tllm_mv_q4x4_b4(m->stream, x_stream, out, dims); break;
    case 64: tllm_mv_q4x4_b8(m->stream, x_stream, out, dims); break;
    case 128: tllm_mv_q4x4_b16(m->stream, x_stream, out, dims); break;
    default: tllm_matvec_q4x4_c(m, x_stream, bias, out); return;
    }
    if (bias)
        for (int32_t r = 0; r < m->rows; r++) out[r] = out[r] + bias[r];
}
/* --- Cortex-M7 batched prefill ---------------------------------------------
 * tllm_mm_q4x4_bNN_pP(w, xb, out, dims), NN = blocks per full group, dims =
 * {rows, full groups, blocks of the short last group, x16b bytes of the
 * full groups}. P = 3, 4: one row at a time (4 accumulators per row; two
 * rows of four tokens would need 18 registers). Per 8 inputs and row: one
 * LDR of the weight word, per lane pair j one AND (the lane, shared by the
 * P tokens' SMLADs), and the activation words rotate through 5 (P = 4) or
 * 6 (P = 3) registers, one LDM each: 1 + 4 + 4P + 4P/K instructions for 8P
 * MACs. P = 2: two rows of a tile at a time (LDRD of both weight words, two
 * AND per lane pair, one LDM of two lane pairs' words for both rows).
 * Registers (P = 3, 4): r0-r3 (+ r7 for P = 3) and lr activation words,
 * r4.. accumulators (token p in r4+p), r8 weight word, r9 lane, r10 mask,
 * r11 weights (pre-indexed: it points at the word last loaded), r12 x16b
 * stream; s0-s3 the float sums. Rows go in slot-major order (every tile's
 * row 0, then row 1, ...), so after a row r11 already points at the next
 * tile's same row. Stack: [0] x16b start, [4] out (this row, token 0), [8]
 * rows left from this one, [12] full groups, [16] last-group blocks, [20] 4
 * * rows, [24] slot, [28] rows, [32] weights, [36] out, [40] end of the
 * full groups in the x16b stream (the full-group loop's end). */
__asm__(
    "    .syntax unified\n"
    /* P = 3, 4: one row. The short last group's block (8 inputs): the row's
     * word (pre-indexed by off), per lane pair one LDM of the P tokens' words */
    "    .macro TLLM_MM1_BLOCK P, off\n"
    "    ldr r8, [r11, #\\off]!\n"
    "    .irp j, 0, 1, 2, 3\n"
    "    TLLM_NIB_LANE \\j, r8\n"
    "    TLLM_ROT_LDM \\P, 0\n"
    "    smlad r4, r9, r0, r4\n"
    "    smlad r5, r9, r1, r5\n"
    "    smlad r6, r9, r2, r6\n"
    "    .if \\P >= 4\n"
    "    smlad r7, r9, r3, r7\n"
    "    .endif\n"
    "    .endr\n"
    "    .endm\n"
    /* per token, as the matvec: f += ((float)acc * ws) * xs */
    "    .macro TLLM_MM1_END P\n"
    "    TLLM_SUMS_TO_S \\P\n"
    "    TLLM_CVT_SUMS \\P\n"
    "    vldr s12, [r11, #16]\n"
    "    vmul.f32 s4, s4, s12\n"
    "    vmul.f32 s5, s5, s12\n"
    "    vmul.f32 s6, s6, s12\n"
    "    .if \\P >= 4\n"
    "    vmul.f32 s7, s7, s12\n"
    "    .endif\n"
    "    TLLM_LDM_SX \\P\n"
    "    vmla.f32 s0, s4, s8\n"
    "    vmla.f32 s1, s5, s9\n"
    "    vmla.f32 s2, s6, s10\n"
    "    .if \\P >= 4\n"
    "    vmla.f32 s3, s7, s11\n"
    "    .endif\n"
    "    .endm\n"
    /* A full group with the activation words rotating through K = 9 - P
     * registers (TLLM_ROT_WORD): one LDM per K words instead of one per P.
     * Word n of a group is lane pair n / P of token n % P. */
    "    .macro TLLM_MM1_GROUP nb, P\n"
    "    .set tllm_n, 0\n"
    "    .rept 4 * \\P * \\nb\n"
    "    .if (tllm_n % (4 * \\P)) == 0\n"
    "    .if tllm_n == 0\n"
    "    ldr r8, [r11, #32]!\n"
    "    .else\n"
    "    ldr r8, [r11, #16]!\n"
    "    .endif\n"
    "    .endif\n"
    "    .if (tllm_n % \\P) == 0\n"
    "    TLLM_NIB_LANE ((tllm_n / \\P) % 4), r8\n"
    "    .endif\n"
    "    TLLM_ROT_WORD tllm_n, (4 * \\P * \\nb), \\P, (9 - \\P), r9, 0\n"
    "    .set tllm_n, tllm_n + 1\n"
    "    .endr\n"
    "    .endm\n"
    /* P = 2: two rows of a tile at a time (rows 2h, 2h + 1), so that each
     * activation LDM serves two rows (see TLLM_PAIR_QUARTER); r2/r3 the two
     * weight words, s0 s1 / s2 s3 the rows' float sums (tokens 0, 1). The
     * short last group's block: per lane pair j one LDM, two AND, four SMLAD. */
    "    .macro TLLM_MM2_BLOCK P, off\n"
    "    ldrd r2, r3, [r11, #\\off]!\n"
    "    .irp j, 0, 1, 2, 3\n"
    "    TLLM_NIB_LANE \\j, r2\n"
    "    ldm r12!, {r0, r1}\n"
    "    smlad r4, r9, r0, r4\n"
    "    smlad r5, r9, r1, r5\n"
    "    TLLM_NIB_LANE \\j, r3\n"
    "    smlad r6, r9, r0, r6\n"
    "    smlad r7, r9, r1, r7\n"
    "    .endr\n"
    "    .endm\n"
    "    .macro TLLM_MM2_END P\n"
    "    TLLM_SUMS_TO_S 4\n"
    "    TLLM_CVT_SUMS 4\n"
    "    vldr s12, [r11, #16]\n"
    "    vldr s13, [r11, #20]\n"
    "    vmul.f32 s4, s4, s12\n"
    "    vmul.f32 s5, s5, s12\n"
    "    vmul.f32 s6, s6, s13\n"
    "    vmul.f32 s7, s7, s13\n"
    "    TLLM_LDM_SX 2\n"
    "    vmla.f32 s0, s4, s8\n"
    "    vmla.f32 s1, s5, s9\n"
    "    vmla.f32 s2, s6, s8\n"
    "    vmla.f32 s3, s7, s9\n"
    "    .endm\n"
    "    .macro TLLM_MM2_GROUP nb, P\n"
    "    TLLM_PAIR_QUARTER 32, 0\n"
    "    .rept \\nb - 1\n"
    "    TLLM_PAIR_QUARTER 16, 0\n"
    "    .endr\n"
    "    .endm\n"
    /* accumulators start at -8*sum(x) of each token: acc = the matvec's acc - sum8 */
    "    .macro TLLM_MM_START P\n"
    "    .if \\P == 2\n"
    "    ldm r12!, {r4, r5}\n"
    "    mov r6, r4\n"
    "    mov r7, r5\n"
    "    .else\n"
    "    TLLM_LDM_SUMS \\P\n"
    "    .endif\n"
    "    .endm\n"
    /* TLLM_MM1_x at P = 3, 4 (one row), TLLM_MM2_x at P = 2 (a row pair) */
    "    .macro TLLM_MM P, what, args:vararg\n"
    "    .if \\P == 2\n"
    "    TLLM_MM2_\\what \\args\n"
    "    .else\n"
    "    TLLM_MM1_\\what \\args\n"
    "    .endif\n"
    "    .endm\n"
    "    .macro TLLM_MM_PROLOGUE\n"
    "    push {r4-r11, lr}\n"
    "    sub sp, sp, #44\n"
    "    str r1, [sp, #0]\n"
    "    str r2, [sp, #36]\n"
    "    str r0, [sp, #32]\n"
    "    ldm r3, {r4-r7}\n"
    "    add r7, r7, r1\n"
    "    str r7, [sp, #40]\n"
    "    str r4, [sp, #28]\n"
    "    str r5, [sp, #12]\n"
    "    str r6, [sp, #16]\n"
    "    lsls r4, r4, #2\n"
    "    str r4, [sp, #20]\n"
    "    TLLM_MASK\n"
    "    movs r0, #0\n"
    "    str r0, [sp, #24]\n"
    "    .endm\n"
    /* start of slot [sp, #24] (step 1 or 2 rows): r11, out pointer, row count;
     * after a row, r11 points exactly 32 bytes before the next tile's row s */
    "    .macro TLLM_MM_SLOT\n"
    "    ldr r0, [sp, #24]\n"
    "    ldr r1, [sp, #28]\n"
    "    subs r1, r1, r0\n"
    "    ble 9f\n"
    "    str r1, [sp, #8]\n"
    "    ldr r2, [sp, #32]\n"
    "    add r11, r2, r0, lsl #2\n"
    "    sub r11, r11, #32\n"
    "    ldr r2, [sp, #36]\n"
    "    add r2, r2, r0, lsl #2\n"
    "    str r2, [sp, #4]\n"
    "    .endm\n"
    /* a row's (a row pair's) groups: the full ones (the loop ends when r12
     * reaches [sp, #40], since lr may hold activations), the short last one */
    "    .macro TLLM_MM_GROUPS nb, P\n"
    "    TLLM_ROW_START\n"
    "    ldr r0, [sp, #12]\n"
    "    cmp r0, #0\n"
    "    beq 3f\n"
    "2:  TLLM_MM_START \\P\n"
    "    TLLM_MM \\P, GROUP, \\nb, \\P\n"
    "    TLLM_MM \\P, END, \\P\n"
    "    ldr r0, [sp, #40]\n"
    "    cmp r12, r0\n"
    "    bne 2b\n"
    "3:  ldr lr, [sp, #16]\n"
    "    cmp lr, #0\n"
    "    beq 5f\n"
    "    TLLM_MM_START \\P\n"
    "    add r11, r11, #16\n"
    "4:  TLLM_MM \\P, BLOCK, \\P, 16\n"
    "    subs lr, lr, #1\n"
    "    bne 4b\n"
    "    TLLM_MM \\P, END, \\P\n"
    "5:\n"
    "    .endm\n"
    /* stack: see above; P = 2 takes the slots 0 and 2 (row pairs) */
    "    .macro TLLM_MATMAT name, nb, P\n"
    "    TLLM_FUNC \\name, .text.\\name\n"
    "    TLLM_MM_PROLOGUE\n"
    "0:  TLLM_MM_SLOT\n"
    "1:  TLLM_MM_GROUPS \\nb, \\P\n"
    "    .if \\P == 2\n"
    "    TLLM_MM2_STORE 20\n"
    "    TLLM_MM_NEXT_SLOT 24, 2\n"
    "    .else\n"
    "    TLLM_MM_STORE \\P, 20\n"
    "    TLLM_MM_NEXT_SLOT 24, 1\n"
    "    .endif\n"
    "9:  TLLM_RETURN 44, 0\n"
    "    .size \\name, . - \\name\n"
    "    .endm\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b4_p2, 4, 2\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b4_p3, 4, 3\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b4_p4, 4, 4\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b8_p2, 8, 2\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b8_p3, 8, 3\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b8_p4, 8, 4\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b16_p2, 16, 2\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b16_p3, 16, 3\n"
    "    TLLM_MATMAT tllm_mm_q4x4_b16_p4, 16, 4\n");

typedef void tllm_mm_fn(const uint8_t *w, const uint8_t *xb, float *out, const uint32_t *dims);
tllm_mm_fn tllm_mm_q4x4_b4_p2, tllm_mm_q4x4_b4_p3, tllm_mm_q4x4_b4_p4, tllm_mm_q4x4_b8_p2, tllm_mm_q4x4_b8_p3,
    tllm_mm_q4x4_b8_p4, tllm_mm_q4x4_b16_p2, tllm_mm_q4x4_b16_p3, tllm_mm_q4x4_b16_p4;

void tllm_matmat_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out) {
    static tllm_mm_fn *const fns[3][3] = {{tllm_mm_q4x4_b4_p2, tllm_mm_q4x4_b4_p3, tllm_mm_q4x4_b4_p4},
                                         {tllm_mm_q4x4_b8_p2, tllm_mm_q4x4_b8_p3, tllm_mm_q4x4_b8_p4},
                                         {tllm_mm_q4x4_b16_p2, tllm_mm_q4x4_b16_p3, tllm_mm_q4x4_b16_p4}};
    if (P == 1) {
        tllm_matvec_q4x4(m, xb, bias, out);
        return;
    }
    const int32_t g = m->group == 32 ? 0 : m->group == 64 ? 1 : m->group == 128 ? 2 : -1;
    if (g < 0 || P < 2 || P > TLLM_MAX_BATCH) {
        tllm_matmat_q4x4_c(m, xb, P, bias, out);
        return;
    }
    if (m->rows == 0) return;
    const uint32_t dims[4] = {m->rows, (uint32_t)(m->cols / m->group),
                              (uint32_t)n_blocks((int32_t)(m->cols % m->group)),
                              /* the x16b bytes of the full groups */
                              (uint32_t)(P * (m->cols / m->group) * (m->group * 2 + 8))};
    fns[g][P - 2](m->stream, xb, out, dims);
    if (bias)
        for (int32_t p = 0; p < P; p++)
            for (int32_t r = 0; r < m->rows; r++) out[p * m->rows + r] = out[p * m->rows + r] + bias[r];
}
#else
void tllm_matvec_q4x4(const tllm_q4x4_matrix *m, const uint8_t *x_stream, const float *bias, float *out) {
    tllm_matvec_q4x4_c(m, x_stream, bias, out);
}

void tllm_matmat_q4x4(const tllm_q4x4_matrix *m, const uint8_t *xb, int32_t P, const float *bias, float *out) {
    tllm_matmat_q4x4_c(m, xb, P, bias, out);
}
#endif
