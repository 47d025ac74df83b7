/* llama.cpp's blocks in 4-row tiles: see tllm_kernels_gguf_m7.h for the
 * contract and codegen/quant/formats.py for the q40x4 / q41x4 / q80x4
 * layouts and the float order.
 *
 * The matvec (one token) takes a whole tile per pass: per 8 inputs one LDM
 * of the four x16 words, shared by the 4 rows, and per row pair one LDRD of
 * their weight words; a nibble row is then four AND (with 0x000F000F, after a
 * shift by 4/8/12 in the same instruction) and four SMLAD, an int8 row four
 * SXTB16 and four SMLAD.  Per block and row the float part is the kept
 * build's, in its order; VMLA/VMLS are ARMv7-M's chained (not fused)
 * multiply-accumulates: exactly round(acc +- round(a * b)).
 *
 * The batched matmat (P = 2..4 tokens) takes one row at a time against the
 * P tokens (each weight lane made once, SMLAD'ed P times), with the x16b
 * words rotating through 5..7 registers, one LDM each (as tllm_matmat_q4x4);
 * at P = 2 the nibble formats take a row pair against both tokens instead,
 * so that every x16b load and each block's activation work serve two rows. */
#include "tllm_kernels_gguf_m7.h"
#include "tllm_m7_asm.h"
#include "tllm_math.h"

#include <string.h>

#define TILE TLLM_GGUF_TILE
#define X16_BLOCK 72 /* x16 bytes per 32 inputs: 32 int16, int32 8 * sum, float32 scale */

enum { KQ40, KQ41, KQ80 };

static inline uint32_t tile_block(int kind) {
    return kind == KQ40 ? TLLM_Q40X4_TILE_BLOCK : kind == KQ41 ? TLLM_Q41X4_TILE_BLOCK : TLLM_Q80X4_TILE_BLOCK;
}

static inline uint32_t tile_bytes_of(int kind, int32_t cols) {
    return (uint32_t)(cols / TLLM_GGUF_BLOCK) * tile_block(kind);
}

int32_t tllm_q40x4_tile_bytes(const tllm_ggufx4_matrix *m) { return (int32_t)tile_bytes_of(KQ40, m->cols); }
int32_t tllm_q41x4_tile_bytes(const tllm_ggufx4_matrix *m) { return (int32_t)tile_bytes_of(KQ41, m->cols); }
int32_t tllm_q80x4_tile_bytes(const tllm_ggufx4_matrix *m) { return (int32_t)tile_bytes_of(KQ80, m->cols); }

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline float ldf(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* --- portable twins --------------------------------------------------------- */
static inline int32_t smlad_c(uint32_t a, uint32_t b, int32_t acc) {
    return acc + (int32_t)(int16_t)(a & 0xFFFF) * (int32_t)(int16_t)(b & 0xFFFF) +
           (int32_t)(int16_t)(a >> 16) * (int32_t)(int16_t)(b >> 16);
}

/* SXTB16: bytes 0 and 2, sign-extended into the two int16 lanes */
static inline uint32_t sxtb16_c(uint32_t v) {
    return (uint32_t)(uint16_t)(int16_t)(int8_t)(v & 0xFF) | (uint32_t)(uint16_t)(int16_t)(int8_t)(v >> 16) << 16;
}

/* The lane pair (q[8k+2j], q[8k+2j+1]) of row s in quarter k of tile-block tb. */
static inline uint32_t weight_lanes(int kind, const uint8_t *tb, int32_t s, int32_t k, int32_t j) {
    if (kind == KQ80) {
        const uint32_t w = ld32(tb + 32 * k + 8 * s + 4 * (j >> 1));
        return sxtb16_c(j & 1 ? w >> 8 : w);
    }
    return (ld32(tb + 16 * k + 4 * s) >> (4 * j)) & 0x000F000Fu;
}

/* sum(q * x) of row s of a tile-block against one block of x16 words: word
 * (k, j) of the token at x + 4 * (4k + j) * P (x16: P = 1; x16b: P tokens). */
static inline int32_t row_isum(int kind, const uint8_t *tb, int32_t s, const uint8_t *x, int32_t P) {
    int32_t acc = 0;
    for (int32_t k = 0; k < 4; k++)
        for (int32_t j = 0; j < 4; j++)
            acc = smlad_c(weight_lanes(kind, tb, s, k, j), ld32(x + 4 * (4 * k + j) * P), acc);
    return acc;
}

/* One block's float term (the kept build's block_term_dm, formats.py's order). */
static inline float block_term(int kind, float d, float mn, int32_t isum, int32_t xsum, float sx) {
    if (kind == KQ80) return (d * sx) * (float)isum;
    if (kind == KQ40) return (d * sx) * (float)(isum - 8 * xsum);
    float t = (d * sx) * (float)isum;
    return t + (mn * sx) * (float)xsum;
}

/* d (and m) of row s in a tile-block, converted exactly */
static inline float row_d(int kind, const uint8_t *tb, int32_t s) {
    const uint32_t at = kind == KQ80 ? 128u : 64u;
    return tllm_fp16_to_f32(ld16(tb + at + (kind == KQ41 ? 4u : 2u) * (uint32_t)s));
}

static inline float row_m(int kind, const uint8_t *tb, int32_t s) {
    return kind == KQ41 ? tllm_fp16_to_f32(ld16(tb + 66 + 4 * s)) : 0.0f;
}

/* Row r's output for token p of a P-token activation stream (P = 1: x16,
 * else x16b; group 32): the kept build's block loop. */
static float row_dot(int kind, const tllm_ggufx4_matrix *m, int32_t r, const uint8_t *xb, int32_t P, int32_t p) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK, s = r % TILE;
    const uint8_t *tb = m->tiles + (uint32_t)(r / TILE) * tile_bytes_of(kind, m->cols);
    float acc = 0.0f;
    for (int32_t b = 0; b < nb; b++, tb += tile_block(kind)) {
        const uint8_t *g = xb + (uint32_t)(b * X16_BLOCK * P);
        int32_t isum, xsum;
        float sx;
        if (P == 1) { /* 32 int16, 8 * sum, scale */
            isum = row_isum(kind, tb, s, g, 1);
            xsum = (int32_t)ld32(g + 64) / 8;
            sx = ldf(g + 68);
        } else { /* P int32 -8 * sum, the words, P scales */
            isum = row_isum(kind, tb, s, g + 4 * P + 4 * p, P);
            xsum = -(int32_t)ld32(g + 4 * p) / 8;
            sx = ldf(g + 68 * P + 4 * p);
        }
        acc = acc + block_term(kind, row_d(kind, tb, s), row_m(kind, tb, s), isum, xsum, sx);
    }
    return acc;
}

