/* llama.cpp block formats kept as they are: see tllm_kernels_gguf.h for the
 * layouts and the arithmetic; twins in codegen/exact.py.  The integer block
 * sums use SMLAD on cores with the DSP extension (exact either way: only the
 * float expression per block and the block order are part of the contract). */
#include "tllm_kernels_gguf.h"
#include "tllm_math.h"

#include <string.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#define GGUF_SMLAD 1
#else
#define GGUF_SMLAD 0
#endif

enum { Q40_BYTES = 18, Q41_BYTES = 20, Q80_BYTES = 34 };
enum { GGUF_Q40, GGUF_Q41, GGUF_Q80 };
/* Blocks whose activation sums are kept on the stack per matvec (2048 inputs);
 * beyond that a block's sum is recomputed per row (same integers). */
#define XSUM_BLOCKS 64

/* Exact: every fp16 value is a float32 value. */
static inline float fp16_bits_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact */
        const float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    const uint32_t bits = exp == 31 ? (sign | 0x7F800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* One VCVTB.F32.F16 where the FPU converts half precision (FPv5: IEEE
 * format while FPSCR.AHP = 0, its reset value; exact, subnormals included
 * while FPSCR.FZ = 0, also the reset value and never changed here). */
static inline float h2f(uint16_t h) {
#if defined(__ARM_FP) && (__ARM_FP & 2) && defined(__thumb2__)
    float f;
    __asm__("vmov %0, %1\n\tvcvtb.f32.f16 %0, %0" : "=t"(f) : "r"((uint32_t)h));
    return f;
#else
    return fp16_bits_to_f32(h);
#endif
}

float tllm_fp16_to_f32(uint16_t h) { return h2f(h); }

static inline uint16_t load16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#if GGUF_SMLAD
static inline uint32_t load32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint32_t ror8(uint32_t v) { return (v >> 8) | (v << 24); } /* SXTB16's free ROR #8 */
#endif

/* sum(q * x) over one 32-element block of nibbles (q in 0..15). */
static inline int32_t dot_nibbles(const uint8_t *qs, const int8_t *x) {
#if GGUF_SMLAD
    /* Byte i of w holds q[k+i] (low) and q[k+16+i] (high): one AND with
     * 0x000F000F after a shift puts two of them in the int16 lanes SMLAD
     * multiplies with SXTB16's lanes of x (bytes 0 and 2, or 1 and 3). */
    const uint32_t mask = 0x000F000Fu;
    int32_t s = 0;
#pragma GCC unroll 4
    for (int32_t k = 0; k < 16; k += 4) {
        const uint32_t w = load32(qs + k);
        const uint32_t xl = load32(x + k), xh = load32(x + 16 + k);
        uint32_t t, u;
        /* gcc does not fold the shifts into AND / the rotations into SXTB16 */
        __asm__("and %[t], %[m], %[w]\n\t"
                "sxtb16 %[u], %[xl]\n\t"
                "smlad %[s], %[t], %[u], %[s]\n\t"
                "and %[t], %[m], %[w], lsr #8\n\t"
                "sxtb16 %[u], %[xl], ror #8\n\t"
                "smlad %[s], %[t], %[u], %[s]\n\t"
                "and %[t], %[m], %[w], lsr #4\n\t"
                "sxtb16 %[u], %[xh]\n\t"
                "smlad %[s], %[t], %[u], %[s]\n\t"
                "and %[t], %[m], %[w], lsr #12\n\t"
                "sxtb16 %[u], %[xh], ror #8\n\t"
                "smlad %[s], %[t], %[u], %[s]"
                : [s] "+r"(s), [t] "=&r"(t), [u] "=&r"(u)
                : [w] "r"(w), [xl] "r"(xl), [xh] "r"(xh), [m] "r"(mask));
    }
    return s;
#else
    int32_t s = 0;
    for (int32_t j = 0; j < 16; j++) s += (int32_t)(qs[j] & 0xF) * x[j] + (int32_t)(qs[j] >> 4) * x[j + 16];
    return s;
#endif
}

/* sum(q * x) over one 32-element block of int8. */
static inline int32_t dot_i8(const int8_t *q, const int8_t *x) {
#if GGUF_SMLAD
    int32_t s = 0;
#pragma GCC unroll 8
    for (int32_t k = 0; k < 32; k += 4) {
        const uint32_t w = load32(q + k), xv = load32(x + k);
        s = __smlad(__sxtb16(w), __sxtb16(xv), s);
        s = __smlad(__sxtb16(ror8(w)), __sxtb16(ror8(xv)), s);
    }
    return s;
#else
    int32_t s = 0;
    for (int32_t j = 0; j < 32; j++) s += (int32_t)q[j] * x[j];
    return s;
#endif
}

static inline int32_t sum_i8(const int8_t *x) {
    int32_t s = 0;
    for (int32_t j = 0; j < 32; j++) s += x[j];
    return s;
}

static int32_t fill_xsums(const int8_t *xq, int32_t n_blocks, int32_t *xsum) {
    const int32_t kept = n_blocks < XSUM_BLOCKS ? n_blocks : XSUM_BLOCKS;
    for (int32_t b = 0; b < kept; b++) xsum[b] = sum_i8(xq + 32 * b);
    return kept;
}

/* --- the matvecs: two rows per pass ------------------------------------------
 * Two rows share each activation word and its SXTB16 lanes (loaded and
 * extended once for both); per row the block's integer sums and float
 * expression are the one-row loop's, in block order, so every output is the
 * same float either way.  (Four rows would need 17 registers: the sums
 * spill, and the shared work is only the activations' 6 of 15 instructions
 * per 8 weights.)  An odd last row runs alone. */

/* s[i] = sum(q_i * x) over one block of nibbles, for the rows' blocks q0 and q1. */
static inline void dot_nibbles_rows2(const uint8_t *q0, const uint8_t *q1, const int8_t *x, int32_t *s) {
#if GGUF_SMLAD
    const uint32_t mask = 0x000F000Fu;
    int32_t s0 = 0, s1 = 0;
#pragma GCC unroll 4
    for (int32_t k = 0; k < 16; k += 4) {
        uint32_t xl = load32(x + k), xh = load32(x + 16 + k), a0, a2, t;
        const uint32_t w0 = load32(q0 + k), w1 = load32(q1 + k);
        /* One block per 8 weights of both rows: gcc would hoist every SXTB16 of the unrolled loop and spill
         * them. The lanes are dot_nibbles': low nibbles of bytes 0/2 and 1/3, then the high ones; xl and
         * xh become their ROR #8 lanes in place. */
        __asm__("sxtb16 %[a0], %[xl]\n\t"
                "sxtb16 %[xl], %[xl], ror #8\n\t"
                "sxtb16 %[a2], %[xh]\n\t"
                "sxtb16 %[xh], %[xh], ror #8\n\t"
                "and %[t], %[m], %[w0]\n\t"
                "smlad %[s0], %[t], %[a0], %[s0]\n\t"
                "and %[t], %[m], %[w0], lsr #8\n\t"
                "smlad %[s0], %[t], %[xl], %[s0]\n\t"
                "and %[t], %[m], %[w0], lsr #4\n\t"
                "smlad %[s0], %[t], %[a2], %[s0]\n\t"
                "and %[t], %[m], %[w0], lsr #12\n\t"
                "smlad %[s0], %[t], %[xh], %[s0]\n\t"
                "and %[t], %[m], %[w1]\n\t"
                "smlad %[s1], %[t], %[a0], %[s1]\n\t"
                "and %[t], %[m], %[w1], lsr #8\n\t"
                "smlad %[s1], %[t], %[xl], %[s1]\n\t"
                "and %[t], %[m], %[w1], lsr #4\n\t"
                "smlad %[s1], %[t], %[a2], %[s1]\n\t"
                "and %[t], %[m], %[w1], lsr #12\n\t"
                "smlad %[s1], %[t], %[xh], %[s1]"
                : [s0] "+r"(s0), [s1] "+r"(s1), [xl] "+r"(xl), [xh] "+r"(xh), [a0] "=&r"(a0), [a2] "=&r"(a2),
                  [t] "=&r"(t)
                : [w0] "r"(w0), [w1] "r"(w1), [m] "r"(mask));
    }
    s[0] = s0;
    s[1] = s1;
#else
    s[0] = dot_nibbles(q0, x);
    s[1] = dot_nibbles(q1, x);
#endif
}

/* s[i] = sum(q_i * x) over one block of int8, for the rows' blocks q0 and q1. */
static inline void dot_i8_rows2(const int8_t *q0, const int8_t *q1, const int8_t *x, int32_t *s) {
#if GGUF_SMLAD
    int32_t s0 = 0, s1 = 0;
#pragma GCC unroll 8
    for (int32_t k = 0; k < 32; k += 4) {
        const uint32_t xv = load32(x + k);
        const uint32_t a0 = __sxtb16(xv), a1 = __sxtb16(ror8(xv));
        const uint32_t w0 = load32(q0 + k), w1 = load32(q1 + k);
        s0 = __smlad(__sxtb16(w0), a0, s0);
        s0 = __smlad(__sxtb16(ror8(w0)), a1, s0);
        s1 = __smlad(__sxtb16(w1), a0, s1);
        s1 = __smlad(__sxtb16(ror8(w1)), a1, s1);
    }
    s[0] = s0;
    s[1] = s1;
#else
    s[0] = dot_i8(q0, x);
    s[1] = dot_i8(q1, x);
#endif
}

/* One block's float term for one row and token (tllm_kernels_gguf.h's arithmetic), from its scales d (and mn, Q4_1). */
static inline float block_term_dm(int kind, float d, float mn, int32_t isum, int32_t xsum, float sx) {
    if (kind == GGUF_Q80) return (d * sx) * (float)isum;
    if (kind == GGUF_Q40) return (d * sx) * (float)(isum - 8 * xsum);
    float t = (d * sx) * (float)isum;
    return t + (mn * sx) * (float)xsum;
}

static inline float block_term(int kind, const uint8_t *blk, int32_t isum, int32_t xsum, float sx) {
    return block_term_dm(kind, h2f(load16(blk)), kind == GGUF_Q41 ? h2f(load16(blk + 2)) : 0.0f, isum, xsum, sx);
}

static inline __attribute__((always_inline)) void matvec_gguf(int kind, const tllm_gguf_matrix *m, const int8_t *xq,
                                                              const float *xs, const float *bias, float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK;
    const uint32_t bytes = kind == GGUF_Q40 ? Q40_BYTES : kind == GGUF_Q41 ? Q41_BYTES : Q80_BYTES;
    const uint32_t qs_at = kind == GGUF_Q41 ? 4u : 2u;
    const uint32_t row_bytes = (uint32_t)nb * bytes;
    int32_t xsum[XSUM_BLOCKS];
    const int32_t kept = kind == GGUF_Q80 ? 0 : fill_xsums(xq, nb, xsum);
    int32_t r = 0;
    for (; r + 2 <= m->rows; r += 2) {
        const uint8_t *b0 = m->blocks + (uint32_t)r * row_bytes, *b1 = b0 + row_bytes;
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int32_t b = 0; b < nb; b++, b0 += bytes, b1 += bytes) {
            int32_t isum[2];
            const int8_t *x = xq + 32 * b;
            if (kind == GGUF_Q80)
                dot_i8_rows2((const int8_t *)(b0 + qs_at), (const int8_t *)(b1 + qs_at), x, isum);
            else
                dot_nibbles_rows2(b0 + qs_at, b1 + qs_at, x, isum);
            const int32_t s = kind == GGUF_Q80 ? 0 : b < kept ? xsum[b] : sum_i8(x);
            acc0 = acc0 + block_term(kind, b0, isum[0], s, xs[b]);
            acc1 = acc1 + block_term(kind, b1, isum[1], s, xs[b]);
        }
        out[r] = bias ? acc0 + bias[r] : acc0;
        out[r + 1] = bias ? acc1 + bias[r + 1] : acc1;
    }
    if (r < m->rows) { /* the odd last row */
        const uint8_t *blk = m->blocks + (uint32_t)r * row_bytes;
        float acc = 0.0f;
        for (int32_t b = 0; b < nb; b++, blk += bytes) {
            const int8_t *x = xq + 32 * b;
            const int32_t isum = kind == GGUF_Q80 ? dot_i8((const int8_t *)(blk + qs_at), x)
                                                  : dot_nibbles(blk + qs_at, x);
            const int32_t s = kind == GGUF_Q80 ? 0 : b < kept ? xsum[b] : sum_i8(x);
            acc = acc + block_term(kind, blk, isum, s, xs[b]);
        }
        out[r] = bias ? acc + bias[r] : acc;
    }
}

