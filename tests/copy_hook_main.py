"""The test main of the weight-streaming hooks (tllm_board_copy_start/wait),
one source for every tier: the host, QEMU mps2-an500 and the STM32H750 boards
under Unicorn.  The source blob (weights.bin, or a host array) holds
word i = i * 2654435761 mod 2^32; the request's payload picks the scenario:

  "ok"          copy 4 KiB into a .bss buffer (DTCM on the H750), then 128 KiB
                (repeated blocks) into the AXI SRAM buffer, print both FNV-1a
                hashes and the per-copy byte counts; exit 0
  "twice"       start a second copy before waiting: the contract's fault
  "peek"        read the destination before waiting (only the H750 model can
                tell: elsewhere the copy is synchronous)
  "misaligned"  a destination 2 bytes off a word
"""
from __future__ import annotations

import struct

SMALL, BIG = 4096, 128 * 1024
WORDS = (SMALL + BIG) // 4


def source_blob() -> bytes:
    return b"".join(struct.pack("<I", (i * 2654435761) & 0xFFFFFFFF) for i in range(WORDS))


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def expected_ok_output() -> str:
    blob = source_blob()
    return (f"small {SMALL} fnv={fnv1a(blob[:SMALL]):08x}\n"
            f"big {BIG} fnv={fnv1a(blob[SMALL:SMALL + BIG]):08x}\n")


def request(payload: bytes) -> bytes:
    return b"TLRQ" + struct.pack("<I", 8 + len(payload)) + payload


def main_c(src_expr: str, axi_section: str = "") -> str:
    """src_expr: a C expression for the source blob's address (uint32_t *);
    axi_section: the section of the big destination (AXI SRAM on the H750)."""
    attr = f'__attribute__((aligned(32), section("{axi_section}")))' if axi_section else "__attribute__((aligned(32)))"
    return MAIN.replace("SRC_EXPR", src_expr).replace("AXI_ATTR", attr) \
        .replace("SMALL_BYTES", str(SMALL)).replace("BIG_BYTES", str(BIG)).replace("SRC_WORDS", str(WORDS))


MAIN = r"""
#include <stdint.h>
#include <string.h>
#include "tllm_board.h"

static uint32_t dst_small[SMALL_BYTES / 4] __attribute__((aligned(32)));
static uint32_t dst_big[BIG_BYTES / 4] AXI_ATTR;
#ifdef TLLM_HOST_SOURCE
static uint32_t host_src[SRC_WORDS];
#endif

static void say_hash(const char *label, uint32_t bytes, const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < bytes; ++i) {
        h = (h ^ b[i]) * 16777619u;
    }
    char line[64], *o = line;
    for (const char *s = label; *s; ++s) *o++ = *s;
    *o++ = ' ';
    char dec[12];
    int n = 0;
    do { dec[n++] = (char)('0' + bytes % 10u); bytes /= 10u; } while (bytes);
    while (n) *o++ = dec[--n];
    for (const char *s = " fnv="; *s; ++s) *o++ = *s;
    for (int k = 7; k >= 0; --k) *o++ = "0123456789abcdef"[(h >> (4 * k)) & 0xFu];
    *o++ = '\n';
    tllm_board_write(line, (size_t)(o - line));
}

int tllm_main(void)
{
    const uint32_t *src = SRC_EXPR;
#ifdef TLLM_HOST_SOURCE
    for (uint32_t i = 0; i < SRC_WORDS; ++i) host_src[i] = i * 2654435761u;
#endif
    size_t len = 0;
    const uint8_t *req = tllm_board_request(&len);
    const char *mode = (req != NULL && len > 8u) ? (const char *)req + 8 : "ok";
    const size_t mlen = (req != NULL && len > 8u) ? len - 8u : 2u;
    if (mlen == 5 && memcmp(mode, "twice", 5) == 0) {
        tllm_board_copy_start(dst_small, src, 64u);
        tllm_board_copy_start(dst_big, src, 64u);
        return 9;
    }
    if (mlen == 4 && memcmp(mode, "peek", 4) == 0) {
        tllm_board_copy_start(dst_small, src, SMALL_BYTES);
        volatile uint32_t first = dst_small[7];
        (void)first;
        tllm_board_copy_wait();
        return 9;
    }
    if (mlen == 10 && memcmp(mode, "misaligned", 10) == 0) {
        tllm_board_copy_start((uint8_t *)dst_small + 2, src, 64u);
        return 9;
    }
    tllm_board_copy_start(dst_small, src, SMALL_BYTES);
    tllm_board_copy_wait();
    say_hash("small", SMALL_BYTES, dst_small);
    tllm_board_copy_start(dst_big, src + SMALL_BYTES / 4, BIG_BYTES);
    tllm_board_copy_wait();
    tllm_board_copy_wait(); /* a second wait with nothing in flight returns at once */
    say_hash("big", BIG_BYTES, dst_big);
    return 0;
}
"""
