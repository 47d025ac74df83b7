/* Kernel micro-benchmark firmware for `tinyllm-gen bench`.
 *
 * For each matvec shape (compiled in via -DTLLM_BENCH_SHAPES) it runs every
 * kernel variant once between two calls of tllm_mark(); the icount plugin
 * snapshots the instruction counters at each mark, so the difference is
 * the exact cost of one call. It also checks that the Cortex-M7 assembly
 * and its portable C twin return bit-identical outputs (exit status 1 if
 * not), which is how CI proves the asm path in the emulator.
 *
 * Marks: two back to back (the marker's own cost), then per shape
 * (bench.py relies on this order):
 *   quantize_i8, matvec_q4 (portable), quantize_x16, matvec_q4x4 (M7 asm),
 *   matvec_q4x4_c (its C twin), matvec_f32 (float baseline), x16_batch (P = 4
 *   streams interleaved), matmat_q4x4 at P = 1 (the matvec), 2, 3, 4 (M7 asm), matmat_q4x4_c
 *   at P = 4 (its C twin), quantize_x16b (four tokens straight into the
 *   x16b stream) [, CMSIS-NN s4, s8]; then, for each shape of
 *   -DTLLM_BENCH_GGUF_SHAPES (columns a multiple of 32), llama.cpp's kept
 *   blocks: matvec_q40, matvec_q41, matvec_q80 (tllm_kernels_gguf.c).
 *   The batched kernel must equal
 *   P matvecs bit for bit and its C twin (exit status 1 if not); a hash of
 *   each batched output ("@BENCH out") lets the host compare it with numpy. */
#include <stdint.h>
#include <string.h>

#define MICRO_SEED 0x12345678u
#include "micro_harness.h"
#include "tllm_kernels.h"
#include "tllm_kernels_m7.h"
#include "tllm_kernels_gguf.h"
#ifdef TLLM_BENCH_CMSIS_NN
#include "arm_nnfunctions.h"
#endif

#ifndef TLLM_BENCH_GROUP
#define TLLM_BENCH_GROUP 32
#endif
/* Buffer sizes: bench.py computes them from the shapes (micro_buffers());
 * the defaults fit every shape up to 256x256. */
#ifndef TLLM_BENCH_MAX_ROWS
#define TLLM_BENCH_MAX_ROWS 256
#define TLLM_BENCH_MAX_COLS 256
#define TLLM_BENCH_MAX_ELEMS (256 * 256)
#define TLLM_BENCH_Q4_BYTES (256 * 256 / 2)
#define TLLM_BENCH_SCALES (256 * (256 / 8))
#define TLLM_BENCH_Q4X4_BYTES (256 * 256 / 2 + 256 * (256 / 8) * 4 + 1024)
#endif
#define MAX_ROWS TLLM_BENCH_MAX_ROWS
#define MAX_COLS TLLM_BENCH_MAX_COLS

static const uint16_t SHAPES[][2] = {TLLM_BENCH_SHAPES};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])
#ifdef TLLM_BENCH_GGUF_SHAPES
static const uint16_t GGUF_SHAPES[][2] = {TLLM_BENCH_GGUF_SHAPES};
#define N_GGUF_SHAPES (sizeof GGUF_SHAPES / sizeof GGUF_SHAPES[0])
/* rows x cols/32 blocks of the largest format (Q8_0: 34 B per 32 weights) */
static uint8_t gguf_blocks[TLLM_BENCH_GGUF_BYTES] __attribute__((aligned(4)));
#endif

static uint8_t q4_packed[TLLM_BENCH_Q4_BYTES];
static float q4_scales[TLLM_BENCH_SCALES];
static uint8_t q4x4[TLLM_BENCH_Q4X4_BYTES] __attribute__((aligned(4)));
static float w_f32[TLLM_BENCH_MAX_ELEMS];
static float x[MAX_COLS];
static int8_t xq[MAX_COLS];
static float xs[MAX_COLS / 8 + 1];
static uint8_t x16[MAX_COLS * 2 + (MAX_COLS / 8) * 8 + 64] __attribute__((aligned(4)));
static float out_a[MAX_ROWS + 4], out_b[MAX_ROWS + 4], out_f[MAX_ROWS];
/* batched prefill: four tokens' activations, their x16 streams and the x16b
 * streams for P = 2, 3, 4 */
#define X16_BYTES (MAX_COLS * 2 + (MAX_COLS / 8) * 8 + 64)
static float xt[TLLM_MAX_BATCH][MAX_COLS];
static uint8_t x16t[TLLM_MAX_BATCH * X16_BYTES] __attribute__((aligned(4)));
static uint8_t xb2[2 * X16_BYTES], xb3[3 * X16_BYTES], xb4[4 * X16_BYTES] __attribute__((aligned(4)));
static float out_mm[4][TLLM_MAX_BATCH * MAX_ROWS + 4], out_mc[TLLM_MAX_BATCH * MAX_ROWS + 3];
#ifdef TLLM_BENCH_CMSIS_NN
static int8_t x_s8[MAX_COLS], out_s8[MAX_ROWS], w_s8[TLLM_BENCH_MAX_ELEMS];
static int32_t bias_s32[MAX_ROWS];
#endif


