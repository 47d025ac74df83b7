/* Portable C kernels: see tllm_kernels.h. Twins in tinyllm_gen/exact.py. */
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
            const float a = fabsf(x[i]);
            if (a > amax) amax = a;
        }
        if (amax > 0.0f) {
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

/* q . k over one head: an exact int32 dot product, so any order gives the
 * same result; on DSP targets four int8 MACs cost one load, two SXTB16 and
 * two SMLAD (q is pre-widened to int16 pairs once per head). */
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif

static inline int32_t dot_i8(const int8_t *q8, const uint32_t *q_pairs, const int8_t *k, int32_t hd) {
#if defined(__ARM_FEATURE_DSP)
    if (hd == 8) { /* the common small head, without a loop */
        uint32_t k0, k1;
        memcpy(&k0, k, 4);
        memcpy(&k1, k + 4, 4);
        int32_t acc = __smuad(q_pairs[0], __sxtb16(k0));
        acc = __smlad(q_pairs[1], __sxtb16((k0 >> 8) | (k0 << 24)), acc);
        acc = __smlad(q_pairs[2], __sxtb16(k1), acc);
        return __smlad(q_pairs[3], __sxtb16((k1 >> 8) | (k1 << 24)), acc);
    }
    if ((hd & 3) == 0) {
        int32_t acc = 0;
        for (int32_t j = 0; j < hd / 4; j++) {
            uint32_t kw;
            memcpy(&kw, k + 4 * j, 4);
            acc = __smlad(q_pairs[2 * j], __sxtb16(kw), acc);
            acc = __smlad(q_pairs[2 * j + 1], __sxtb16((kw >> 8) | (kw << 24)), acc);
        }
        return acc;
    }
#else
    (void)q_pairs;
#endif
    int32_t acc = 0;
    for (int32_t i = 0; i < hd; i++) acc += (int32_t)q8[i] * (int32_t)k[i];
    return acc;
}

void tllm_attention_i8(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                       const tllm_kv_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads;
    const int32_t kv_dim = n_kv * hd, group = shape->n_heads / n_kv;
    uint32_t q_pairs[TLLM_MAX_HEAD_DIM / 2];
    /* This position's K and V, one int8 row and scale per kv head. */
    for (int32_t kh = 0; kh < n_kv; kh++) {
        tllm_quantize_i8(k + kh * hd, hd, hd, kv->k + pos * kv_dim + kh * hd, kv->k_scale + pos * n_kv + kh);
        tllm_quantize_i8(v + kh * hd, hd, hd, kv->v + pos * kv_dim + kh * hd, kv->v_scale + pos * n_kv + kh);
    }
    for (int32_t h = 0; h < shape->n_heads; h++) {
        const int32_t kh = h / group;
        float qs = 0.0f;
        tllm_quantize_i8(q + h * hd, hd, hd, q8, &qs);
#if defined(__ARM_FEATURE_DSP)
        for (int32_t j = 0; j < hd / 4; j++) { /* lanes (q0,q2) and (q1,q3), as SXTB16 splits k */
            uint32_t qw;
            memcpy(&qw, q8 + 4 * j, 4);
            q_pairs[2 * j] = __sxtb16(qw);
            q_pairs[2 * j + 1] = __sxtb16((qw >> 8) | (qw << 24));
        }
#endif
        const int8_t *kcol = kv->k + kh * hd;
        const float *ks = kv->k_scale + kh;
        float m = -3.4028235e38f; /* softmax max, tracked while scoring: comparisons are exact */
        for (int32_t t = 0; t <= pos; t++) {
            const int32_t dot = dot_i8(q8, q_pairs, kcol + t * kv_dim, hd);
            const float sc = (((float)dot * qs) * ks[t * n_kv]) * shape->scale;
            scores[t] = sc;
            if (sc > m) m = sc;
        }
        /* softmax (as softmax_inline), fused with the value scales: the
         * weights are round(round(e / total) * v_scale), as the reference */
        float total = 0.0f;
        for (int32_t t = 0; t <= pos; t++) {
            scores[t] = exp_poly_nonpos(scores[t] - m);
            total += scores[t];
        }
        const float *vs = kv->v_scale + kh;
        for (int32_t t = 0; t <= pos; t++) scores[t] = (scores[t] / total) * vs[t * n_kv];
        /* each output element sums its column over t in ascending order (the
         * reference's order); four columns at a time share each weight load */
        const int8_t *vcol = kv->v + kh * hd;
        float *o = out + h * hd;
        int32_t i = 0;
        for (; i + 4 <= hd; i += 4) {
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            const int8_t *vi = vcol + i;
            for (int32_t t = 0; t <= pos; t++, vi += kv_dim) {
                const float w = scores[t];
                a0 = mla(a0, w, (float)vi[0]);
                a1 = mla(a1, w, (float)vi[1]);
                a2 = mla(a2, w, (float)vi[2]);
                a3 = mla(a3, w, (float)vi[3]);
            }
            o[i] = a0;
            o[i + 1] = a1;
            o[i + 2] = a2;
            o[i + 3] = a3;
        }
        for (; i < hd; i++) {
            float acc = 0.0f;
            const int8_t *vi = vcol + i;
            for (int32_t t = 0; t <= pos; t++) acc = mla(acc, scores[t], (float)vi[t * kv_dim]);
            o[i] = acc;
        }
    }
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
            const float a = fabsf(x[i]);
            if (a > amax) amax = a;
        }
        const float inv = amax > 0.0f ? 7.0f / amax : 0.0f;
        scales[gi] = amax > 0.0f ? amax / 7.0f : 0.0f;
        for (int32_t i = g0; i < g1; i++) {
            int32_t v = amax > 0.0f ? round_half_away(x[i] * inv) : 0;
            v = v > 7 ? 7 : (v < -7 ? -7 : v);
            /* elements arrive in ascending order: the low nibble starts a byte */
            if (i & 1) packed[i >> 1] = (uint8_t)(packed[i >> 1] | ((uint32_t)(v & 0xF) << 4));
            else packed[i >> 1] = (uint8_t)(v & 0xF);
        }
    }
}

