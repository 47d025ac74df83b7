/* Portable C kernels: see tllm_kernels.h. Twins in codegen/exact.py. */
#include "tllm_kernels.h"
#include "tllm_math.h"

#include <math.h>
#include <string.h>

float tllm_expf(float x) { return exp_poly(x); }

void tllm_embed_q4(const tllm_q4_matrix *m, int32_t token, float *out) {
    const int32_t cols = m->cols, group = m->group;
    const int32_t n_groups = (cols + group - 1) / group;
    const uint8_t *row = m->packed + (uint32_t)token * (uint32_t)((cols + 1) / 2);
    const float *s = m->scales + (uint32_t)token * (uint32_t)n_groups;
    for (int32_t i = 0; i < cols; i++) {
        uint8_t b = row[i >> 1];
        int32_t nib = (i & 1) ? (b >> 4) : (b & 0xF);
        int32_t q = nib > 7 ? nib - 16 : nib;
        out[i] = (float)q * s[i / group];
    }
}

void tllm_rmsnorm(const float *x, const float *w, int32_t n, float eps, float *out) {
    const float r = rms_inverse(x, n, eps);
    for (int32_t i = 0; i < n; i++) out[i] = (x[i] * r) * w[i];
}

static inline void quantize_i8(const float *x, int32_t n, int32_t group, int8_t *q,
                                                              float *scales) {
    for (int32_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        const int32_t g1 = g0 + group < n ? g0 + group : n;
        float amax = 0.0f;
        for (int32_t i = g0; i < g1; i++) {
            amax = fmaxf(amax, fabsf(x[i])); /* one VMAXNM on the M7 */
        }
        if (amax >= TLLM_AMAX_MIN) {
            scales[gi] = amax / 127.0f;
            const float inv = 127.0f / amax;
            for (int32_t i = g0; i < g1; i++) {
                int32_t v = round_half_away(x[i] * inv);
                q[i] = (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
            }
        } else {
            scales[gi] = 0.0f;
            memset(q + g0, 0, (size_t)(g1 - g0));
        }
    }
}

void tllm_quantize_i8(const float *x, int32_t n, int32_t group, int8_t *q, float *scales) {
    quantize_i8(x, n, group, q, scales);
}

void tllm_matvec_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *out) {
    const int32_t cols = m->cols, group = m->group;
    const int32_t n_groups = (cols + group - 1) / group;
    const uint32_t row_bytes = (uint32_t)((cols + 1) / 2);
    for (int32_t r = 0; r < m->rows; r++) {
        const uint8_t *row = m->packed + (uint32_t)r * row_bytes;
        const float *ws = m->scales + (uint32_t)r * (uint32_t)n_groups;
        float acc = 0.0f;
        for (int32_t g = 0; g < n_groups; g++) {
            const int32_t g0 = g * group;
            const int32_t g1 = g0 + group < cols ? g0 + group : cols;
            int32_t isum = 0;
            for (int32_t i = g0; i < g1; i++) {
                const uint8_t b = row[i >> 1];
                const int32_t nib = (i & 1) ? (b >> 4) : (b & 0xF);
                isum += (nib > 7 ? nib - 16 : nib) * (int32_t)xq[i];
            }
            acc = acc + ((float)isum * ws[g]) * xs[g];
        }
        if (bias) acc = acc + bias[r];
        out[r] = acc;
    }
}

void tllm_matmat_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, int32_t P, const float *bias,
                    float *out) {
    const int32_t cols = m->cols, group = m->group, rows = m->rows;
    const int32_t n_groups = (cols + group - 1) / group;
    const uint32_t row_bytes = (uint32_t)((cols + 1) / 2);
    int8_t w[256]; /* one group of the row, unpacked once for the tokens (group <= 256) */
    for (int32_t r = 0; r < rows; r++) {
        const uint8_t *row = m->packed + (uint32_t)r * row_bytes;
        const float *ws = m->scales + (uint32_t)r * (uint32_t)n_groups;
        for (int32_t p0 = 0; p0 < P; p0 += TLLM_MAX_BATCH) { /* TLLM_MAX_BATCH tokens at a time */
            const int32_t np = P - p0 < TLLM_MAX_BATCH ? P - p0 : TLLM_MAX_BATCH;
            float acc[TLLM_MAX_BATCH] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int32_t g = 0; g < n_groups; g++) {
                const int32_t g0 = g * group;
                const int32_t g1 = g0 + group < cols ? g0 + group : cols;
                for (int32_t i = g0; i < g1; i++) {
                    const uint8_t b = row[i >> 1];
                    const int32_t nib = (i & 1) ? (b >> 4) : (b & 0xF);
                    w[i - g0] = (int8_t)(nib > 7 ? nib - 16 : nib);
                }
                for (int32_t p = 0; p < np; p++) {
                    const int8_t *x = xq + (p0 + p) * cols + g0;
                    int32_t isum = 0;
                    for (int32_t i = 0; i < g1 - g0; i++) isum += (int32_t)w[i] * (int32_t)x[i];
                    acc[p] = acc[p] + ((float)isum * ws[g]) * xs[(p0 + p) * n_groups + g];
                }
            }
            for (int32_t p = 0; p < np; p++) out[(p0 + p) * rows + r] = bias ? acc[p] + bias[r] : acc[p];
        }
    }
}

