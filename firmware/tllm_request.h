/* The generation request the host hands the firmware (codegen/protocol.py
 * writes it). Little-endian, 4-byte aligned:
 *
 *   off  size  field
 *     0     4  magic "TLRQ"
 *     4     4  total length in bytes (header + ids, padded to 4)
 *     8     2  version (TLLM_REQUEST_VERSION)
 *    10     2  flags: bit 0 = exit after this generation (UART requests)
 *    12     4  n_prompt: prompt token ids that follow the header
 *    16     4  max_new_tokens
 *    20     4  temperature (float32; 0 = greedy)
 *    24     4  top_p (float32, in (0, 1])
 *    28     8  seed (uint64)
 *    36     4  CRC32 (zlib.crc32) of all total bytes, this field counted as 0
 *    40  2*n   prompt ids (uint16)
 *
 * Version 2 moved the flags next to the version to make room for the CRC
 * (the header stays 40 bytes, so the planned request buffer still holds the
 * longest prompt). Over the UART this is one frame (tllm_frame.h). */
#ifndef TLLM_REQUEST_H
#define TLLM_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "tllm_abi.h" /* TLLM_REQUEST_MAGIC, _VERSION, _HEADER_BYTES, _CRC_OFFSET, _EXIT_AFTER */

/* The header as the parser reads it: ten little-endian words. */
_Static_assert(TLLM_REQUEST_HEADER_BYTES == 10u * 4u, "request header is ten words (tllm_request_parse)");
_Static_assert(TLLM_REQUEST_CRC_OFFSET == 9u * 4u, "the CRC is the last header word");

typedef struct {
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    float temperature;
    float top_p;
    uint64_t seed;
    uint32_t flags;
    const uint8_t *ids; /* n_prompt little-endian uint16 */
} tllm_request;

/* 0 on success; otherwise a negative code and *why set to a short reason. */
int tllm_request_parse(const uint8_t *buf, size_t len, tllm_request *out, const char **why);

static inline uint16_t tllm_request_id(const tllm_request *r, uint32_t i) {
    return (uint16_t)(r->ids[2 * i] | (r->ids[2 * i + 1] << 8));
}

#endif