static void fill(uint32_t rows, uint32_t cols) {
    const uint32_t group = TLLM_BENCH_GROUP;
    for (uint32_t i = 0; i < rows * ((cols + 1) / 2); i++) q4_packed[i] = (uint8_t)next();
    for (uint32_t i = 0; i < rows * ((cols + group - 1) / group); i++) q4_scales[i] = 0.01f;
    for (uint32_t i = 0; i < rows * cols; i++) w_f32[i] = (float)((int32_t)(next() % 15u) - 7) * 0.01f;
    for (uint32_t i = 0; i < cols; i++) x[i] = (float)((int32_t)(next() % 2001u) - 1000) * 0.001f;
    for (uint32_t p = 0; p < TLLM_MAX_BATCH; p++)
        for (uint32_t i = 0; i < cols; i++) xt[p][i] = (float)((int32_t)(next() % 2001u) - 1000) * 0.001f;
#ifdef TLLM_BENCH_CMSIS_NN
    /* CMSIS-NN's operands; made here, before the first mark, so that no
     * measured segment pays for them (the s4 call reuses q4_packed) */
    for (uint32_t i = 0; i < cols; i++) x_s8[i] = (int8_t)next();
    for (uint32_t i = 0; i < rows * cols; i++) w_s8[i] = (int8_t)next();
#endif
    /* q4x4: random words, then real floats in the scale slots */
    uint8_t *p = q4x4;
    for (uint32_t t = 0; t < (rows + 3) / 4; t++)
        for (uint32_t g0 = 0; g0 < cols; g0 += group) {
            const uint32_t len = g0 + group < cols ? group : cols - g0;
            for (uint32_t b = 0; b < 4u * ((len + 7) / 8); b++, p += 4) {
                const uint32_t w = next();
                memcpy(p, &w, 4);
            }
            for (uint32_t s = 0; s < 4; s++, p += 4) {
                const float sc = 0.01f + 0.001f * (float)s;
                memcpy(p, &sc, 4);
            }
        }
}

#ifdef TLLM_BENCH_GGUF_SHAPES
/* Random quants, every block's fp16 d (and Q4_1's m) a fixed 2^-7 (0x2000):
 * the instruction count does not depend on the values. */
static void fill_gguf(uint32_t rows, uint32_t cols, uint32_t block_bytes, uint32_t header_bytes) {
    for (uint32_t b = 0; b < rows * (cols / 32u); b++) {
        uint8_t *blk = gguf_blocks + b * block_bytes;
        for (uint32_t i = 0; i < block_bytes; i++) blk[i] = (uint8_t)next();
        for (uint32_t h = 0; h < header_bytes; h += 2) {
            blk[h] = 0x00;
            blk[h + 1] = 0x20;
        }
    }
}

static void bench_gguf(void) {
    for (uint32_t s = 0; s < N_GGUF_SHAPES; s++) {
        const uint32_t rows = GGUF_SHAPES[s][0], cols = GGUF_SHAPES[s][1];
        const tllm_gguf_matrix m = {gguf_blocks, (uint16_t)rows, (uint16_t)cols};
        for (uint32_t i = 0; i < cols; i++) x[i] = (float)((int32_t)(next() % 2001u) - 1000) * 0.001f;
        tllm_quantize_i8(x, (int32_t)cols, 32, xq, xs); /* llama.cpp's blocks pair with group-32 activations */
        fill_gguf(rows, cols, sizeof(tllm_block_q4_0), 2);
        tllm_mark();
        tllm_matvec_q40(&m, xq, xs, 0, out_a);
        tllm_mark();
        fill_gguf(rows, cols, sizeof(tllm_block_q4_1), 4);
        tllm_mark();
        tllm_matvec_q41(&m, xq, xs, 0, out_a);
        tllm_mark();
        fill_gguf(rows, cols, sizeof(tllm_block_q8_0), 2);
        tllm_mark();
        tllm_matvec_q80(&m, xq, xs, 0, out_a);
        tllm_mark();
    }
}
#endif

static void matvec_f32(const float *w, const float *v, uint32_t rows, uint32_t cols, float *out) {
    for (uint32_t r = 0; r < rows; r++) {
        float acc = 0.0f;
        const float *row = w + r * cols;
        for (uint32_t i = 0; i < cols; i++) acc += row[i] * v[i];
        out[r] = acc;
    }
}