void tllm_rope(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin) {
    const int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            const float a = v[i], b = v[i + half];
            v[i] = a * cos[i] - b * sin[i];
            v[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

static inline __attribute__((always_inline)) void softmax_inline(float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float total = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        x[i] = exp_poly(x[i] - m);
        total += x[i];
    }
    for (int32_t i = 0; i < n; i++) x[i] = x[i] / total;
}

void tllm_softmax(float *x, int32_t n) { softmax_inline(x, n); }

/* ---- attention over the int8 KV cache (twin: exact.attention_i8) ----
 * Three passes per head over positions 0..pos:
 *   1. scores r[t] = (float)(q8 . k8[t]) * ks[t]: exact int32 dot products
 *      (SMLAD on DSP targets), their maximum and the largest value scale;
 *   2. softmax with the value scales folded in, as integer weights
 *      w[t] = round((2^((r[t] - m) * cl) * vs[t]) * W / vs_max) in [0, W];
 *   3. the value sum, exact int32 (SMLAxB on DSP targets), times one float
 *      factor per head.  Only pass 2 is float work per position. */
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>

/* SXTB16 of x rotated right by 8 (bytes 1 and 3 as int16 lanes) in one
 * instruction; gcc 12 spends a separate ROR on the C spelling. */
static inline uint32_t sxtb16_ror8(uint32_t x) {
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}

static inline uint32_t load_u32(const void *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}
#endif

/* Largest integer softmax weight: 15 bits, fewer past 516 keys so that
 * n_keys * W * 127 fits the int32 value sums. Twin: exact.attention_weight_limit. */
static inline int32_t attention_weight_limit(int32_t n_keys) {
    const int32_t w = INT32_MAX / (127 * n_keys);
    return w < 32767 ? w : 32767;
}

#define ATTENTION_VS_MIN 0x1p-100f /* below: every value of the head is ~0, output 0 */

/* Pass 1.  k/ks/vs point at this kv head's first row/scale; rows are
 * `stride` bytes apart, scales `n_kv` floats apart. Returns max r.  Not
 * inlined (nor are the other passes' loops): alone, each loop keeps its
 * operands in registers; inlined into the caller they spill. */
__attribute__((noinline)) static float tllm_attention_scores_i8(const int8_t *q8, int32_t hd, const int8_t *k,
                                                                int32_t stride, const float *ks, const float *vs,
                                                                int32_t n_kv, int32_t n, float *scores,
                                                                float *vs_max_out) {
    float m = -3.4028235e38f, vs_max = 0.0f;
#if defined(__ARM_FEATURE_DSP)
    if (hd == 8) { /* stories260K's head: q as four int16-pair registers, no inner loop */
        const uint32_t qa = load_u32(q8), qb = load_u32(q8 + 4);
        const uint32_t q0 = __sxtb16(qa), q1 = sxtb16_ror8(qa), q2 = __sxtb16(qb), q3 = sxtb16_ror8(qb);
        for (float *end = scores + n; scores != end; k += stride, ks += n_kv, vs += n_kv) {
            const uint32_t k0 = load_u32(k), k1 = load_u32(k + 4);
            int32_t dot = __smuad(q0, __sxtb16(k0));
            dot = __smlad(q1, sxtb16_ror8(k0), dot);
            dot = __smlad(q2, __sxtb16(k1), dot);
            dot = __smlad(q3, sxtb16_ror8(k1), dot);
            const float r = (float)dot * *ks;
            *scores++ = r;
            m = fmaxf(m, r);
            vs_max = fmaxf(vs_max, *vs);
        }
        *vs_max_out = vs_max;
        return m;
    }
    if ((hd & 3) == 0) {
        uint32_t q_pairs[TLLM_MAX_HEAD_DIM / 2]; /* lanes (q0,q2) and (q1,q3), as SXTB16 splits k */
        for (int32_t j = 0; j < hd / 4; j++) {
            const uint32_t qw = load_u32(q8 + 4 * j);
            q_pairs[2 * j] = __sxtb16(qw);
            q_pairs[2 * j + 1] = sxtb16_ror8(qw);
        }
        for (int32_t t = 0; t < n; t++, k += stride, ks += n_kv, vs += n_kv) {
            int32_t dot = 0;
            for (int32_t j = 0; j < hd / 4; j++) {
                const uint32_t kw = load_u32(k + 4 * j);
                dot = __smlad(q_pairs[2 * j], __sxtb16(kw), dot);
                dot = __smlad(q_pairs[2 * j + 1], sxtb16_ror8(kw), dot);
            }
            const float r = (float)dot * *ks;
            scores[t] = r;
            m = fmaxf(m, r);
            vs_max = fmaxf(vs_max, *vs);
        }
        *vs_max_out = vs_max;
        return m;
    }
#endif
    for (int32_t t = 0; t < n; t++, k += stride, ks += n_kv, vs += n_kv) {
        int32_t dot = 0;
        for (int32_t i = 0; i < hd; i++) dot += (int32_t)q8[i] * (int32_t)k[i];
        const float r = (float)dot * *ks;
        scores[t] = r;
        m = fmaxf(m, r);
        vs_max = fmaxf(vs_max, *vs);
    }
    *vs_max_out = vs_max;
    return m;
}

/* Pass 3: acc[i] = sum_t w[t] * v[t*stride + i], exact int32 (w in [0, W]).
 * w is read with memcpy: its storage is the float scores scratch. */
__attribute__((noinline)) static void tllm_attention_values_i8(const void *w_bytes, const int8_t *v,
                                                                int32_t stride, int32_t n, int32_t hd,
                                                                int32_t *acc) {
    const int32_t *w = (const int32_t *)w_bytes;
    int32_t i = 0;
#if defined(__ARM_FEATURE_DSP)
    if (hd == 8) { /* all eight columns in one pass: each weight loaded once */
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
        const int8_t *vi = v;
        for (const int32_t *wp = w, *end = w + n; wp != end; wp++, vi += stride) {
            int32_t wt;
            memcpy(&wt, wp, 4);
            uint32_t vw = load_u32(vi), even = __sxtb16(vw), odd = sxtb16_ror8(vw);
            a0 = __smlabb(wt, even, a0);
            a2 = __smlabt(wt, even, a2);
            a1 = __smlabb(wt, odd, a1);
            a3 = __smlabt(wt, odd, a3);
            vw = load_u32(vi + 4);
            even = __sxtb16(vw);
            odd = sxtb16_ror8(vw);
            a4 = __smlabb(wt, even, a4);
            a6 = __smlabt(wt, even, a6);
            a5 = __smlabb(wt, odd, a5);
            a7 = __smlabt(wt, odd, a7);
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
        acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
        return;
    }
    /* four columns per pass: one word of v, two SXTB16 (lanes (0,2) and
     * (1,3)), four SMLAxB with the weight in the bottom halfword */
    for (; i + 4 <= hd; i += 4) {
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        const int8_t *vi = v + i;
        for (const int32_t *wp = w, *end = w + n; wp != end; wp++, vi += stride) {
            int32_t wt;
            memcpy(&wt, wp, 4);
            const uint32_t vw = load_u32(vi);
            const uint32_t even = __sxtb16(vw), odd = sxtb16_ror8(vw);
            a0 = __smlabb(wt, even, a0);
            a2 = __smlabt(wt, even, a2);
            a1 = __smlabb(wt, odd, a1);
            a3 = __smlabt(wt, odd, a3);
        }
        acc[i] = a0;
        acc[i + 1] = a1;
        acc[i + 2] = a2;
        acc[i + 3] = a3;
    }
#endif
    for (; i < hd; i++) {
        int32_t a = 0;
        for (int32_t t = 0; t < n; t++) {
            int32_t wt;
            memcpy(&wt, w + t, 4);
            a += wt * (int32_t)v[t * stride + i];
        }
        acc[i] = a;
    }
}

void tllm_attention_i8(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                       const tllm_kv_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads;
    const int32_t kv_dim = n_kv * hd, group = shape->n_heads / n_kv, n = pos + 1;
    const int32_t w_limit = attention_weight_limit(n);
    int32_t acc[TLLM_MAX_HEAD_DIM];
    /* This position's K and V, one int8 row and scale per kv head. */
    for (int32_t kh = 0; kh < n_kv; kh++) {
        tllm_quantize_i8(k + kh * hd, hd, hd, kv->k + pos * kv_dim + kh * hd, kv->k_scale + pos * n_kv + kh);
        tllm_quantize_i8(v + kh * hd, hd, hd, kv->v + pos * kv_dim + kh * hd, kv->v_scale + pos * n_kv + kh);
    }
    for (int32_t h = 0; h < shape->n_heads; h++) {
        const int32_t kh = h / group;
        const float *vs = kv->v_scale + kh;
        float qs = 0.0f, vs_max = 0.0f;
        tllm_quantize_i8(q + h * hd, hd, hd, q8, &qs);
        /* q's scale and 1/sqrt(hd) join log2(e) in one factor applied after
         * the maximum (all are >= 0, so the maximum is the same) */
        const float m = tllm_attention_scores_i8(q8, hd, kv->k + kh * hd, kv_dim, kv->k_scale + kh, vs, n_kv, n, scores,
                                         &vs_max);
        const float cl = (qs * shape->scale) * EXP_LOG2E;
        const float inv = vs_max >= ATTENTION_VS_MIN ? (float)w_limit / vs_max : 0.0f;
        /* Pass 2. e <= 1 and vs <= vs_max, so w <= W: the products'
         * roundings stay far below the half that would round up past it. */
        float total = 0.0f;
        for (int32_t t = 0; t < n; t++) {
            const float e = exp2_nonpos((scores[t] - m) * cl);
            total += e;
            const int32_t wt = round_half_away((e * vs[t * n_kv]) * inv);
            memcpy(&scores[t], &wt, 4); /* the weight replaces its score in place */
        }
        tllm_attention_values_i8(scores, kv->v + kh * hd, kv_dim, n, hd, acc);
        const float out_k = vs_max >= ATTENTION_VS_MIN ? 1.0f / (inv * total) : 0.0f;
        float *o = out + h * hd;
        for (int32_t i = 0; i < hd; i++) o[i] = (float)acc[i] * out_k;
    }
}

/* Greedy-only builds: the classifier in chunks of chunk_rows rows, keeping
 * the first maximum exactly as tllm_argmax does over the whole vector (the
 * logits are the same floats, compared in the same order). */
int32_t tllm_argmax_q4(const tllm_q4_matrix *m, const int8_t *xq, const float *xs, const float *bias, float *chunk,
                       int32_t chunk_rows) {
    const int32_t row_bytes = (m->cols + 1) / 2, n_groups = (m->cols + m->group - 1) / m->group;
    int32_t best = 0;
    float best_v = 0.0f;
    for (int32_t r0 = 0; r0 < m->rows; r0 += chunk_rows) {
        const int32_t n = m->rows - r0 < chunk_rows ? m->rows - r0 : chunk_rows;
        const tllm_q4_matrix part = {m->packed + r0 * row_bytes, m->scales + r0 * n_groups, (uint16_t)n, m->cols,
                                     m->group};
        tllm_matvec_q4(&part, xq, xs, bias ? bias + r0 : 0, chunk);
        argmax_chunk(chunk, n, r0, &best, &best_v);
    }
    return best;
}

void tllm_add(float *a, const float *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) a[i] = a[i] + b[i];
}

void tllm_silu_mul(float *gate, const float *up, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = (g / (1.0f + exp_poly(-g))) * up[i];
    }
}