void tllm_attention_kv4(const tllm_attention_shape *shape, const float *q, const float *k, const float *v,
                        const tllm_kv4_layer *kv, int32_t pos, int8_t *q8, float *scores, float *out) {
    const int32_t hd = shape->head_dim, n_kv = shape->n_kv_heads, group = kv->group;
    const int32_t ng = hd / group, row_bytes = hd / 2;
    const int32_t pos_bytes = n_kv * row_bytes, pos_scales = n_kv * ng, heads_per_kv = shape->n_heads / n_kv;
    for (int32_t kh = 0; kh < n_kv; kh++) {
        tllm_quantize_i4(k + kh * hd, hd, group, kv->k + pos * pos_bytes + kh * row_bytes,
                         kv->k_scale + pos * pos_scales + kh * ng);
        tllm_quantize_i4(v + kh * hd, hd, group, kv->v + pos * pos_bytes + kh * row_bytes,
                         kv->v_scale + pos * pos_scales + kh * ng);
    }
    for (int32_t h = 0; h < shape->n_heads; h++) {
        const int32_t kh = h / heads_per_kv;
        float qs = 0.0f;
        tllm_quantize_i8(q + h * hd, hd, hd, q8, &qs);
        for (int32_t t = 0; t <= pos; t++) {
            const uint8_t *kr = kv->k + t * pos_bytes + kh * row_bytes;
            const float *ks = kv->k_scale + t * pos_scales + kh * ng;
            float acc = 0.0f;
            for (int32_t g = 0; g < ng; g++) {
                int32_t dot = 0;
                for (int32_t i = g * group; i < (g + 1) * group; i++) dot += (int32_t)q8[i] * nibble_at(kr, i);
                acc = acc + (float)dot * ks[g];
            }
            scores[t] = (acc * qs) * shape->scale;
        }
        softmax_inline(scores, pos + 1);
        float *o = out + h * hd;
        for (int32_t i = 0; i < hd; i++) o[i] = 0.0f;
        for (int32_t t = 0; t <= pos; t++) {
            const uint8_t *vr = kv->v + t * pos_bytes + kh * row_bytes;
            const float *vs = kv->v_scale + t * pos_scales + kh * ng;
            for (int32_t g = 0; g < ng; g++) {
                const float w = scores[t] * vs[g];
                for (int32_t i = g * group; i < (g + 1) * group; i++) o[i] = o[i] + w * (float)nibble_at(vr, i);
            }
        }
    }
}