void tllm_embed_q41(const tllm_gguf_matrix *m, int32_t token, float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK;
    const uint8_t *blk = m->blocks + (uint32_t)token * (uint32_t)(nb * Q41_BYTES);
    for (int32_t b = 0; b < nb; b++, blk += Q41_BYTES, out += 32) {
        const float d = h2f(load16(blk)), mn = h2f(load16(blk + 2));
        for (int32_t j = 0; j < 16; j++) {
            out[j] = d * (float)(blk[4 + j] & 0xF) + mn;
            out[j + 16] = d * (float)(blk[4 + j] >> 4) + mn;
        }
    }
}

void tllm_embed_q40(const tllm_gguf_matrix *m, int32_t token, float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK;
    const uint8_t *blk = m->blocks + (uint32_t)token * (uint32_t)(nb * Q40_BYTES);
    for (int32_t b = 0; b < nb; b++, blk += Q40_BYTES, out += 32) {
        const float d = h2f(load16(blk));
        for (int32_t j = 0; j < 16; j++) {
            out[j] = d * (float)((int32_t)(blk[2 + j] & 0xF) - 8);
            out[j + 16] = d * (float)((int32_t)(blk[2 + j] >> 4) - 8);
        }
    }
}

void tllm_embed_q80(const tllm_gguf_matrix *m, int32_t token, float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK;
    const uint8_t *blk = m->blocks + (uint32_t)token * (uint32_t)(nb * Q80_BYTES);
    for (int32_t b = 0; b < nb; b++, blk += Q80_BYTES, out += 32) {
        const float d = h2f(load16(blk));
        for (int32_t j = 0; j < 32; j++) out[j] = d * (float)(int8_t)blk[2 + j];
    }
}