/* ---- int4 KV cache (twins: exact.quantize_rows_i4, exact.attention_kv4) ---- */

static inline int32_t nibble_at(const uint8_t *row, int32_t i) {
    const int32_t nib = (i & 1) ? (row[i >> 1] >> 4) : (row[i >> 1] & 0xF);
    return nib > 7 ? nib - 16 : nib;
}

void tllm_quantize_i4(const float *x, int32_t n, int32_t group, uint8_t *packed, float *scales) {
    for (int32_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        const int32_t g1 = g0 + group;
        float amax = 0.0f;
        for (int32_t i = g0; i < g1; i++) {
            amax = fmaxf(amax, fabsf(x[i])); /* one VMAXNM on the M7 */
        }
        const int quantized = amax >= TLLM_AMAX_MIN;
        const float inv = quantized ? 7.0f / amax : 0.0f;
        scales[gi] = quantized ? amax / 7.0f : 0.0f;
        for (int32_t i = g0; i < g1; i++) {
            int32_t v = quantized ? round_half_away(x[i] * inv) : 0;
            v = v > 7 ? 7 : (v < -7 ? -7 : v);
            /* elements arrive in ascending order: the low nibble starts a byte */
            if (i & 1) packed[i >> 1] = (uint8_t)(packed[i >> 1] | ((uint32_t)(v & 0xF) << 4));
            else packed[i >> 1] = (uint8_t)(v & 0xF);
        }
    }
}