static inline __attribute__((always_inline)) void matmat_c(int kind, const tllm_ggufx4_matrix *m, const uint8_t *xb,
                                                           int32_t P, const float *bias, float *out) {
    for (int32_t p = 0; p < P; p++)
        for (int32_t r = 0; r < m->rows; r++) {
            const float acc = row_dot(kind, m, r, xb, P, p);
            out[p * m->rows + r] = bias ? acc + bias[r] : acc;
        }
}

/* A layout's matvec and matmat by matmat_c, named tllm_matvec_<name> and
 * tllm_matmat_<name>: the portable twins (name = layout_c) here, and the
 * kernels themselves where there is no M7 assembly (TLLM_X4_KERNELS). */
#define TLLM_X4_PORTABLE(name, kind)                                                                               \
    void tllm_matvec_##name(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out) {      \
        matmat_c(kind, m, x16, 1, bias, out);                                                                      \
    }                                                                                                              \
    void tllm_matmat_##name(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,          \
                            float *out) {                                                                          \
        matmat_c(kind, m, xb, P, bias, out);                                                                       \
    }
TLLM_X4_PORTABLE(q40x4_c, KQ40)
TLLM_X4_PORTABLE(q41x4_c, KQ41)
TLLM_X4_PORTABLE(q80x4_c, KQ80)

/* --- embedding -------------------------------------------------------------- */
static inline __attribute__((always_inline)) void embed(int kind, const tllm_ggufx4_matrix *m, int32_t token,
                                                        float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK, s = token % TILE;
    const uint8_t *tb = m->tiles + (uint32_t)(token / TILE) * tile_bytes_of(kind, m->cols);
    for (int32_t b = 0; b < nb; b++, tb += tile_block(kind), out += TLLM_GGUF_BLOCK) {
        const float d = row_d(kind, tb, s), mn = row_m(kind, tb, s);
        for (int32_t k = 0; k < 4; k++)
            for (int32_t i = 0; i < 8; i++) { /* input 8k + i = 8k + 2j + e */
                if (kind == KQ80) {
                    static const uint8_t at[8] = {0, 2, 1, 3, 4, 6, 5, 7}; /* byte of q[8k + i] */
                    out[8 * k + i] = d * (float)(int8_t)tb[32 * k + 8 * s + at[i]];
                    continue;
                }
                const int32_t q = (int32_t)((ld32(tb + 16 * k + 4 * s) >> (4 * (i >> 1) + 16 * (i & 1))) & 0xFu);
                out[8 * k + i] = kind == KQ40 ? d * (float)(q - 8) : d * (float)q + mn;
            }
    }
}

void tllm_embed_q40x4(const tllm_ggufx4_matrix *m, int32_t token, float *out) { embed(KQ40, m, token, out); }
void tllm_embed_q41x4(const tllm_ggufx4_matrix *m, int32_t token, float *out) { embed(KQ41, m, token, out); }
void tllm_embed_q80x4(const tllm_ggufx4_matrix *m, int32_t token, float *out) { embed(KQ80, m, token, out); }

/* --- the classifier's chunked loops ------------------------------------------ */
typedef void x4_matvec_fn(const tllm_ggufx4_matrix *, const uint8_t *, const float *, float *);

static void argmax_from(x4_matvec_fn *mv, int kind, const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias,
                        float *chunk, int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v) {
    const uint32_t tile = tile_bytes_of(kind, m->cols);
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_ggufx4_matrix part = {m->tiles + (uint32_t)(r0 / TILE) * tile, (uint16_t)n, m->cols};
        mv(&part, x16, bias ? bias + r0 : 0, chunk);
        argmax_chunk(chunk, n, row0 + r0, best, best_v);
    }
}