/* --- batched prefill: one weight pass for P tokens (tllm_kernels_gguf.h) ---
 * Per row and block the fp16 scales are converted, and (with SMLAD) the
 * nibbles or int8 weights unpacked into SMLAD lanes, once for the P tokens;
 * per token the block's float expression is the matvec's, in block order. */

/* Per-token sums of the activation blocks kept for the batch: BATCH_XSUMS in
 * all (512 B of stack), so cols / 32 / P blocks per token; beyond them a
 * block's sum is recomputed per row (the same integers). */
#define BATCH_XSUMS 128

/* s[i] = sum(q * x_i) over one block of int8 for two tokens: each weight word's SXTB16 lanes made once. */
static inline void dot_i8_tokens2(const int8_t *q, const int8_t *x0, const int8_t *x1, int32_t *s) {
#if GGUF_SMLAD
    int32_t s0 = 0, s1 = 0;
#pragma GCC unroll 8
    for (int32_t k = 0; k < 32; k += 4) {
        const uint32_t w = load32(q + k), v0 = load32(x0 + k), v1 = load32(x1 + k);
        uint32_t w0, w1, a;
        __asm__("sxtb16 %[w0], %[w]\n\t"
                "sxtb16 %[w1], %[w], ror #8\n\t"
                "sxtb16 %[a], %[v0]\n\t"
                "smlad %[s0], %[w0], %[a], %[s0]\n\t"
                "sxtb16 %[a], %[v0], ror #8\n\t"
                "smlad %[s0], %[w1], %[a], %[s0]\n\t"
                "sxtb16 %[a], %[v1]\n\t"
                "smlad %[s1], %[w0], %[a], %[s1]\n\t"
                "sxtb16 %[a], %[v1], ror #8\n\t"
                "smlad %[s1], %[w1], %[a], %[s1]"
                : [s0] "+r"(s0), [s1] "+r"(s1), [w0] "=&r"(w0), [w1] "=&r"(w1), [a] "=&r"(a)
                : [w] "r"(w), [v0] "r"(v0), [v1] "r"(v1));
    }
    s[0] = s0;
    s[1] = s1;
#else
    s[0] = dot_i8(q, x0);
    s[1] = dot_i8(q, x1);
#endif
}