/* The rotated int4 keys' quantizer (tllm_attention_kv4_hadamard,
 * tllm_kv_shift_kv4_hadamard): per group, tllm_quantize_i4's scale with
 * max|x| clipped to each ratio of TLLM_KV4_K_CLIPS in turn, keeping the one
 * whose squared error sum_i ((float)q[i] * scale - x[i])^2 (float, i
 * ascending) is smallest, the first on a tie (ratio 1 is tllm_quantize_i4's
 * own scale).  A clipped group saturates its one or two largest elements at
 * +-7 and rounds the rest finer: measured on SmolLM2 it takes the int4 cache
 * from +9.34% to +6.69% perplexity over float (docs/numerics.md).  Twin:
 * exact.quantize_rows_i4_clip. */
static const float TLLM_KV4_K_CLIPS[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f};

static inline int32_t quantize_i4_value(float x, float inv) {
    const int32_t v = round_half_away(x * inv);
    return v > 7 ? 7 : (v < -7 ? -7 : v);
}

void tllm_quantize_i4_clip(const float *x, int32_t n, int32_t group, uint8_t *packed, float *scales) {
    for (int32_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        const int32_t g1 = g0 + group;
        float amax = 0.0f;
        for (int32_t i = g0; i < g1; i++) amax = fmaxf(amax, fabsf(x[i]));
        float best_err = 0.0f, best_inv = 0.0f, best_scale = 0.0f;
        for (int32_t c = 0; c < (int32_t)(sizeof TLLM_KV4_K_CLIPS / sizeof TLLM_KV4_K_CLIPS[0]); c++) {
            const float a = amax * TLLM_KV4_K_CLIPS[c];
            const int quantized = a >= TLLM_AMAX_MIN;
            const float inv = quantized ? 7.0f / a : 0.0f, scale = quantized ? a / 7.0f : 0.0f;
            float err = 0.0f;
            for (int32_t i = g0; i < g1; i++) {
                const float d = (float)quantize_i4_value(x[i], inv) * scale - x[i];
                err += d * d;
            }
            if (c == 0 || err < best_err) best_err = err, best_inv = inv, best_scale = scale;
        }
        scales[gi] = best_scale;
        for (int32_t i = g0; i < g1; i++) {
            const int32_t v = quantize_i4_value(x[i], best_inv);
            if (i & 1) packed[i >> 1] = (uint8_t)(packed[i >> 1] | ((uint32_t)(v & 0xF) << 4));
            else packed[i >> 1] = (uint8_t)(v & 0xF);
        }
    }
}

#if defined(__ARM_FEATURE_DSP)
/* Eight int4 elements of a packed word (element 2j in the low nibble of byte
 * j) as four int16-pair registers, each lane 16x its element: a nibble moved
 * to the top of its byte is sign-extended by SXTB16 for free. */
typedef struct {
    uint32_t e04, e26, e15, e37; /* lanes (e0,e4) (e2,e6) (e1,e5) (e3,e7) */
} nibbles_x16;

static inline nibbles_x16 unpack_nibbles_x16(uint32_t w) {
    const uint32_t even = (w << 4) & 0xF0F0F0F0u, odd = w & 0xF0F0F0F0u;
    const nibbles_x16 e = {__sxtb16(even), sxtb16_ror8(even), __sxtb16(odd), sxtb16_ror8(odd)};
    return e;
}

static inline uint32_t pack_i16(int32_t lo, int32_t hi) {
    return (uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16);
}
#endif

/* Pass 1 over the int4 cache: r[t] = sum_g (float)dot_g * ks[t][g], g
 * ascending from the first term. k/ks point at this kv head's first
 * row/scale of position 0. Returns max r. */
