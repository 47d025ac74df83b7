/* Token sampling; bit-exact twin: codegen/sampler.py. */
#include "tllm_sampler.h"

#include "tllm_kernels.h"

#define DEFAULT_SEED_STATE 0x853C49E6748FEA9BULL /* xorshift state must be non-zero */

void tllm_sampler_init(tllm_sampler *s, float temperature, float top_p, uint64_t seed) {
    s->rng_state = seed ? seed : DEFAULT_SEED_STATE;
    s->temperature = temperature;
    s->top_p = top_p;
}

/* xorshift64* (Vigna): 64-bit integer arithmetic, identical everywhere. */
static uint32_t rng_u32(tllm_sampler *s) {
    uint64_t x = s->rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng_state = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

static float rng_f32(tllm_sampler *s) {
    return (float)(rng_u32(s) >> 8) * (1.0f / 16777216.0f);
}

int32_t tllm_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int32_t multinomial(const float *p, int32_t n, float coin) {
    float cdf = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        cdf = cdf + p[i];
        if (coin < cdf) return i;
    }
    return n - 1; /* rounding: coin beyond the last cdf */
}

/* (prob desc, index asc) is a total order, so this heap sort yields exactly
 * the sequence Python's sort gives. */
static int before(const float *p, uint16_t a, uint16_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

static void sift_down(const float *p, uint16_t *idx, int32_t root, int32_t n) {
    for (;;) {
        int32_t child = 2 * root + 1;
        if (child >= n) return;
        /* max-heap on "after": the element that sorts last sits on top */
        if (child + 1 < n && before(p, idx[child], idx[child + 1])) child++;
        if (!before(p, idx[root], idx[child])) return;
        uint16_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
        root = child;
    }
}

static void sort_candidates(const float *p, uint16_t *idx, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(p, idx, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        uint16_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        sift_down(p, idx, 0, end);
    }
}

/* The nucleus: idx[0..last] the candidates in (prob desc, index asc) order,
 * the shortest prefix whose sum (*cum) exceeds top (all when none does).
 * Returns last. */
static int32_t nucleus(const float *p, int32_t n, float top, uint16_t *idx, float *cum_out) {
    const float cutoff = (1.0f - top) / (float)(n - 1);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (p[i] >= cutoff) idx[m++] = (uint16_t)i;
    sort_candidates(p, idx, m);
    float cum = 0.0f;
    int32_t last = m - 1;
    for (int32_t j = 0; j < m; j++) {
        cum = cum + p[idx[j]];
        if (cum > top) {
            last = j;
            break;
        }
    }
    *cum_out = cum;
    return last;
}

static int32_t top_p(const float *p, int32_t n, float top, float coin, uint16_t *idx) {
    float cum;
    const int32_t last = nucleus(p, n, top, idx, &cum);
    const float r = coin * cum;
    float cdf = 0.0f;
    for (int32_t j = 0; j <= last; j++) {
        cdf = cdf + p[idx[j]];
        if (r < cdf) return idx[j];
    }
    return idx[last];
}

int32_t tllm_sample(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx) {
    if (s->temperature == 0.0f) return tllm_argmax(logits, n);
    for (int32_t i = 0; i < n; i++) logits[i] = logits[i] / s->temperature;
    tllm_softmax(logits, n);
    const float coin = rng_f32(s);
    if (s->top_p < 1.0f) return top_p(logits, n, s->top_p, coin, idx);
    return multinomial(logits, n, coin);
}

/* ---- speculative decoding: a position the draft guessed --------------- */
/* The acceptance rule of a one-hot draft (prompt lookup, q(g) = 1): the
 * draft model's rule below with q one-hot at g, which is the one-hot rule
 * bit for bit (q(g) * S = S and p(g) * 1 = p(g): keep g when coin * S <
 * p(g); each other candidate's residual weight p * 1 - 0 * S = p). */
static int32_t one_hot_guess(tllm_sampler *s, const tllm_dist *p, int32_t g);

int32_t tllm_sample_guess(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, int32_t g) {
    if (g < 0) return tllm_sample(s, logits, n, idx);
    if (s->temperature == 0.0f) return tllm_argmax(logits, n);
    tllm_dist p;
    tllm_dist_full(s, logits, n, idx, &p);
    return one_hot_guess(s, &p, g);
}

/* ---- top-K builds ---------------------------------------------------- */
/* Puts (v, row) at its place among value[0..last], dropping value[last]'s
 * entry: the entries it sorts before move one down. */
static void topk_insert(float *value, uint16_t *id, int32_t last, float v, int32_t row) {
    int32_t at = last;
    for (; at > 0 && v > value[at - 1]; at--) { /* strictly greater: equal values keep their lower ids first */
        value[at] = value[at - 1];
        id[at] = id[at - 1];
    }
    value[at] = v;
    id[at] = (uint16_t)row;
}

void tllm_topk_push(tllm_topk *t, const float *x, int32_t n, int32_t r0) {
    float *value = t->value;
    uint16_t *id = t->id;
    const int32_t cap = t->cap;
    int32_t held = r0 == 0 ? 0 : t->n;
    int32_t i = 0;
    for (; i < n && held < cap; i++, held++) topk_insert(value, id, held, x[i], r0 + i); /* room: every row enters */
    t->n = held;
    if (i == n) return;
    float floor_v = value[cap - 1]; /* a full set: a row enters only above its last entry (the common case: not) */
    for (; i < n; i++) {
        if (!(x[i] > floor_v)) continue;
        topk_insert(value, id, cap - 1, x[i], r0 + i);
        floor_v = value[cap - 1];
    }
}

/* The set's values become their probabilities at the temperature; returns
 * the nucleus's last entry within the K, in the set's order (no cutoff, no
 * re-sort), and its mass in *cum (top_p >= 1: every entry, mass 1). */
static int32_t topk_nucleus(const tllm_sampler *s, tllm_topk *t, float *cum_out) {
    float *p = t->value;
    const int32_t n = t->n;
    for (int32_t i = 0; i < n; i++) p[i] = p[i] / s->temperature;
    tllm_softmax(p, n);
    *cum_out = 1.0f;
    if (s->top_p >= 1.0f) return n - 1;
    float cum = 0.0f;
    int32_t last = n - 1;
    for (int32_t j = 0; j < n; j++) {
        cum = cum + p[j];
        if (cum > s->top_p) {
            last = j;
            break;
        }
    }
    *cum_out = cum;
    return last;
}

int32_t tllm_sample_topk(tllm_sampler *s, tllm_topk *t) {
    if (s->temperature == 0.0f) return t->id[0]; /* the first maximum: tllm_argmax's token */
    float cum;
    const int32_t last = topk_nucleus(s, t, &cum);
    const float *p = t->value;
    const float coin = rng_f32(s);
    if (s->top_p >= 1.0f) return t->id[multinomial(p, t->n, coin)];
    const float r = coin * cum;
    float cdf = 0.0f;
    for (int32_t j = 0; j <= last; j++) {
        cdf = cdf + p[j];
        if (r < cdf) return t->id[j];
    }
    return t->id[last];
}

int32_t tllm_sample_topk_guess(tllm_sampler *s, tllm_topk *t, int32_t g) {
    if (g < 0) return tllm_sample_topk(s, t);
    if (s->temperature == 0.0f) return t->id[0];
    tllm_dist p; /* the nucleus within the K, as tllm_sample_topk */
    tllm_dist_topk(s, t, &p);
    return one_hot_guess(s, &p, g);
}

/* ---- a draft model's guesses ----------------------------------------- */
static int32_t dist_id(const tllm_dist *d, int32_t j) { return d->ids ? d->ids[j] : j; }
static float dist_prob(const tllm_dist *d, int32_t j) { return d->by_id ? d->p[dist_id(d, j)] : d->p[j]; }

void tllm_dist_full(const tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, tllm_dist *d) {
    for (int32_t i = 0; i < n; i++) logits[i] = logits[i] / s->temperature; /* tllm_sample's arithmetic */
    tllm_softmax(logits, n);
    d->p = logits;
    d->by_id = 1;
    d->from_target = d->to_target = 0;
    if (s->top_p < 1.0f) {
        d->n = nucleus(logits, n, s->top_p, idx, &d->total) + 1;
        d->ids = idx;
    } else {
        d->n = n;
        d->ids = 0;
        d->total = 1.0f;
    }
}

void tllm_dist_topk(const tllm_sampler *s, tllm_topk *t, tllm_dist *d) {
    d->n = topk_nucleus(s, t, &d->total) + 1;
    d->p = t->value;
    d->ids = t->id;
    d->by_id = 0;
    d->from_target = d->to_target = 0;
}

/* coin * total (exactly the coin where total is 1: multinomial's draw), then
 * the first running sum above it: top_p / multinomial / tllm_sample_topk's. */
int32_t tllm_dist_draw(tllm_sampler *s, const tllm_dist *d) {
    const float r = rng_f32(s) * d->total;
    float cdf = 0.0f;
    for (int32_t j = 0; j < d->n; j++) {
        cdf = cdf + dist_prob(d, j);
        if (r < cdf) return dist_id(d, j);
    }
    return dist_id(d, d->n - 1);
}

float tllm_dist_at(const tllm_dist *d, int32_t id) {
    if (d->from_target) { /* a pruned draft's q, asked by target id: reference/draft.py spreads it the same way */
        const uint16_t own = d->from_target[id];
        if (d->to_target[own] != id) return 0.0f; /* a token the draft lacks: read as another, never drawn */
        id = own;
    }
    if (!d->ids) return id >= 0 && id < d->n ? d->p[id] : 0.0f;
    if (d->by_id) { /* a full sampler's nucleus: the ids sorting up to its last one, (prob desc, id asc) */
        if (d->n <= 0) return 0.0f; /* an empty nucleus (top_p below every probability's share) */
        const uint16_t b = d->ids[d->n - 1];
        return d->p[id] > d->p[b] || (d->p[id] == d->p[b] && id <= b) ? d->p[id] : 0.0f;
    }
    for (int32_t j = 0; j < d->n; j++) /* a top-K set: at most K entries */
        if (d->ids[j] == id) return d->p[j];
    return 0.0f;
}

/* u * (q_g * S) < p(g) * q_total: Sampler.sample_guess's test, in its float32 order. */
static int kept(tllm_sampler *s, const tllm_dist *p, int32_t g, float q_g, float q_total) {
    return rng_f32(s) * (q_g * p->total) < tllm_dist_at(p, g) * q_total;
}

int tllm_guess_kept(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, int32_t g, float q_g, float q_total,
                    tllm_dist *p) {
    tllm_dist_full(s, logits, n, idx, p);
    return kept(s, p, g, q_g, q_total);
}

int tllm_topk_guess_kept(tllm_sampler *s, tllm_topk *t, int32_t g, float q_g, float q_total, tllm_dist *p) {
    tllm_dist_topk(s, t, p);
    return kept(s, p, g, q_g, q_total);
}

/* Candidate j's residual weight: max(0, p * Sq - q * S), each product rounded to float32 (no fused multiply-add). */
static float residual_weight(const tllm_dist *p, int32_t j, const tllm_dist *q) {
    const float w = dist_prob(p, j) * q->total - tllm_dist_at(q, dist_id(p, j)) * p->total;
    return w > 0.0f ? w : 0.0f;
}

int32_t tllm_guess_residual(tllm_sampler *s, const tllm_dist *p, int32_t g, const tllm_dist *q) {
    float rest = 0.0f;
    for (int32_t j = 0; j < p->n; j++)
        if (dist_id(p, j) != g) rest = rest + residual_weight(p, j, q);
    const float r = rng_f32(s) * rest;
    float cdf = 0.0f;
    int32_t fallback = g; /* kept only when g is the sole candidate */
    for (int32_t j = 0; j < p->n; j++) {
        if (dist_id(p, j) == g) continue;
        cdf = cdf + residual_weight(p, j, q);
        fallback = dist_id(p, j);
        if (r < cdf) return fallback;
    }
    return fallback;
}

static int32_t one_hot_guess(tllm_sampler *s, const tllm_dist *p, int32_t g) {
    const float one = 1.0f;
    const uint16_t at = (uint16_t)g;
    const tllm_dist q = {&one, &at, 1, 0, 1.0f, 0, 0}; /* q(g) = 1, 0 elsewhere, total 1 */
    return kept(s, p, g, 1.0f, 1.0f) ? g : tllm_guess_residual(s, p, g, &q);
}
