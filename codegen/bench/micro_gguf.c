/* Kernel micro-benchmark of llama.cpp's blocks in 4-row tiles
 * (tllm_kernels_gguf_m7.c) for `tinyllm-gen bench` (bench.py bench_gguf_tiled).
 *
 * For each shape of -DTLLM_BENCH_SHAPES (columns a multiple of 32) and each
 * format (q40x4, q41x4, q80x4, in that order), after filling the tiles:
 * a mark before and after each of
 *   matvec (one token, the x16 stream), matmat at P = 2, 3, 4 (the x16b
 *   streams), argmax (the greedy classifier path, 64 rows per chunk),
 *   and the portable kept-block matvec (tllm_kernels_gguf.c) of the same
 *   matrix in the file's row-major blocks, for comparison;
 * six calls, seven marks per (shape, format); bench.py relies on this order.
 * Then it checks that the assembly equals its portable twin and that
 * matmat equals P matvecs, bit for bit (exit status 1 if not), and prints a
 * hash of every output ("@BENCH gguf <shape> <format> <P> <fnv1a>"). */
#include <stdint.h>
#include <string.h>

#define MICRO_SEED 0x9E3779B9u
#include "micro_harness.h"
#include "tllm_kernels.h"
#include "tllm_kernels_gguf.h"
#include "tllm_kernels_gguf_m7.h"
#include "tllm_kernels_m7.h"

static const uint16_t SHAPES[][2] = {TLLM_BENCH_SHAPES};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])
#define MAX_ROWS TLLM_BENCH_MAX_ROWS
#define MAX_COLS TLLM_BENCH_MAX_COLS
#define X16_BYTES (MAX_COLS / 32 * 72)
#define ARGMAX_ROWS 64

static uint8_t tiles[TLLM_BENCH_TILED_BYTES] __attribute__((aligned(8)));
static float x[TLLM_MAX_BATCH][MAX_COLS];
static int8_t xq[MAX_COLS];
static float xs[MAX_COLS / 32];
static uint8_t x16[TLLM_MAX_BATCH * X16_BYTES] __attribute__((aligned(4)));
static uint8_t xb[TLLM_MAX_BATCH + 1][TLLM_MAX_BATCH * X16_BYTES] __attribute__((aligned(4)));
static float out_mv[MAX_ROWS], out_c[TLLM_MAX_BATCH * MAX_ROWS], out_mm[TLLM_MAX_BATCH + 1][TLLM_MAX_BATCH * MAX_ROWS];
static float chunk[ARGMAX_ROWS];


/* Random quants; every fp16 d (and Q4_1's m) 2^-7 (0x2000): the count does not depend on the values.
 * The same bytes serve as the file's row-major blocks (scale_at: the block's fp16 fields) and as tiles
 * (the tile-block's scale area), so both are filled. */
static void fill(uint32_t bytes, uint32_t block_bytes, uint32_t scale_bytes, uint32_t tile_scale_at) {
    for (uint32_t i = 0; i < bytes; i++) tiles[i] = (uint8_t)next();
    for (uint32_t b = 0; b < bytes / block_bytes; b++)
        for (uint32_t h = 0; h < scale_bytes; h += 2) {
            tiles[b * block_bytes + h] = 0x00;
            tiles[b * block_bytes + h + 1] = 0x20;
        }
    for (uint32_t tb = 0; tb < bytes / (4 * block_bytes); tb++)
        for (uint32_t h = 0; h < 4 * scale_bytes; h += 2) {
            tiles[tb * 4 * block_bytes + tile_scale_at + h] = 0x00;
            tiles[tb * 4 * block_bytes + tile_scale_at + h + 1] = 0x20;
        }
}

typedef void mv_fn(const tllm_ggufx4_matrix *, const uint8_t *, const float *, float *);
typedef void mm_fn(const tllm_ggufx4_matrix *, const uint8_t *, int32_t, const float *, float *);
typedef int32_t argmax_fn(const tllm_ggufx4_matrix *, const uint8_t *, const float *, float *, int32_t);
typedef void kept_fn(const tllm_gguf_matrix *, const int8_t *, const float *, const float *, float *);