__attribute__((noinline)) static float tllm_attention_scores_kv4(const int8_t *q8, int32_t hd, int32_t group,
                                                                const uint8_t *k, int32_t pos_bytes,
                                                                const float *ks, int32_t pos_scales, int32_t n,
                                                                float *scores) {
    const int32_t ng = hd / group;
    float m = -3.4028235e38f;
#if defined(__ARM_FEATURE_DSP)
    if ((group & 7) == 0) {
        uint32_t qp[TLLM_MAX_HEAD_DIM / 2]; /* q in the lanes unpack_nibbles_x16 produces */
        for (int32_t j = 0; j < hd / 8; j++) {
            const int8_t *qj = q8 + 8 * j;
            qp[4 * j] = pack_i16(qj[0], qj[4]);
            qp[4 * j + 1] = pack_i16(qj[2], qj[6]);
            qp[4 * j + 2] = pack_i16(qj[1], qj[5]);
            qp[4 * j + 3] = pack_i16(qj[3], qj[7]);
        }
        if (hd == 8) { /* stories260K's head: one word per row, q in registers */
            const uint32_t q0 = qp[0], q1 = qp[1], q2 = qp[2], q3 = qp[3];
            for (float *end = scores + n; scores != end; k += pos_bytes, ks += pos_scales) {
                const nibbles_x16 e = unpack_nibbles_x16(load_u32(k));
                int32_t dot16 = __smuad(q0, e.e04);
                dot16 = __smlad(q1, e.e26, dot16);
                dot16 = __smlad(q2, e.e15, dot16);
                dot16 = __smlad(q3, e.e37, dot16);
                const float r = (float)(dot16 >> 4) * *ks; /* lanes were 16x: exact */
                *scores++ = r;
                m = fmaxf(m, r);
            }
            return m;
        }
        const int32_t words = group / 8;
        for (int32_t t = 0; t < n; t++, k += pos_bytes, ks += pos_scales) {
            const uint8_t *kw = k;
            const uint32_t *qw = qp;
            float r = 0.0f;
            for (int32_t g = 0; g < ng; g++) {
                int32_t dot16 = 0;
                for (int32_t j = 0; j < words; j++, kw += 4, qw += 4) {
                    const nibbles_x16 e = unpack_nibbles_x16(load_u32(kw));
                    dot16 = __smlad(qw[0], e.e04, dot16);
                    dot16 = __smlad(qw[1], e.e26, dot16);
                    dot16 = __smlad(qw[2], e.e15, dot16);
                    dot16 = __smlad(qw[3], e.e37, dot16);
                }
                const float term = (float)(dot16 >> 4) * ks[g];
                r = g == 0 ? term : r + term;
            }
            scores[t] = r;
            m = fmaxf(m, r);
        }
        return m;
    }
#endif
    for (int32_t t = 0; t < n; t++, k += pos_bytes, ks += pos_scales) {
        float r = 0.0f;
        for (int32_t g = 0; g < ng; g++) {
            int32_t dot = 0;
            for (int32_t i = g * group; i < (g + 1) * group; i++) dot += (int32_t)q8[i] * nibble_at(k, i);
            const float term = (float)dot * ks[g];
            r = g == 0 ? term : r + term;
        }
        scores[t] = r;
        m = fmaxf(m, r);
    }
    return m;
}

/* Pass 3 over one value group of the int4 cache: acc[i] = sum_t w[t] *
 * v4[t][i] for the group's `cols` elements, exact int32, where w[t] is
 * either stored (vs == NULL: ints in the scores scratch) or made here from
 * e[t]: round((e[t] * vs[t]) * inv), the same expression pass 2 uses. v
 * points at the group's first byte of position 0 (cols is even when the
 * group starts mid-row: groups divide head_dim, which is even). */
__attribute__((noinline)) static void tllm_attention_values_kv4(const float *e, const float *vs, int32_t vs_stride,
                                                                float inv, const uint8_t *v, int32_t pos_bytes,
                                                                int32_t n, int32_t first, int32_t cols,
                                                                int32_t *acc) {
#if defined(__ARM_FEATURE_DSP)
    if ((cols & 7) == 0 && (first & 7) == 0) {
/* eight int16 MACs of weight wt with the eight nibbles of word vw (16x) */
#define TLLM_MAC_NIBBLES_X16(wt, vw)                                        \
    do {                                                                    \
        const nibbles_x16 x = unpack_nibbles_x16(vw);                       \
        a0 = __smlabb(wt, x.e04, a0), a4 = __smlabt(wt, x.e04, a4);         \
        a2 = __smlabb(wt, x.e26, a2), a6 = __smlabt(wt, x.e26, a6);         \
        a1 = __smlabb(wt, x.e15, a1), a5 = __smlabt(wt, x.e15, a5);         \
        a3 = __smlabb(wt, x.e37, a3), a7 = __smlabt(wt, x.e37, a7);         \
    } while (0)
        for (int32_t c0 = 0; c0 < cols; c0 += 8) {
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
            const uint8_t *vw = v + c0 / 2;
            if (!vs) { /* stored weights: the loop stays in registers */
                for (const float *ep = e, *end = e + n; ep != end; ep++, vw += pos_bytes) {
                    int32_t wt;
                    memcpy(&wt, ep, 4);
                    TLLM_MAC_NIBBLES_X16(wt, load_u32(vw));
                }
            } else {
                for (int32_t t = 0; t < n; t++, vw += pos_bytes) {
                    const int32_t wt = round_half_away((e[t] * vs[t * vs_stride]) * inv);
                    TLLM_MAC_NIBBLES_X16(wt, load_u32(vw));
                }
            }
            int32_t *o = acc + c0; /* the lanes were 16x: exact shifts */
            o[0] = a0 >> 4, o[1] = a1 >> 4, o[2] = a2 >> 4, o[3] = a3 >> 4;
            o[4] = a4 >> 4, o[5] = a5 >> 4, o[6] = a6 >> 4, o[7] = a7 >> 4;
        }
#undef TLLM_MAC_NIBBLES_X16
        return;
    }
#endif
    (void)first;
    for (int32_t c = 0; c < cols; c++) acc[c] = 0;
    for (int32_t t = 0; t < n; t++) {
        int32_t wt;
        if (vs) wt = round_half_away((e[t] * vs[t * vs_stride]) * inv);
        else memcpy(&wt, e + t, 4);
        const uint8_t *row = v + t * pos_bytes;
        for (int32_t c = 0; c < cols; c++) acc[c] += wt * nibble_at(row, (first & 1) + c);
    }
}