int tllm_main(void) {
    tllm_mark(); /* two marks with nothing between: the cost of a mark, */
    tllm_mark(); /* subtracted from every measurement */
    for (uint32_t s = 0; s < N_SHAPES; s++) {
        const uint32_t rows = SHAPES[s][0], cols = SHAPES[s][1];
        const tllm_q4_matrix m = {q4_packed, q4_scales, (uint16_t)rows, (uint16_t)cols, TLLM_BENCH_GROUP};
        const tllm_q4x4_matrix m4 = {q4x4, (uint16_t)rows, (uint16_t)cols, TLLM_BENCH_GROUP};
        fill(rows, cols);
        const int32_t xbytes = tllm_x16_bytes((int32_t)cols, TLLM_BENCH_GROUP);
        for (int32_t p = 0; p < TLLM_MAX_BATCH; p++)
            tllm_quantize_x16(xt[p], (int32_t)cols, TLLM_BENCH_GROUP, x16t + p * xbytes);
        tllm_x16_batch(x16t, xbytes, 2, (int32_t)cols, TLLM_BENCH_GROUP, xb2);
        tllm_x16_batch(x16t, xbytes, 3, (int32_t)cols, TLLM_BENCH_GROUP, xb3);
        tllm_mark();
        tllm_quantize_i8(x, (int32_t)cols, TLLM_BENCH_GROUP, xq, xs);
        tllm_mark();
        tllm_matvec_q4(&m, xq, xs, 0, out_f);
        tllm_mark();
        tllm_quantize_x16(x, (int32_t)cols, TLLM_BENCH_GROUP, x16);
        tllm_mark();
        tllm_matvec_q4x4(&m4, x16, 0, out_a);
        tllm_mark();
        tllm_matvec_q4x4_c(&m4, x16, 0, out_b);
        tllm_mark();
        matvec_f32(w_f32, x, rows, cols, out_f);
        tllm_mark();
        tllm_x16_batch(x16t, xbytes, 4, (int32_t)cols, TLLM_BENCH_GROUP, xb4);
        tllm_mark();
        tllm_matmat_q4x4(&m4, x16t, 1, 0, out_mm[0]); /* P = 1: the matvec */
        tllm_mark();
        tllm_matmat_q4x4(&m4, xb2, 2, 0, out_mm[1]);
        tllm_mark();
        tllm_matmat_q4x4(&m4, xb3, 3, 0, out_mm[2]);
        tllm_mark();
        tllm_matmat_q4x4(&m4, xb4, 4, 0, out_mm[3]);
        tllm_mark();
        tllm_matmat_q4x4_c(&m4, xb4, 4, 0, out_mc);
        tllm_mark();
        for (int32_t p = 0; p < TLLM_MAX_BATCH; p++) /* the same xb4, written by the producer directly */
            tllm_quantize_x16b(xt[p], (int32_t)cols, TLLM_BENCH_GROUP, TLLM_MAX_BATCH, p, xb4);
        tllm_mark();
#ifdef TLLM_BENCH_CMSIS_NN
        /* CMSIS-NN's int4 and int8 fully connected layers on the same shape
         * (per-tensor quantization, as their API takes it). */
        {
            const cmsis_nn_context ctx = {0, 0};
            const cmsis_nn_fc_params fc = {0, 0, 0, {-128, 127}};
            const cmsis_nn_per_tensor_quant_params pq = {1073741824, -5};
            const cmsis_nn_dims in_dims = {1, 1, 1, (int32_t)cols}, f_dims = {(int32_t)cols, 1, 1, (int32_t)rows},
                                b_dims = {1, 1, 1, (int32_t)rows}, o_dims = {1, 1, 1, (int32_t)rows};
            arm_fully_connected_s4(&ctx, &fc, &pq, &in_dims, x_s8, &f_dims, (const int8_t *)q4_packed, &b_dims, bias_s32, &o_dims, out_s8);
            tllm_mark();
            arm_fully_connected_s8(&ctx, &fc, &pq, &in_dims, x_s8, &f_dims, w_s8, &b_dims, bias_s32, &o_dims, out_s8);
            tllm_mark();
        }
#endif
        if (memcmp(out_a, out_b, sizeof(float) * rows) != 0) {
            puts_("@BENCH mismatch: matvec_q4x4 assembly differs from its C twin\n");
            return 1;
        }
        if (memcmp(out_mm[3], out_mc, sizeof(float) * 4 * rows) != 0) {
            puts_("@BENCH mismatch: matmat_q4x4 assembly differs from its C twin\n");
            return 1;
        }
        for (uint32_t P = 1; P <= TLLM_MAX_BATCH; P++)
            for (uint32_t p = 0; p < P; p++) {
                tllm_matvec_q4x4(&m4, x16t + p * (uint32_t)xbytes, 0, out_a);
                if (memcmp(out_mm[P - 1] + p * rows, out_a, sizeof(float) * rows) != 0) {
                    puts_("@BENCH mismatch: matmat_q4x4 differs from P matvecs\n");
                    return 1;
                }
            }
        for (uint32_t P = 1; P <= TLLM_MAX_BATCH; P++) { /* "@BENCH out <shape> <P> <fnv1a of P x rows floats>" */
            puts_("@BENCH out ");
            put_u32(s, 0);
            puts_(" ");
            put_u32(P, 0);
            puts_(" ");
            put_u32(fnv1a(out_mm[P - 1], (uint32_t)sizeof(float) * P * rows), 1);
            puts_("\n");
        }
    }
#ifdef TLLM_BENCH_GGUF_SHAPES
    bench_gguf();
#endif
    puts_("@BENCH ok\n");
    return 0;
}
