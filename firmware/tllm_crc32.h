/* CRC32 (IEEE 802.3, reflected, polynomial 0xEDB88320: zlib.crc32), shared by
 * the frame reader and console lines (tllm_frame.c) and the engine's history
 * CRC (tllm_engine.c, multi-turn KV reuse).  Header-only so the runtime
 * library and the console each get it without one linking the other.
 *
 * Half-byte table: 64 bytes of flash instead of 1 KiB; a request of a few
 * hundred bytes, a console line, two bytes per token are all it ever sees. */
#ifndef TLLM_CRC32_H
#define TLLM_CRC32_H

#include <stddef.h>
#include <stdint.h>

static const uint32_t TLLM_CRC_NIBBLE[16] = {
    0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u, 0x4DB26158u, 0x5005713Cu,
    0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu, 0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu,
};

/* The running (non-inverted) CRC register over n more bytes: start from
 * ~0u, invert at the end (tllm_crc32 does both). */
static inline uint32_t tllm_crc_update(uint32_t c, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        c = (c >> 4) ^ TLLM_CRC_NIBBLE[c & 15u];
        c = (c >> 4) ^ TLLM_CRC_NIBBLE[c & 15u];
    }
    return c;
}

#endif