#define TLLM_X4_ARGMAX(suffix, kind)                                                                                 \
    int32_t tllm_argmax_##suffix(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *chunk,  \
                                 int32_t chunk_rows) {                                                               \
        int32_t best = 0;                                                                                            \
        float best_v = 0.0f;                                                                                         \
        argmax_from(tllm_matvec_##suffix, kind, m, x16, bias, chunk, chunk_rows, 0, &best, &best_v);                \
        return best;                                                                                                 \
    }                                                                                                                \
    void tllm_argmax_##suffix##_from(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias,            \
                                     float *chunk, int32_t chunk_rows, int32_t row0, int32_t *best, float *best_v) { \
        argmax_from(tllm_matvec_##suffix, kind, m, x16, bias, chunk, chunk_rows, row0, best, best_v);               \
    }
TLLM_X4_ARGMAX(q40x4, KQ40)
TLLM_X4_ARGMAX(q41x4, KQ41)
TLLM_X4_ARGMAX(q80x4, KQ80)

#if defined(__ARM_ARCH_7EM__) && defined(__ARM_FEATURE_DSP) && defined(__ARM_FP)
/* --- Cortex-M7 matvec: tllm_mv_<layout>(tiles, x16, out, dims) ---------------
 * dims = {tiles, blocks per row}; writes 4 floats per tile.  Registers:
 * r0-r3 the x16 words of 8 inputs (shared by the 4 rows), r4-r7 the rows'
 * int32 sums, r8/lr a row pair's weight words (nibbles; int8: r8/r9 one
 * row's), r9 the lane (int8: r10), r10 0x000F000F (nibbles), r11 weights,
 * r12 x16, s0-s3 the rows' float sums.  Stack: [0] x16, [4] out, [8] tiles
 * left, [12] end of the x16 stream (int8: blocks per row; lr counts). */
__asm__(
    TLLM_M7_ASM_MACROS
    /* one row's 8 int8 (two words) against r0-r3 */
    "    .macro GXV_I8 acc, first\n"
    "    ldrd r8, r9, [r11], #8\n"
    "    sxtb16 r10, r8\n"
    "    TLLM_SMLAD \\acc, r10, r0, \\first\n"
    "    sxtb16 r10, r8, ror #8\n"
    "    smlad \\acc, r10, r1, \\acc\n"
    "    sxtb16 r10, r9\n"
    "    smlad \\acc, r10, r2, \\acc\n"
    "    sxtb16 r10, r9, ror #8\n"
    "    smlad \\acc, r10, r3, \\acc\n"
    "    .endm\n"
    /* a quarter of a block (8 inputs) for the 4 rows */
    "    .macro GXV_QUARTER kind, first\n"
    "    ldm r12!, {r0-r3}\n"
    "    .if \\kind == 2\n"
    "    GXV_I8 r4, \\first\n"
    "    GXV_I8 r5, \\first\n"
    "    GXV_I8 r6, \\first\n"
    "    GXV_I8 r7, \\first\n"
    "    .else\n"
    "    ldrd r8, lr, [r11], #8\n"
    "    TLLM_NIB_ROW r4, r8, \\first\n"
    "    TLLM_NIB_ROW r5, lr, \\first\n"
    "    ldrd r8, lr, [r11], #8\n"
    "    TLLM_NIB_ROW r6, r8, \\first\n"
    "    TLLM_NIB_ROW r7, lr, \\first\n"
    "    .endif\n"
    "    .endm\n"
    /* Q4_1 row i: raw (d, m) in dm, (float)isum in fi, float sum acc; s12 xsum, s13 sx */
    "    .macro GXV_Q41_ROW dm, fi, acc\n"
    "    vcvtb.f32.f16 s14, \\dm\n"
    "    vcvtt.f32.f16 s15, \\dm\n"
    "    vmul.f32 s14, s14, s13\n"      /* d * sx */
    "    vmul.f32 s15, s15, s13\n"      /* m * sx */
    "    vmul.f32 \\fi, s14, \\fi\n"    /* t = (d * sx) * (float)isum */
    "    vmla.f32 \\fi, s15, s12\n"     /* t = t + (m * sx) * (float)xsum */
    "    vadd.f32 \\acc, \\acc, \\fi\n" /* acc = acc + t */
    "    .endm\n"
    /* the block's float part for the 4 rows */
    "    .macro GXV_END kind\n"
    "    .if \\kind == 1\n"
    "    vldm r12!, {s12-s13}\n"        /* 8 * xsum, sx */
    "    vcvt.f32.s32 s12, s12, #3\n"   /* (float)xsum: exact */
    "    TLLM_SUMS_TO_S 4\n"
    "    vldm r11!, {s8-s11}\n"         /* (d, m) of rows 0..3 */
    "    TLLM_CVT_SUMS 4\n"
    "    GXV_Q41_ROW s8, s4, s0\n"
    "    GXV_Q41_ROW s9, s5, s1\n"
    "    GXV_Q41_ROW s10, s6, s2\n"
    "    GXV_Q41_ROW s11, s7, s3\n"
    "    .else\n"
    "    .if \\kind == 0\n"
    "    ldrd r0, r1, [r12], #8\n"      /* 8 * xsum, sx */
    "    subs r4, r4, r0\n"             /* isum - 8 * xsum */
    "    subs r5, r5, r0\n"
    "    subs r6, r6, r0\n"
    "    subs r7, r7, r0\n"
    "    vmov s13, r1\n"
    "    .else\n"
    "    vldm r12!, {s12-s13}\n"        /* (8 * xsum), sx */
    "    .endif\n"
    "    TLLM_SUMS_TO_S 4\n"
    "    vldm r11!, {s8-s9}\n"          /* d of rows 0, 1 | 2, 3 */
    "    TLLM_CVT_SUMS 4\n"
    "    vcvtt.f32.f16 s11, s8\n"
    "    vcvtb.f32.f16 s10, s8\n"
    "    vcvtt.f32.f16 s15, s9\n"
    "    vcvtb.f32.f16 s14, s9\n"
    "    vmul.f32 s10, s10, s13\n"      /* d * sx */
    "    vmul.f32 s11, s11, s13\n"
    "    vmul.f32 s14, s14, s13\n"
    "    vmul.f32 s15, s15, s13\n"
    "    vmla.f32 s0, s10, s4\n"        /* acc = acc + (d * sx) * (float)isum' */
    "    vmla.f32 s1, s11, s5\n"
    "    vmla.f32 s2, s14, s6\n"
    "    vmla.f32 s3, s15, s7\n"
    "    .endif\n"
    "    .endm\n"
    "    .macro GXV_MATVEC name, kind\n"
    "    TLLM_FUNC \\name, .text.\\name\n"
    "    push {r4-r11, lr}\n"
    "    sub sp, sp, #16\n"
    "    ldrd r4, r5, [r3]\n"
    "    strd r1, r2, [sp]\n"
    "    str r4, [sp, #8]\n"
    "    .if \\kind == 2\n"
    "    str r5, [sp, #12]\n"
    "    .else\n"
    "    movs r6, #72\n"
    "    mla r6, r5, r6, r1\n"
    "    str r6, [sp, #12]\n"
    "    TLLM_MASK\n"
    "    .endif\n"
    "    mov r11, r0\n"
    "1:  TLLM_ROW_START\n"
    "    .if \\kind == 2\n"
    "    ldr lr, [sp, #12]\n"
    "    .endif\n"
    "2:  GXV_QUARTER \\kind, 1\n"
    "    GXV_QUARTER \\kind, 0\n"
    "    GXV_QUARTER \\kind, 0\n"
    "    GXV_QUARTER \\kind, 0\n"
    "    GXV_END \\kind\n"
    "    .if \\kind == 2\n"
    "    subs lr, lr, #1\n"
    "    .else\n"
    "    ldr r9, [sp, #12]\n"
    "    cmp r12, r9\n"
    "    .endif\n"
    "    bne 2b\n"
    "    TLLM_MV_NEXT_TILE\n"
    "    TLLM_RETURN 16, 0\n"
    "    .size \\name, . - \\name\n"
    "    .endm\n"
    "    GXV_MATVEC tllm_mv_q40x4, 0\n"
    "    GXV_MATVEC tllm_mv_q41x4, 1\n"
    "    GXV_MATVEC tllm_mv_q80x4, 2\n");

/* --- Cortex-M7 matmat: tllm_mm_<layout>_pP(tiles, xb, out, dims) -----------
 * dims = {rows, blocks per row}; P = 2, 3, 4 tokens of the x16b stream; one
 * row at a time, rows in slot-major order (every tile's row s, then s + 1:
 * after a row the weight pointer is at the next tile's row s).  Per 8 inputs
 * and row: one LDR (int8: LDRD) of the row's weights, per lane pair one AND
 * (int8: SXTB16) shared by the P tokens' SMLADs, and the 4P activation words
 * rotating through K = 9 - P registers (r0-r3, then r6 r7 lr / r7 lr / lr),
 * one LDM per K words.  Registers: r4.. the tokens' int32 sums, r8 the
 * weight word (int8: r8 r9), r9 the lane (int8: r10), r10 0x000F000F,
 * r11 weights (pre-indexed: it points at the word last loaded), r12 x16b;
 * s0.. the tokens' float sums.  Q4_1 reads each block's head as the float32
 * -xsum (q41_heads converts the stream's -8 * xsum in place around the
 * call, exactly) and enters it by VMLS: t - (m * sx) * (-xsum) rounds
 * exactly as t + (m * sx) * xsum for every value but NaN (whose sign may
 * differ).  Q4_1 at P = 4 takes two blocks per pass (the loop test once per
 * two), its heads shifted by one block (q41_heads), so that one VLDM loads a
 * block's sx and -xsum.  Stack: [0] xb (Q4_1 at P = 4: xb + 16, past the
 * first head), [4] out (this row, token 0), [8] rows left from this one in
 * the slot, [12] 4 * rows, [16] end of the x16b stream (Q4_1 at P = 4: its
 * last block's sx), [20] slot, [24] rows, [28] tiles, [32] out, [36] the
 * offset of this slot's fp16 d from r11 at the block's end (Q4_0, Q8_0), 1
 * when the blocks per row are odd (Q4_1 at P = 4). */
__asm__(
    "    .syntax unified\n"
    /* lane pair j of the quarter's weights (nibbles in r8; int8 in r8 r9) */
    "    .macro GXM_LANE kind, j\n"
    "    .if \\kind == 2\n"
    "    .if \\j == 0\n"
    "    sxtb16 r10, r8\n"
    "    .elseif \\j == 1\n"
    "    sxtb16 r10, r8, ror #8\n"
    "    .elseif \\j == 2\n"
    "    sxtb16 r10, r9\n"
    "    .else\n"
    "    sxtb16 r10, r9, ror #8\n"
    "    .endif\n"
    "    .else\n"
    "    TLLM_NIB_LANE \\j, r8\n"
    "    .endif\n"
    "    .endm\n"
    /* one block of one row against P tokens: 16 P words */
    "    .macro GXM_BLOCK kind, P, K, head=1\n"
    "    .if \\kind == 0\n"
    "    TLLM_LDM_SUMS \\P\n"           /* the sums start at -8 * xsum */
    "    .elseif (\\kind == 1) && \\head\n"
    "    .if \\P == 2\n"
    "    vldm r12!, {s12-s13}\n"        /* -xsum (float32: q41_heads) */
    "    .elseif \\P == 3\n"
    "    vldm r12!, {s12-s14}\n"
    "    .else\n"
    "    vldm r12!, {s12-s15}\n"
    "    .endif\n"
    "    .elseif \\kind == 2\n"
    "    add r12, r12, #(4 * \\P)\n"
    "    .endif\n"
    "    .set gx_n, 0\n"
    "    .rept 16 * \\P\n"
    "    .if (gx_n % (4 * \\P)) == 0\n"  /* a quarter's weights */
    "    .if \\kind == 2\n"
    "    .if gx_n == 0\n"
    "    ldrd r8, r9, [r11, #40]!\n"
    "    .else\n"
    "    ldrd r8, r9, [r11, #32]!\n"
    "    .endif\n"
    "    .elseif gx_n == 0\n"
    "    ldr r8, [r11, #(32 - 8 * (1 - \\kind))]!\n"
    "    .else\n"
    "    ldr r8, [r11, #16]!\n"
    "    .endif\n"
    "    .endif\n"
    "    .if (gx_n % \\P) == 0\n"
    "    GXM_LANE \\kind, ((gx_n / \\P) % 4)\n"
    "    .endif\n"
    "    .if \\kind == 2\n"
    "    TLLM_ROT_WORD gx_n, (16 * \\P), \\P, \\K, r10, (gx_n < \\P)\n"
    "    .else\n"
    "    TLLM_ROT_WORD gx_n, (16 * \\P), \\P, \\K, r9, ((\\kind == 1) && (gx_n < \\P))\n"
    "    .endif\n"
    "    .set gx_n, gx_n + 1\n"
    "    .endr\n"
    "    .endm\n"
    /* a (row, token)'s float part: d (m) of the row, sx (-xsum) of the
     * token, fi its (float)isum, acc its float sum; dsx, msx scratch */
    "    .macro GXM_FLOAT kind, d, m, sx, nx, fi, acc, dsx, msx\n"
    "    vmul.f32 \\dsx, \\d, \\sx\n"   /* d * sx */
    "    .if \\kind == 1\n"
    "    vmul.f32 \\msx, \\m, \\sx\n"   /* m * sx */
    "    vmul.f32 \\fi, \\dsx, \\fi\n"  /* t = (d * sx) * (float)isum */
    "    vmls.f32 \\fi, \\msx, \\nx\n"  /* t = t - (m * sx) * (-xsum) */
    "    vadd.f32 \\acc, \\acc, \\fi\n"
    "    .else\n"
    "    vmla.f32 \\acc, \\dsx, \\fi\n" /* acc = acc + (d * sx) * (float)isum' */
    "    .endif\n"
    "    .endm\n"
    /* token p's float part: fi = s4 + p, sx = s8 + p, acc = s0 + p; the row's
     * d in s16 (Q4_1: d, m in s17, s18) */
    "    .macro GXM_TOKEN kind, fi, sx, acc, nx\n"
    "    .if \\kind == 1\n"
    "    GXM_FLOAT 1, s17, s18, \\sx, \\nx, \\fi, \\acc, s19, s20\n"
    "    .else\n"
    "    GXM_FLOAT \\kind, s16, s18, \\sx, \\nx, \\fi, \\acc, \\sx, s20\n"
    "    .endif\n"
    "    .endm\n"
    /* sxnx (Q4_1 at P = 4, shifted heads): 1 loads sx and -xsum in one VLDM
     * (this block's -xsum sits in the next block's head), 2 is the row's
     * last block, whose -xsum q41_heads parked in the first head (xb) */
    "    .macro GXM_END kind, P, sxnx=0\n"
    "    TLLM_SUMS_TO_S \\P\n"
    "    .if \\sxnx == 1\n"
    "    vldm r12!, {s8-s15}\n"
    "    .else\n"
    "    TLLM_LDM_SX \\P\n"             /* sx of the P tokens */
    "    .endif\n"
    "    .if \\sxnx == 2\n"
    "    ldr r9, [sp, #0]\n"           /* xb + 16: the first block's words */
    "    vldmdb r9!, {s12-s15}\n"
    "    .endif\n"
    "    .if \\kind == 1\n"
    "    vldr s16, [r11, #16]\n"        /* this row's (d, m) */
    "    vcvtb.f32.f16 s17, s16\n"
    "    vcvtt.f32.f16 s18, s16\n"
    "    .else\n"
    "    ldr r9, [sp, #36]\n"
    "    ldrh r9, [r11, r9]\n"          /* this row's d */
    "    vmov s16, r9\n"
    "    vcvtb.f32.f16 s16, s16\n"
    "    .endif\n"
    "    TLLM_CVT_SUMS \\P\n"
    "    GXM_TOKEN \\kind, s4, s8, s0, s12\n"
    "    GXM_TOKEN \\kind, s5, s9, s1, s13\n"
    "    .if \\P >= 3\n"
    "    GXM_TOKEN \\kind, s6, s10, s2, s14\n"
    "    .endif\n"
    "    .if \\P >= 4\n"
    "    GXM_TOKEN \\kind, s7, s11, s3, s15\n"
    "    .endif\n"
    "    .endm\n"
    /* P = 2, nibbles: two rows of a tile (slots 2h, 2h + 1) against the two
     * tokens at once (TLLM_PAIR_QUARTER), so that each LDM of x16b words
     * serves both rows, and each block's activation work (scales, sums) and
     * the loop serve both: per 8 inputs one LDRD of the pair's weight words,
     * two LDM, eight AND, sixteen SMLAD.  s0 s1 / s2 s3 the rows' float sums
     * (tokens 0, 1); [8] counts rows from the pair's first, [36] (Q4_0) the
     * offset of the pair's fp16 d word from r11. */
    "    .macro GXM2_BLOCK kind\n"
    "    .if \\kind == 0\n"
    "    ldm r12!, {r4, r5}\n"         /* the sums start at -8 * xsum */
    "    mov r6, r4\n"
    "    mov r7, r5\n"
    "    .else\n"
    "    vldm r12!, {s12-s13}\n"       /* -xsum (float32: q41_heads) */
    "    .endif\n"
    "    TLLM_PAIR_QUARTER (32 - 8 * (1 - \\kind)), (\\kind == 1)\n"
    "    TLLM_PAIR_QUARTER 16, 0\n"
    "    TLLM_PAIR_QUARTER 16, 0\n"
    "    TLLM_PAIR_QUARTER 16, 0\n"
    "    TLLM_SUMS_TO_S 4\n"
    "    TLLM_LDM_SX 2\n"              /* sx of the two tokens */
    "    .if \\kind == 1\n"
    "    vldr d8, [r11, #16]\n"        /* the rows' (d, m): s16 row 0's, s17 row 1's */
    "    vcvtb.f32.f16 s18, s16\n"
    "    vcvtt.f32.f16 s19, s16\n"
    "    vcvtb.f32.f16 s20, s17\n"
    "    vcvtt.f32.f16 s21, s17\n"
    "    .else\n"
    "    ldr r9, [sp, #36]\n"
    "    ldr r9, [r11, r9]\n"          /* the rows' d */
    "    vmov s16, r9\n"
    "    vcvtb.f32.f16 s18, s16\n"
    "    vcvtt.f32.f16 s20, s16\n"
    "    .endif\n"
    "    TLLM_CVT_SUMS 4\n"
    "    GXM_FLOAT \\kind, s18, s19, s8, s12, s4, s0, s22, s23\n"
    "    GXM_FLOAT \\kind, s18, s19, s9, s13, s5, s1, s22, s23\n"
    "    GXM_FLOAT \\kind, s20, s21, s8, s12, s6, s2, s22, s23\n"
    "    GXM_FLOAT \\kind, s20, s21, s9, s13, s7, s3, s22, s23\n"
    "    .endm\n"
    /* One matmat; pair: P = 2 with nibbles (GXM2_BLOCK, slots 0 and 2). */
    "    .macro GXM_MATMAT name, kind, P\n"
    "    .set gx_pair, (\\P == 2) && (\\kind != 2)\n"
    "    .set gx_twice, (\\P == 4) && (\\kind == 1)\n"
    "    TLLM_FUNC \\name, .text.\\name\n"
    "    push {r4-r11, lr}\n"
    "    vpush {s16-s23}\n"
    "    sub sp, sp, #40\n"
    "    str r1, [sp, #0]\n"
    "    str r2, [sp, #32]\n"
    "    str r0, [sp, #28]\n"
    "    ldrd r4, r5, [r3]\n"
    "    str r4, [sp, #24]\n"
    "    lsls r6, r4, #2\n"
    "    str r6, [sp, #12]\n"
    "    movs r6, #(72 * \\P)\n"
    "    mla r6, r5, r6, r1\n"
    "    str r6, [sp, #16]\n"
    "    .if \\kind != 2\n"
    "    TLLM_MASK\n"
    "    .endif\n"
    "    .if gx_twice\n"
    "    and r6, r5, #1\n"             /* an odd number of blocks per row */
    "    str r6, [sp, #36]\n"
    "    ldr r6, [sp, #16]\n"          /* the loop's end: the last block's sx */
    "    subs r6, r6, #16\n"
    "    str r6, [sp, #16]\n"
    "    adds r6, r1, #16\n"           /* rows start past the first head */
    "    str r6, [sp, #0]\n"
    "    .endif\n"
    "    movs r0, #0\n"
    "    str r0, [sp, #20]\n"
    "0:  ldr r0, [sp, #20]\n"          /* slot s (pair: rows 2h, 2h + 1 of every tile) */
    "    ldr r1, [sp, #24]\n"
    "    subs r1, r1, r0\n"
    "    ble 9f\n"
    "    str r1, [sp, #8]\n"
    "    ldr r2, [sp, #28]\n"
    "    .if \\kind == 2\n"
    "    add r11, r2, r0, lsl #3\n"     /* row s's words: 8s into the tile-block */
    "    sub r11, r11, #40\n"
    "    add r2, r0, r0, lsl #1\n"      /* d at 128 + 2s, r11 at 96 + 8s: 32 - 6s */
    "    rsb r2, r2, #16\n"
    "    lsls r2, r2, #1\n"
    "    str r2, [sp, #36]\n"
    "    .else\n"
    "    add r11, r2, r0, lsl #2\n"     /* row s's words: 4s into the tile-block */
    "    sub r11, r11, #(32 - 8 * (1 - \\kind))\n"
    "    .if \\kind == 0\n"
    "    movs r2, #16\n"                /* Q4_0: d at 64 + 2s, r11 at 48 + 4s: 16 - 2s */
    "    sub r2, r2, r0, lsl #1\n"
    "    str r2, [sp, #36]\n"
    "    .endif\n"
    "    .endif\n"
    "    ldr r2, [sp, #32]\n"
    "    add r2, r2, r0, lsl #2\n"
    "    str r2, [sp, #4]\n"
    "1:  TLLM_ROW_START\n"             /* a row (pair) */
    "    .if gx_twice\n"
    /* Two blocks per pass, each block's float part after the next block's
     * integer part's test: a pass is F I F I, the loop test after the
     * second I; an even count enters at the first I, an odd one at the
     * second, and the row's last block has its own F (sxnx 2). */
    "    ldr r0, [sp, #36]\n"
    "    cmp r0, #0\n"
    "    bne 3f\n"
    "    b 4f\n"
    "2:  GXM_END 1, 4, 1\n"
    "4:  GXM_BLOCK 1, 4, 5, 0\n"
    "    GXM_END 1, 4, 1\n"
    "3:  GXM_BLOCK 1, 4, 5, 0\n"
    "    ldr r9, [sp, #16]\n"
    "    cmp r12, r9\n"
    "    bne 2b\n"
    "    GXM_END 1, 4, 2\n"
    "    .else\n"
    "2:\n"
    "    .if gx_pair\n"
    "    GXM2_BLOCK \\kind\n"
    "    .else\n"
    "    GXM_BLOCK \\kind, \\P, (9 - \\P)\n"
    "    GXM_END \\kind, \\P\n"
    "    .endif\n"
    "    ldr r9, [sp, #16]\n"
    "    cmp r12, r9\n"
    "    bne 2b\n"
    "    .endif\n"
    "    .if gx_pair\n"
    "    TLLM_MM2_STORE 12\n"
    "    TLLM_MM_NEXT_SLOT 20, 2\n"
    "    .else\n"
    "    TLLM_MM_STORE \\P, 12\n"
    "    TLLM_MM_NEXT_SLOT 20, 1\n"
    "    .endif\n"
    "9:  TLLM_RETURN 40, 1\n"
    "    .size \\name, . - \\name\n"
    "    .endm\n"
    "    GXM_MATMAT tllm_mm_q40x4_p2, 0, 2\n"
    "    GXM_MATMAT tllm_mm_q40x4_p3, 0, 3\n"
    "    GXM_MATMAT tllm_mm_q40x4_p4, 0, 4\n"
    "    GXM_MATMAT tllm_mm_q41x4_p2, 1, 2\n"
    "    GXM_MATMAT tllm_mm_q41x4_p3, 1, 3\n"
    "    GXM_MATMAT tllm_mm_q41x4_p4, 1, 4\n"
    "    GXM_MATMAT tllm_mm_q80x4_p2, 2, 2\n"
    "    GXM_MATMAT tllm_mm_q80x4_p3, 2, 3\n"
    "    GXM_MATMAT tllm_mm_q80x4_p4, 2, 4\n");

typedef void x4_asm_fn(const uint8_t *tiles, const uint8_t *x, float *out, const uint32_t *dims);
x4_asm_fn tllm_mv_q40x4, tllm_mv_q41x4, tllm_mv_q80x4;
x4_asm_fn tllm_mm_q40x4_p2, tllm_mm_q40x4_p3, tllm_mm_q40x4_p4, tllm_mm_q41x4_p2, tllm_mm_q41x4_p3, tllm_mm_q41x4_p4,
    tllm_mm_q80x4_p2, tllm_mm_q80x4_p3, tllm_mm_q80x4_p4;

/* Whole tiles straight into out; a last tile of fewer rows into a
 * 4-float buffer, of which its rows are copied. */
static inline __attribute__((always_inline)) void matvec_asm(x4_asm_fn *fn, int kind, const tllm_ggufx4_matrix *m,
                                                             const uint8_t *x16, const float *bias, float *out) {
    const uint32_t full = m->rows / TILE, rest = m->rows % TILE, nb = (uint32_t)m->cols / TLLM_GGUF_BLOCK;
    if (nb == 0) { /* no columns: every row is the empty sum */
        for (int32_t r = 0; r < m->rows; r++) out[r] = bias ? 0.0f + bias[r] : 0.0f;
        return;
    }
    if (full) {
        const uint32_t dims[2] = {full, nb};
        fn(m->tiles, x16, out, dims);
    }
    if (rest) {
        float tail[TILE];
        const uint32_t dims[2] = {1, nb};
        fn(m->tiles + full * tile_bytes_of(kind, m->cols), x16, tail, dims);
        memcpy(out + TILE * full, tail, rest * sizeof(float));
    }
    if (bias)
        for (int32_t r = 0; r < m->rows; r++) out[r] = out[r] + bias[r];
}

/* Q4_1's batched assembly reads each block's head (the P tokens' int32
 * -8 * xsum) as float32 -xsum, so that no row converts it again: before the
 * call the heads become -xsum (|8 * xsum| <= 8 * 32 * 127: exact in float32,
 * and so is the division by 8), after it -8 * xsum again, the same bytes
 * (every other reader of the stream, and the portable twin, sees integers).
 * shifted (P = 4): block b's -xsum goes into block b + 1's head, right after
 * b's sx (one VLDM loads both), the last block's into the first head. */
/* The P heads at src into dst (the same place or another block's):
 * int32 -8 * xsum to float32 -xsum, or back. */
static void q41_head_move(uint8_t *dst, const uint8_t *src, int32_t P, int to_float) {
    for (int32_t p = 0; p < P; p++) {
        if (to_float) {
            int32_t v;
            memcpy(&v, src + 4 * p, 4);
            const float f = (float)v / 8.0f;
            memcpy(dst + 4 * p, &f, 4);
        } else {
            float f;
            memcpy(&f, src + 4 * p, 4);
            const int32_t v = (int32_t)(f * 8.0f);
            memcpy(dst + 4 * p, &v, 4);
        }
    }
}

static void q41_heads(uint8_t *xb, int32_t nb, int32_t P, int to_float, int shifted) {
    const uint32_t step = X16_BLOCK * (uint32_t)P;
    uint8_t *const last = xb + (uint32_t)(nb - 1) * step;
    uint8_t keep[4 * TLLM_MAX_BATCH];
    if (!shifted) {
        for (uint8_t *h = xb; h <= last; h += step) q41_head_move(h, h, P, to_float);
    } else if (to_float) { /* from the last block down: each head read before it is overwritten */
        memcpy(keep, last, 4 * (size_t)P);
        for (uint8_t *h = last; h > xb; h -= step) q41_head_move(h, h - step, P, 1);
        q41_head_move(xb, keep, P, 1);
    } else {
        memcpy(keep, xb, 4 * (size_t)P);
        for (uint8_t *h = xb; h < last; h += step) q41_head_move(h, h + step, P, 0);
        q41_head_move(last, keep, P, 0);
    }
}

static inline __attribute__((always_inline)) void matmat_asm(x4_asm_fn *const *fns, x4_asm_fn *mv, int kind,
                                                             const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P,
                                                             const float *bias, float *out) {
    if (P == 1) {
        matvec_asm(mv, kind, m, xb, bias, out);
        return;
    }
    if (P < 2 || P > TLLM_MAX_BATCH || m->cols < TLLM_GGUF_BLOCK) {
        matmat_c(kind, m, xb, P, bias, out);
        return;
    }
    if (m->rows == 0) return;
    const uint32_t dims[2] = {m->rows, (uint32_t)m->cols / TLLM_GGUF_BLOCK};
    if (kind == KQ41) q41_heads((uint8_t *)xb, (int32_t)dims[1], P, 1, P == 4);
    fns[P - 2](m->tiles, xb, out, dims);
    if (kind == KQ41) q41_heads((uint8_t *)xb, (int32_t)dims[1], P, 0, P == 4);
    if (bias)
        for (int32_t p = 0; p < P; p++)
            for (int32_t r = 0; r < m->rows; r++) out[p * m->rows + r] = out[p * m->rows + r] + bias[r];
}

/* tllm_matvec_<layout>, tllm_matmat_<layout>: the assembly above */
#define TLLM_X4_KERNELS(layout, kind)                                                                              \
    void tllm_matvec_##layout(const tllm_ggufx4_matrix *m, const uint8_t *x16, const float *bias, float *out) {    \
        matvec_asm(tllm_mv_##layout, kind, m, x16, bias, out);                                                     \
    }                                                                                                              \
    void tllm_matmat_##layout(const tllm_ggufx4_matrix *m, const uint8_t *xb, int32_t P, const float *bias,        \
                              float *out) {                                                                        \
        static x4_asm_fn *const fns[3] = {tllm_mm_##layout##_p2, tllm_mm_##layout##_p3, tllm_mm_##layout##_p4};     \
        matmat_asm(fns, tllm_mv_##layout, kind, m, xb, P, bias, out);                                              \
    }
#else
#define TLLM_X4_KERNELS(layout, kind) TLLM_X4_PORTABLE(layout, kind)
#endif
TLLM_X4_KERNELS(q40x4, KQ40)
TLLM_X4_KERNELS(q41x4, KQ41)
TLLM_X4_KERNELS(q80x4, KQ80)