static const struct {
    const char *name;
    uint32_t block_bytes, scale_bytes, tile_scale_at;
    mv_fn *mv, *mv_c;
    mm_fn *mm;
    argmax_fn *argmax;
    kept_fn *kept;
} FORMATS[] = {
    {"q40x4", 18, 2, 64, tllm_matvec_q40x4, tllm_matvec_q40x4_c, tllm_matmat_q40x4, tllm_argmax_q40x4,
     tllm_matvec_q40},
    {"q41x4", 20, 4, 64, tllm_matvec_q41x4, tllm_matvec_q41x4_c, tllm_matmat_q41x4, tllm_argmax_q41x4,
     tllm_matvec_q41},
    {"q80x4", 34, 2, 128, tllm_matvec_q80x4, tllm_matvec_q80x4_c, tllm_matmat_q80x4, tllm_argmax_q80x4,
     tllm_matvec_q80},
};

static int fail(const char *what, const char *fmt) {
    puts_("@BENCH mismatch: ");
    puts_(fmt);
    puts_(" ");
    puts_(what);
    puts_("\n");
    return 1;
}

int tllm_main(void) {
    tllm_mark(); /* two marks with nothing between: the cost of a mark, */
    tllm_mark(); /* subtracted from every measurement */
    for (uint32_t s = 0; s < N_SHAPES; s++) {
        const uint32_t rows = SHAPES[s][0], cols = SHAPES[s][1], xbytes = cols / 32 * 72;
        for (uint32_t p = 0; p < TLLM_MAX_BATCH; p++) {
            for (uint32_t i = 0; i < cols; i++) x[p][i] = (float)((int32_t)(next() % 2001u) - 1000) * 0.001f;
            tllm_quantize_x16(x[p], (int32_t)cols, 32, x16 + p * xbytes);
        }
        tllm_quantize_i8(x[0], (int32_t)cols, 32, xq, xs);
        for (uint32_t P = 2; P <= TLLM_MAX_BATCH; P++)
            tllm_x16_batch(x16, (int32_t)xbytes, (int32_t)P, (int32_t)cols, 32, xb[P]);
        for (uint32_t f = 0; f < sizeof FORMATS / sizeof FORMATS[0]; f++) {
            const tllm_ggufx4_matrix m = {tiles, (uint16_t)rows, (uint16_t)cols};
            const tllm_gguf_matrix kept = {tiles, (uint16_t)rows, (uint16_t)cols};
            fill((rows + 3) / 4 * 4 * (cols / 32) * FORMATS[f].block_bytes, FORMATS[f].block_bytes,
                 FORMATS[f].scale_bytes, FORMATS[f].tile_scale_at);
            tllm_mark();
            FORMATS[f].mv(&m, x16, 0, out_mv);
            tllm_mark();
            for (uint32_t P = 2; P <= TLLM_MAX_BATCH; P++) {
                FORMATS[f].mm(&m, xb[P], (int32_t)P, 0, out_mm[P]);
                tllm_mark();
            }
            const int32_t best = FORMATS[f].argmax(&m, x16, 0, chunk, ARGMAX_ROWS);
            tllm_mark();
            FORMATS[f].kept(&kept, xq, xs, 0, out_c); /* the kept build's kernel (its own layout: other numbers) */
            tllm_mark();
            FORMATS[f].mv_c(&m, x16, 0, out_c);
            if (memcmp(out_mv, out_c, sizeof(float) * rows) != 0)
                return fail("matvec assembly != its C twin", FORMATS[f].name);
            for (uint32_t r = 0; r < rows; r++)
                if (out_mv[r] > out_mv[best] || (out_mv[r] == out_mv[best] && (int32_t)r < best))
                    return fail("argmax != the matvec's first maximum", FORMATS[f].name);
            for (uint32_t P = 2; P <= TLLM_MAX_BATCH; P++)
                for (uint32_t p = 0; p < P; p++) {
                    FORMATS[f].mv(&m, x16 + p * xbytes, 0, out_c);
                    if (memcmp(out_mm[P] + p * rows, out_c, sizeof(float) * rows) != 0)
                        return fail("matmat != P matvecs", FORMATS[f].name);
                }
            memcpy(out_mm[1], out_mv, sizeof(float) * rows);
            for (uint32_t P = 1; P <= TLLM_MAX_BATCH; P++) {
                puts_("@BENCH gguf ");
                put_u32(s, 0);
                puts_(" ");
                puts_(FORMATS[f].name);
                puts_(" ");
                put_u32(P, 0);
                puts_(" ");
                put_u32(fnv1a(out_mm[P], (uint32_t)sizeof(float) * P * rows), 1);
                puts_("\n");
            }
        }
    }
    puts_("@BENCH ok\n");
    return 0;
}
