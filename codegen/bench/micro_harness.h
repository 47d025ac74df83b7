/* What both kernel micro-benchmarks (micro.c, micro_gguf.c) are made of: the
 * mark the tllm_icount plugin counts between, console output and the hash
 * of an output vector, and the operands' xorshift generator.  The includer
 * defines MICRO_SEED first: each benchmark keeps its own stream (the host
 * mirrors micro.c's, tests/emu/test_batched_qemu.py XorShift). */
#ifndef MICRO_HARNESS_H
#define MICRO_HARNESS_H

#include <stdint.h>
#include <string.h>

#include "tllm_board.h"

static uint32_t rng = MICRO_SEED;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* the plugin snapshots the instruction counters at each call */
__attribute__((noinline)) void tllm_mark(void) { __asm__ volatile(""); }

static void puts_(const char *s) { tllm_board_write(s, strlen(s)); }

static void put_u32(uint32_t v, int hex) {
    char b[12];
    int n = 0;
    do {
        b[n++] = "0123456789abcdef"[v % (hex ? 16u : 10u)];
        v /= hex ? 16u : 10u;
    } while (v);
    for (int i = 0; i < n / 2; i++) {
        const char c = b[i];
        b[i] = b[n - 1 - i];
        b[n - 1 - i] = c;
    }
    b[n] = 0;
    puts_(b);
}

/* FNV-1a of the bytes: the host recomputes outputs with numpy and compares hashes */
static uint32_t fnv1a(const void *data, uint32_t n) {
    const uint8_t *p = data;
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

#endif
