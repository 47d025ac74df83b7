/* Generated from codegen/abi.py by `python -m tinyllm_gen.abi` -- do not edit.
 * The constants the generator and the runtime must agree on; the runtime
 * _Static_asserts its structs against them. */
#ifndef TLLM_ABI_H
#define TLLM_ABI_H

#define TLLM_ABI_VERSION 7

/* weights blob (codegen/blob.py) */
#define TLLM_BLOB_MAGIC "TLLMWTS1"
#define TLLM_BLOB_MAGIC_BYTES 8u
#define TLLM_BLOB_VERSION 1u
#define TLLM_BLOB_HEADER_BYTES 64u

/* request frame (codegen/protocol.py) */
#define TLLM_REQUEST_MAGIC 0x51524C54u /* "TLRQ" read little-endian */
#define TLLM_REQUEST_VERSION 3u
#define TLLM_REQUEST_HEADER_BYTES 48u
#define TLLM_REQUEST_CRC_OFFSET 36u
#define TLLM_REQUEST_EXIT_AFTER 0x1u
#define TLLM_REQUEST_CONTINUE 0x2u /* the new turn of the conversation the board holds */
#define TLLM_REQUEST_HISTORY_TOKENS_OFFSET 40u
#define TLLM_REQUEST_HISTORY_CRC_OFFSET 44u

/* q4x4 weight layout (codegen/quant/formats.py) */
#define TLLM_Q4X4_TILE 4u
#define TLLM_Q4X4_BLOCK 8u
#define TLLM_TILE_SPILL 3 /* floats a 4-row tile kernel may write past a batch's last row */

/* INT4 weight group sizes (--group-size) */
#define TLLM_GROUP_SIZE_OK(g) ((g) == 32 || (g) == 64 || (g) == 128)

/* batched prefill: tokens per weight pass at most (codegen/lower/prefill.py) */
#define TLLM_MAX_BATCH 4

/* speculative decoding: guesses per verification pass at most; the prompt-lookup draft's n-grams */
#define TLLM_SPECULATE_MAX_K 3
#define TLLM_LOOKUP_NGRAM_MAX 4
#define TLLM_LOOKUP_NGRAM_MIN 1

/* the generation state's planned buffer: sizeof(tllm_gen_state) at most (tllm_model_api.h) */
#define TLLM_GEN_STATE_BYTES 64u

/* exit statuses */
#define TLLM_EXIT_OK             0 /* ok */
#define TLLM_EXIT_BAD_REQUEST    3 /* bad request */
#define TLLM_EXIT_BAD_WEIGHTS    4 /* weights blob mismatch */
#define TLLM_EXIT_CANARY         5 /* arena or stack canary broken */
#define TLLM_EXIT_HISTORY        6 /* continue refused: the board holds another history */
#define TLLM_EXIT_CONTEXT_FULL   7 /* continue refused: the conversation would not fit the context */
#define TLLM_EXIT_UNEXPECTED_IRQ 249 /* unexpected interrupt */
#define TLLM_EXIT_HARDFAULT      250 /* HardFault */
#define TLLM_EXIT_MEMMANAGE      251 /* MemManage fault (stack overflow?) */
#define TLLM_EXIT_BUSFAULT       252 /* BusFault */
#define TLLM_EXIT_USAGEFAULT     253 /* UsageFault */
#define TLLM_EXIT_NMI            254 /* NMI */

#endif