/* Walsh-Hadamard transform of each head, in place and unnormalised: the
 * butterflies (a, b) -> (a + b, a - b) at distances 1, 2, 4 .. head_dim/2
 * (head_dim a power of two), j ascending within each stage; one float add
 * or subtract per element per stage, so the twin's vectorised stages give
 * the same bits.  H is symmetric and H * H = head_dim * I: applying it twice
 * gives head_dim * x (exact while no rounding occurs, e.g. small integers),
 * so a KV shift can undo a rotation (then divide by head_dim, a power of
 * two) and redo it.  (Hq).(Hk) = head_dim * q.k: attention over rotated
 * queries and keys divides its scale by head_dim.
 * Twin: exact.hadamard_heads. */
void tllm_hadamard_heads(float *x, int32_t n_heads, int32_t head_dim) {
    for (int32_t h = 0; h < n_heads; h++, x += head_dim) {
        for (int32_t len = 1; len < head_dim; len <<= 1) {
            for (int32_t i = 0; i < head_dim; i += 2 * len) {
                for (int32_t j = i; j < i + len; j++) {
                    const float a = x[j], b = x[j + len];
                    x[j] = a + b;
                    x[j + len] = a - b;
                }
            }
        }
    }
}

/* Passes 2 and 3 over one head's int4 values (tllm_attention_kv4 and
 * tllm_attention_k8v4 alike): scores[0..n) holds pass 1's r, m their maximum,
 * cl = (q scale * attention scale) * log2(e).  vs/vrow: this kv head's first
 * value scale/byte of position 0, pos_scales/pos_bytes apart.  vs_max_one:
 * the maximum value scale when pass 1 found it already (one value group);
 * negative: found here.  Inlined so that each caller keeps its own registers. */
static inline __attribute__((always_inline)) void attend_values_kv4(float *scores, float m, float cl, const float *vs,
                                                                    int32_t pos_scales, float vs_max_one,
                                                                    const uint8_t *vrow, int32_t pos_bytes, int32_t n,
                                                                    int32_t group, int32_t ng, int32_t w_limit,
                                                                    float *o) {
    int32_t acc[TLLM_MAX_HEAD_DIM];
    /* Pass 2 as tllm_attention_i8; with one value group the weights
     * replace the scores in place, with several each group makes its own
     * from e in pass 3. */
    float inv[TLLM_MAX_HEAD_DIM], total = 0.0f;
    for (int32_t g = 0; g < ng; g++) {
        float vs_max = 0.0f;
        if (ng == 1 && vs_max_one >= 0.0f) vs_max = vs_max_one;
        else for (int32_t t = 0; t < n; t++) vs_max = fmaxf(vs_max, vs[t * pos_scales + g]);
        inv[g] = vs_max >= ATTENTION_VS_MIN ? (float)w_limit / vs_max : 0.0f;
    }
    if (ng == 1) {
        for (int32_t t = 0; t < n; t++) {
            const float e = exp2_nonpos((scores[t] - m) * cl);
            total += e;
            const int32_t wt = round_half_away((e * vs[t * pos_scales]) * inv[0]);
            memcpy(&scores[t], &wt, 4);
        }
    } else {
        for (int32_t t = 0; t < n; t++) {
            const float e = exp2_nonpos((scores[t] - m) * cl);
            total += e;
            scores[t] = e;
        }
    }
    for (int32_t g = 0; g < ng; g++) {
        tllm_attention_values_kv4(scores, ng == 1 ? NULL : vs + g, pos_scales, inv[g], vrow + g * group / 2,
                                  pos_bytes, n, g * group, group, acc);
        const float out_k = inv[g] > 0.0f ? 1.0f / (inv[g] * total) : 0.0f;
        for (int32_t c = 0; c < group; c++) o[g * group + c] = (float)acc[c] * out_k;
    }
}

/* The int4 attention; with `rotate` each kv head's k and each head's q are
 * Hadamard-rotated (tllm_hadamard_heads) before they are quantized, in the
 * output buffer (k before any head's output is written, q in its own head's
 * slot, which only that head's output overwrites later), and the scale is
 * divided by head_dim (a power of two: exact). */
