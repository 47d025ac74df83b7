/* The generation request the host hands the firmware (codegen/protocol.py
 * writes it). Little-endian, 4-byte aligned:
 *
 *   off  size  field
 *     0     4  magic "TLRQ"
 *     4     4  total length in bytes (header + ids, padded to 4)
 *     8     2  version (TLLM_REQUEST_VERSION)
 *    10     2  flags: bit 0 = exit after this generation (UART requests),
 *                     bit 1 = continue the conversation the board holds
 *    12     4  n_prompt: prompt token ids that follow the header (a continue: the new turn's, may be 0)
 *    16     4  max_new_tokens
 *    20     4  temperature (float32; 0 = greedy)
 *    24     4  top_p (float32, in (0, 1])
 *    28     8  seed (uint64)
 *    36     4  CRC32 (zlib.crc32) of all total bytes, this field counted as 0
 *    40     4  history_tokens: a continue's, the conversation the board must hold (tllm_history); else 0
 *    44     4  history_crc: CRC32 of those ids as little-endian uint16; else 0
 *    48  2*n   prompt ids (uint16)
 *
 * Version 2 moved the flags next to the version to make room for the CRC;
 * version 3 added the history fields (multi-turn KV reuse). Over the UART
 * this is one frame (tllm_frame.h). */
#ifndef TLLM_REQUEST_H
#define TLLM_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "tllm_abi.h" /* TLLM_REQUEST_MAGIC, _VERSION, _HEADER_BYTES, _CRC_OFFSET, _EXIT_AFTER, _CONTINUE */

/* The header as the parser reads it: twelve little-endian words. */
_Static_assert(TLLM_REQUEST_HEADER_BYTES == 12u * 4u, "request header is twelve words (tllm_request_parse)");
_Static_assert(TLLM_REQUEST_CRC_OFFSET == 9u * 4u, "the CRC is header word 9");
_Static_assert(TLLM_REQUEST_HISTORY_TOKENS_OFFSET == 10u * 4u && TLLM_REQUEST_HISTORY_CRC_OFFSET == 11u * 4u,
               "the history fields are header words 10 and 11");
/* The ids are handed to the engine where they lie in the request (no copy
 * into the token buffer before the request is accepted): little-endian
 * uint16 on the wire and in every target's memory. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the request's ids are read in place: a little-endian target only"
#endif

typedef struct {
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    float temperature;
    float top_p;
    uint64_t seed;
    uint32_t flags;
    uint32_t history_tokens; /* a continue's (flags & TLLM_REQUEST_CONTINUE): the history named */
    uint32_t history_crc;
    const uint16_t *ids; /* n_prompt ids, in the request buffer */
} tllm_request;

/* 0 on success; otherwise a negative code and *why set to a short reason. */
int tllm_request_parse(const uint8_t *buf, size_t len, tllm_request *out, const char **why);

#endif