/* The 2x2 block needs 12 registers for its operands: only an optimizing
 * build can give them (at -O0 gcc finds the constraints impossible), so an
 * unoptimized one takes the plain C, which sums the same integers. */
#if GGUF_SMLAD && defined(__OPTIMIZE__)
#define GGUF_ASM_2X2 1
#else
#define GGUF_ASM_2X2 0
#endif

#if GGUF_ASM_2X2
/* Two lanes (j0 = lane j, j1 = lane j + 1 of dot_nibbles) of two rows' weight words w0 w1 against two tokens'
 * activation words v0 v1: the rows' lanes masked once for both tokens, the tokens' SXTB16 once for both rows. */
#define TLLM_NIBBLE_LANES_2X2(sh0, sh1, xror)                                                                     \
    __asm__("and %[t0], %[m], %[w0]" sh0 "\n\t"                                                                   \
            "and %[t1], %[m], %[w1]" sh0 "\n\t"                                                                   \
            "sxtb16 %[a], %[v0]\n\t"                                                                              \
            "smlad %[s00], %[t0], %[a], %[s00]\n\t"                                                               \
            "smlad %[s10], %[t1], %[a], %[s10]\n\t"                                                               \
            "sxtb16 %[a], %[v1]\n\t"                                                                              \
            "smlad %[s01], %[t0], %[a], %[s01]\n\t"                                                               \
            "smlad %[s11], %[t1], %[a], %[s11]\n\t"                                                               \
            "and %[t0], %[m], %[w0]" sh1 "\n\t"                                                                   \
            "and %[t1], %[m], %[w1]" sh1 "\n\t"                                                                   \
            "sxtb16 %[a], %[v0], ror #8\n\t"                                                                      \
            "smlad %[s00], %[t0], %[a], %[s00]\n\t"                                                               \
            "smlad %[s10], %[t1], %[a], %[s10]\n\t"                                                               \
            "sxtb16 %[a], %[v1], ror #8\n\t"                                                                      \
            "smlad %[s01], %[t0], %[a], %[s01]\n\t"                                                               \
            "smlad %[s11], %[t1], %[a], %[s11]"                                                                   \
            : [s00] "+r"(s00), [s01] "+r"(s01), [s10] "+r"(s10), [s11] "+r"(s11), [t0] "=&r"(t0), [t1] "=&r"(t1), \
              [a] "=&r"(a)                                                                                        \
            : [w0] "r"(w0), [w1] "r"(w1), [v0] "r"(xror##0), [v1] "r"(xror##1), [m] "r"(mask))
#endif

/* s[2 * i + j] = sum(q_i * x_j) over one block of nibbles: two rows' blocks q0 q1 against two tokens' x0 x1. */
static inline void dot_nibbles_2x2(const uint8_t *q0, const uint8_t *q1, const int8_t *x0, const int8_t *x1,
                                   int32_t *s) {
#if GGUF_ASM_2X2
    const uint32_t mask = 0x000F000Fu;
    int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
#pragma GCC unroll 4
    for (int32_t k = 0; k < 16; k += 4) {
        const uint32_t w0 = load32(q0 + k), w1 = load32(q1 + k);
        uint32_t t0, t1, a;
        const uint32_t l0 = load32(x0 + k), l1 = load32(x1 + k);
        TLLM_NIBBLE_LANES_2X2("", ", lsr #8", l);
        const uint32_t h0 = load32(x0 + 16 + k), h1 = load32(x1 + 16 + k);
        TLLM_NIBBLE_LANES_2X2(", lsr #4", ", lsr #12", h);
    }
    s[0] = s00;
    s[1] = s01;
    s[2] = s10;
    s[3] = s11;
#else
    s[0] = dot_nibbles(q0, x0);
    s[1] = dot_nibbles(q0, x1);
    s[2] = dot_nibbles(q1, x0);
    s[3] = dot_nibbles(q1, x1);
#endif
}

/* At most TLLM_MAX_BATCH tokens: out[p * rows + r] = the matvec of token p.
 * Rows outside, tokens inside: a row's blocks are read (from flash, through
 * the cache) once for the P tokens.  The nibble formats take two rows and
 * two tokens per pass over a block (dot_nibbles_2x2), Q8_0 two tokens
 * (dot_i8_tokens2); per row and token the block term is the matvec's
 * (block_term), in block order. */
static inline __attribute__((always_inline)) void matmat_gguf(int kind, const tllm_gguf_matrix *m, const int8_t *xq,
                                                              const float *xs, int32_t P, const float *bias,
                                                              float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK, cols = m->cols;
    const uint32_t bytes = kind == GGUF_Q40 ? Q40_BYTES : kind == GGUF_Q41 ? Q41_BYTES : Q80_BYTES;
    const uint32_t qs_at = kind == GGUF_Q41 ? 4u : 2u, row_bytes = (uint32_t)nb * bytes;
    int32_t xsum[BATCH_XSUMS];
    const int32_t kept = kind == GGUF_Q80 ? 0 : (nb < BATCH_XSUMS / P ? nb : BATCH_XSUMS / P);
    for (int32_t p = 0; p < P; p++)
        for (int32_t b = 0; b < kept; b++) xsum[p * kept + b] = sum_i8(xq + p * cols + 32 * b);
    const int32_t rows2 = kind == GGUF_Q80 ? 1 : 2;  /* rows per pass */
    for (int32_t r = 0; r < m->rows; r += rows2) {
        const int32_t nr = m->rows - r < rows2 ? m->rows - r : rows2;
        float acc[2][TLLM_MAX_BATCH] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        const uint8_t *row0 = m->blocks + (uint32_t)r * row_bytes;
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk[2] = {row0 + (uint32_t)b * bytes, row0 + row_bytes + (uint32_t)b * bytes};
            int32_t isum[2][TLLM_MAX_BATCH];
            for (int32_t p = 0; p < P; p += 2) {
                const int8_t *x0 = xq + p * cols + 32 * b;
                if (kind == GGUF_Q80 && p + 1 < P) {
                    int32_t s2[2];
                    dot_i8_tokens2((const int8_t *)(blk[0] + qs_at), x0, x0 + cols, s2);
                    isum[0][p] = s2[0];
                    isum[0][p + 1] = s2[1];
                } else if (kind != GGUF_Q80 && nr == 2 && p + 1 < P) {
                    int32_t s4[4];
                    dot_nibbles_2x2(blk[0] + qs_at, blk[1] + qs_at, x0, x0 + cols, s4);
                    isum[0][p] = s4[0];
                    isum[0][p + 1] = s4[1];
                    isum[1][p] = s4[2];
                    isum[1][p + 1] = s4[3];
                } else {  /* an odd last row or token */
                    for (int32_t i = 0; i < nr; i++)
                        for (int32_t q = p; q < P && q < p + 2; q++) {
                            const int8_t *x = xq + q * cols + 32 * b;
                            isum[i][q] = kind == GGUF_Q80 ? dot_i8((const int8_t *)(blk[i] + qs_at), x)
                                                          : dot_nibbles(blk[i] + qs_at, x);
                        }
                }
            }
            for (int32_t i = 0; i < nr; i++) {
                const float d = h2f(load16(blk[i])), mn = kind == GGUF_Q41 ? h2f(load16(blk[i] + 2)) : 0.0f;
                for (int32_t p = 0; p < P; p++) {
                    const int8_t *x = xq + p * cols + 32 * b;
                    const int32_t s = kind == GGUF_Q80 ? 0 : b < kept ? xsum[p * kept + b] : sum_i8(x);
                    acc[i][p] = acc[i][p] + block_term_dm(kind, d, mn, isum[i][p], s, xs[p * nb + b]);
                }
            }
        }
        for (int32_t i = 0; i < nr; i++)
            for (int32_t p = 0; p < P; p++)
                out[p * m->rows + r + i] = bias ? acc[i][p] + bias[r + i] : acc[i][p];
    }
}

static inline __attribute__((always_inline)) void matmat_batches(int kind, const tllm_gguf_matrix *m, const int8_t *xq,
                                                                 const float *xs, int32_t P,
                           const float *bias, float *out) {
    const int32_t nb = m->cols / TLLM_GGUF_BLOCK;
    for (int32_t p0 = 0; p0 < P; p0 += TLLM_MAX_BATCH) {
        const int32_t n = P - p0 < TLLM_MAX_BATCH ? P - p0 : TLLM_MAX_BATCH;
        matmat_gguf(kind, m, xq + p0 * m->cols, xs + p0 * nb, n, bias, out + p0 * m->rows);
    }
}

typedef void (*gguf_matvec_fn)(const tllm_gguf_matrix *, const int8_t *, const float *, const float *, float *);

static int32_t argmax_chunked(gguf_matvec_fn mv, uint32_t block_bytes, const tllm_gguf_matrix *m, const int8_t *xq,
                              const float *xs, const float *bias, float *chunk, int32_t chunk_rows) {
    const uint32_t row_bytes = (uint32_t)(m->cols / TLLM_GGUF_BLOCK) * block_bytes;
    int32_t best = 0;
    float best_v = 0.0f;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_gguf_matrix part = {m->blocks + (uint32_t)r0 * row_bytes, (uint16_t)n, m->cols};
        mv(&part, xq, xs, bias ? bias + r0 : 0, chunk);
        argmax_chunk(chunk, n, r0, &best, &best_v);
    }
    return best;
}

/* Each format's matvec, batched matmat and greedy classifier: the loops
 * above at its kind (and block size). */
#define TLLM_GGUF_KERNELS(q, kind, block_bytes)                                                                    \
    void tllm_matvec_##q(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias,          \
                         float *out) {                                                                             \
        matvec_gguf(kind, m, xq, xs, bias, out);                                                                   \
    }                                                                                                              \
    void tllm_matmat_##q(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias, \
                         float *out) {                                                                             \
        matmat_batches(kind, m, xq, xs, P, bias, out);                                                             \
    }                                                                                                              \
    int32_t tllm_argmax_##q(const tllm_gguf_matrix *m, const int8_t *xq, const float *xs, const float *bias,       \
                            float *chunk, int32_t chunk_rows) {                                                    \
        return argmax_chunked(tllm_matvec_##q, block_bytes, m, xq, xs, bias, chunk, chunk_rows);                  \
    }
TLLM_GGUF_KERNELS(q40, GGUF_Q40, Q40_BYTES)
TLLM_GGUF_KERNELS(q41, GGUF_Q41, Q41_BYTES)
TLLM_GGUF_KERNELS(q80, GGUF_Q80, Q80_BYTES)