static void attention_kv4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                          const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out,
                          int rotate) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads, group = kv->group;
    const int32_t ng = hd / group, row_bytes = hd / 2, n = pos + 1;
    const int32_t pos_bytes = n_kv * row_bytes, pos_scales = n_kv * ng, heads_per_kv = shape->n_heads / n_kv;
    const int32_t w_limit = attention_weight_limit(n);
    const float scale = rotate ? shape->scale / (float)hd : shape->scale;
    for (int32_t kh = 0; kh < n_kv; kh++) {
        const float *kr = k + kh * hd, *vr = v + kh * hd;
        if (rotate) {
            memcpy(out, kr, (size_t)hd * sizeof(float));
            tllm_hadamard_heads(out, 1, hd);
            kr = out;
        }
        if (kv->k_center) { /* exact.centered: k - c, one subtraction each */
            for (int32_t i = 0; i < hd; i++) out[i] = kr[i] - kv->k_center[kh * hd + i];
            kr = out;
        }
        /* rotated keys take clipped scales; unrotated ones keep max|x| / 7, which loses less where a few
         * large channels carry the scores (measured, docs/numerics.md) */
        (rotate ? tllm_quantize_i4_clip : tllm_quantize_i4)(kr, hd, group, kv->k + pos * pos_bytes + kh * row_bytes,
                                                            kv->k_scale + pos * pos_scales + kh * ng);
        if (kv->v_center) { /* the key is stored: out is free again */
            for (int32_t i = 0; i < hd; i++) out[i] = vr[i] - kv->v_center[kh * hd + i];
            vr = out;
        }
        /* centred values lose their common part, and clipping then helps them as it helps rotated keys */
        (kv->v_center ? tllm_quantize_i4_clip : tllm_quantize_i4)(vr, hd, group,
                                                                  kv->v + pos * pos_bytes + kh * row_bytes,
                                                                  kv->v_scale + pos * pos_scales + kh * ng);
    }
    for (int32_t h = 0; h < shape->n_heads; h++) {
        const int32_t kh = h / heads_per_kv;
        const uint8_t *vrow = kv->v + kh * row_bytes;
        const float *vs = kv->v_scale + kh * ng;
        float qs = 0.0f;
        const float *qh = q + h * hd;
        if (rotate) {
            memcpy(out + h * hd, qh, (size_t)hd * sizeof(float));
            tllm_hadamard_heads(out + h * hd, 1, hd);
            qh = out + h * hd;
        }
        tllm_quantize_i8(qh, hd, hd, q8, &qs);
        const float m = tllm_attention_scores_kv4(q8, hd, group, kv->k + kh * row_bytes, pos_bytes,
                                                  kv->k_scale + kh * ng, pos_scales, n, scores);
        attend_values_kv4(scores, m, (qs * scale) * EXP_LOG2E, vs, pos_scales, -1.0f, vrow, pos_bytes, n, group,
                          hd / group, w_limit, out + h * hd);
        if (kv->v_center) /* exact.uncentered_output: sum_t p_t (v_t - c) + c */
            for (int32_t i = 0; i < hd; i++) out[h * hd + i] += kv->v_center[kh * hd + i];
    }
}

/* ---- context shift (compile --context-policy roll; twins: exact.kv_shift_i8 / kv_shift_kv4) ----
 * Rows to + delta .. to + delta + n_rows - 1 move down to rows to ..; rows
 * ascending, so each source row is read before a later destination reaches
 * it.  V moves as it is; each key head is dequantized, turned back by delta
 * positions (cos/sin: the RoPE tables' row delta) and quantized again. */

/* a' = a*c + b*s, b' = b*c - a*s over the rotate-half pairs (i, i + hd/2). */
static void rope_back(float *x, int32_t head_dim, const float *cos, const float *sin) {
    const int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cos[i] + b * sin[i];
        x[i + half] = b * cos[i] - a * sin[i];
    }
}

/* Row s's int8 keys, turned back, into row r (tllm_kv_shift_i8 and _k8v4). */
static inline __attribute__((always_inline)) void shift_keys_i8(int32_t hd, int32_t n_kv, int8_t *k, float *k_scale,
                                                                int32_t r, int32_t s, const float *cos,
                                                                const float *sin) {
    const int32_t kv_dim = n_kv * hd;
    float x[TLLM_MAX_HEAD_DIM];
    for (int32_t kh = 0; kh < n_kv; kh++) {
        const int8_t *q = k + s * kv_dim + kh * hd;
        const float scale = k_scale[s * n_kv + kh];
        for (int32_t i = 0; i < hd; i++) x[i] = (float)q[i] * scale;
        rope_back(x, hd, cos, sin);
        tllm_quantize_i8(x, hd, hd, k + r * kv_dim + kh * hd, k_scale + r * n_kv + kh);
    }
}

void tllm_kv_shift_i8(const tllm_attention_shape *shape, const tllm_kv_layer *kv, int32_t to, int32_t delta,
                      int32_t n_rows, const float *cos, const float *sin) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads, kv_dim = n_kv * hd;
    for (int32_t r = to; r < to + n_rows; r++) {
        const int32_t s = r + delta;
        shift_keys_i8(hd, n_kv, kv->k, kv->k_scale, r, s, cos, sin);
        memcpy(kv->v + r * kv_dim, kv->v + s * kv_dim, (size_t)kv_dim);
        memcpy(kv->v_scale + r * n_kv, kv->v_scale + s * n_kv, (size_t)n_kv * sizeof(float));
    }
}

