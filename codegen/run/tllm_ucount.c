/* The guest instruction counter of the Unicorn runs (run/unicorn.py), as a
 * UC_HOOK_BLOCK callback in C.  The same count as the Python hook it replaces
 * (each block's Thumb-2 instructions, added when the block is entered; past
 * the limit the run stops), but a Python call per executed block cost about
 * 3 us: 80% of a run's wall time, half a million guest instructions per
 * second.  Unicorn's own entry points arrive as function pointers, so this
 * file needs no Unicorn headers and links against nothing. */
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*uc_mem_read_fn)(void *uc, uint64_t address, void *bytes, uint64_t size);
typedef int (*uc_emu_stop_fn)(void *uc);

/* Blocks seen, by (address, size): open addressing, linear probing. */
#define CACHE_SLOTS (1u << 18)

typedef struct {
    uint64_t key;   /* address << 16 | size; 0: empty (no block starts at 0: the vector table) */
    uint32_t count; /* its instructions */
} block_slot;

typedef struct {
    uint64_t executed;
    uint64_t limit;  /* 0: none */
    int32_t limit_hit;
    uc_mem_read_fn mem_read;
    uc_emu_stop_fn emu_stop;
    block_slot slots[CACHE_SLOTS];
} tllm_ucount;

/* A halfword whose top five bits are 0b11101, 0b11110 or 0b11111 starts a 32-bit instruction. */
static uint32_t thumb_instructions(const uint8_t *code, uint32_t size) {
    uint32_t n = 0;
    for (uint32_t i = 0; i + 1 < size; n++) {
        const uint32_t top = (uint32_t)code[i + 1] >> 3;
        i += (top == 0x1D || top == 0x1E || top == 0x1F) ? 4u : 2u;
    }
    return n;
}

static uint32_t block_instructions(tllm_ucount *c, void *uc, uint64_t address, uint32_t size) {
    const uint64_t key = address << 16 | (size & 0xFFFFu);
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 46) & (CACHE_SLOTS - 1u);
    for (uint32_t probe = 0; probe < 64u; probe++, h = (h + 1u) & (CACHE_SLOTS - 1u)) {
        block_slot *s = &c->slots[h];
        if (s->key == key)
            return s->count;
        if (s->key == 0) {
            uint8_t code[4096];
            const uint32_t n = size <= sizeof code && c->mem_read(uc, address, code, size) == 0
                                   ? thumb_instructions(code, size) : 0;
            s->key = key;
            s->count = n;
            return n;
        }
    }
    uint8_t code[4096]; /* a crowded neighbourhood: count without caching */
    return size <= sizeof code && c->mem_read(uc, address, code, size) == 0 ? thumb_instructions(code, size) : 0;
}

EXPORT tllm_ucount *tllm_ucount_new(void *mem_read, void *emu_stop, uint64_t limit) {
    tllm_ucount *c = calloc(1, sizeof *c);
    if (c) {
        c->mem_read = (uc_mem_read_fn)mem_read;
        c->emu_stop = (uc_emu_stop_fn)emu_stop;
        c->limit = limit;
    }
    return c;
}

EXPORT void tllm_ucount_free(tllm_ucount *c) { free(c); }

EXPORT uint64_t tllm_ucount_executed(const tllm_ucount *c) { return c->executed; }

EXPORT int32_t tllm_ucount_limit_hit(const tllm_ucount *c) { return c->limit_hit; }

/* uc_cb_hookcode_t: (uc_engine *, uint64_t address, uint32_t size, void *user_data) */
EXPORT void tllm_ucount_on_block(void *uc, uint64_t address, uint32_t size, void *user) {
    tllm_ucount *c = user;
    c->executed += block_instructions(c, uc, address, size);
    if (c->limit && c->executed > c->limit && !c->limit_hit) {
        c->limit_hit = 1;
        c->emu_stop(uc);
    }
}