static void kv_shift_kv4(const tllm_attention_shape *shape, const tllm_kv4_layer *kv, int32_t to, int32_t delta,
                         int32_t n_rows, const float *cos, const float *sin, int rotated) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads, group = kv->group;
    const int32_t row_bytes = n_kv * hd / 2, row_scales = n_kv * (hd / group);
    float x[TLLM_MAX_HEAD_DIM];
    for (int32_t r = to; r < to + n_rows; r++) {
        const int32_t s = r + delta;
        for (int32_t kh = 0; kh < n_kv; kh++) {
            const uint8_t *q = kv->k + s * row_bytes + kh * (hd / 2);
            const float *scale = kv->k_scale + s * row_scales + kh * (hd / group);
            const float *c = kv->k_center ? kv->k_center + kh * hd : NULL;
            for (int32_t i = 0; i < hd; i++) x[i] = (float)nibble_at(q, i) * scale[i / group];
            if (c) for (int32_t i = 0; i < hd; i++) x[i] += c[i]; /* the key itself again */
            if (rotated) { /* back to RoPE's frame: H x / head_dim (H H = head_dim I) */
                const float inv = 1.0f / (float)hd; /* exact: head_dim is a power of two */
                tllm_hadamard_heads(x, 1, hd);
                for (int32_t i = 0; i < hd; i++) x[i] *= inv;
            }
            rope_back(x, hd, cos, sin);
            if (rotated) tllm_hadamard_heads(x, 1, hd);
            if (c) for (int32_t i = 0; i < hd; i++) x[i] -= c[i];
            (rotated ? tllm_quantize_i4_clip : tllm_quantize_i4)(x, hd, group, kv->k + r * row_bytes + kh * (hd / 2),
                                                                 kv->k_scale + r * row_scales + kh * (hd / group));
        }
        memcpy(kv->v + r * row_bytes, kv->v + s * row_bytes, (size_t)row_bytes);
        memcpy(kv->v_scale + r * row_scales, kv->v_scale + s * row_scales, (size_t)row_scales * sizeof(float));
    }
}

void tllm_kv_shift_kv4(const tllm_attention_shape *shape, const tllm_kv4_layer *kv, int32_t to, int32_t delta,
                       int32_t n_rows, const float *cos, const float *sin) {
    kv_shift_kv4(shape, kv, to, delta, n_rows, cos, sin, 0);
}

void tllm_kv_shift_kv4_hadamard(const tllm_attention_shape *shape, const tllm_kv4_layer *kv, int32_t to,
                                int32_t delta, int32_t n_rows, const float *cos, const float *sin) {
    kv_shift_kv4(shape, kv, to, delta, n_rows, cos, sin, 1);
}

/* ---- int4 attention entry points (twin: exact.attention_kv4, after exact.hadamard_heads when rotated) ---- */

void tllm_attention_kv4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                        const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    attention_kv4(shape, q, k, v, kv, pos, q8, scores, out, 0);
}

void tllm_attention_kv4_hadamard(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                                 const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    attention_kv4(shape, q, k, v, kv, pos, q8, scores, out, 1);
}

/* ---- int8 K, int4 V (--kv-bits 8:4; twin: exact.attention_k8v4) ----
 * Pass 1 is tllm_attention_i8's over the int8 keys, passes 2 and 3 are
 * tllm_attention_kv4's over the int4 values: the same float operations in
 * the same order as each half's own kernel. */
void tllm_attention_k8v4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                         const tllm_kv8v4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads, group = kv->group, ng = hd / group;
    const int32_t kv_dim = n_kv * hd, row_bytes = hd / 2, n = pos + 1;
    const int32_t pos_bytes = n_kv * row_bytes, pos_scales = n_kv * ng, heads_per_kv = shape->n_heads / n_kv;
    const int32_t w_limit = attention_weight_limit(n);
    for (int32_t kh = 0; kh < n_kv; kh++) {
        tllm_quantize_i8(k + kh * hd, hd, hd, kv->k + pos * kv_dim + kh * hd, kv->k_scale + pos * n_kv + kh);
        tllm_quantize_i4(v + kh * hd, hd, group, kv->v + pos * pos_bytes + kh * row_bytes,
                         kv->v_scale + pos * pos_scales + kh * ng);
    }
    for (int32_t h = 0; h < shape->n_heads; h++) {
        const int32_t kh = h / heads_per_kv;
        const float *vs = kv->v_scale + kh * ng;
        float qs = 0.0f, vs_max = 0.0f;
        tllm_quantize_i8(q + h * hd, hd, hd, q8, &qs);
        /* With one value group its scales are n_kv floats apart, as the key
         * scales are: pass 1 finds their maximum on the way.  With several it
         * reads the key scales in their place and pass 2 finds each group's. */
        const float m = tllm_attention_scores_i8(q8, hd, kv->k + kh * hd, kv_dim, kv->k_scale + kh,
                                                 ng == 1 ? vs : kv->k_scale + kh, n_kv, n, scores, &vs_max);
        attend_values_kv4(scores, m, (qs * shape->scale) * EXP_LOG2E, vs, pos_scales, ng == 1 ? vs_max : -1.0f,
                          kv->v + kh * row_bytes, pos_bytes, n, group, ng, w_limit, out + h * hd);
    }
}

/* Context shift of the 8:4 cache (twin: exact.kv_shift_k8v4): keys as
 * tllm_kv_shift_i8 turns them, values (int4 bytes and group scales) moved as they are. */
void tllm_kv_shift_k8v4(const tllm_attention_shape *shape, const tllm_kv8v4_layer *kv, int32_t to, int32_t delta,
                        int32_t n_rows, const float *cos, const float *sin) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads;
    const int32_t v_bytes = n_kv * hd / 2, v_scales = n_kv * (hd / kv->group);
    for (int32_t r = to; r < to + n_rows; r++) {
        const int32_t s = r + delta;
        shift_keys_i8(hd, n_kv, kv->k, kv->k_scale, r, s, cos, sin);
        memcpy(kv->v + r * v_bytes, kv->v + s * v_bytes, (size_t)v_bytes);
        memcpy(kv->v_scale + r * v_scales, kv->v_scale + s * v_scales, (size_t)v_scales * sizeof(float));
    }
}

