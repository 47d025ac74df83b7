/* The MDMA model's watch on a stream buffer in flight (run/unicorn.py), as a
 * Unicorn UC_HOOK_MEM_READ_PROT | UC_HOOK_MEM_WRITE_PROT callback in C.
 *
 * Why protection and not a memory hook: any UC_HOOK_MEM_READ/WRITE sends
 * every load and store of the run through Unicorn's slow path, and adding
 * and removing one per transfer (13,216 transfers per SmolLM2 token) cost
 * more than the guest's own work.  Instead the runner removes read and write
 * permission from the pages a transfer's destination covers while it is in
 * flight; only accesses to those pages arrive here.  An access inside a
 * pending range is the firmware's fault: it is recorded and refused (false:
 * Unicorn stops the run there with a protection error, which the runner
 * turns into the MDMA model's line).
 * An access to the rest of those pages (the other stream buffer, an
 * activation sharing the page) is let through: a read goes ahead when the
 * callback returns true, a write is discarded by Unicorn, so it is done here
 * with uc_mem_write (which writes protected memory).  Unicorn's entry points
 * arrive as function pointers, so this file needs no Unicorn headers. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))
#define WATCH_RANGES 16 /* one per MDMA channel */
#define UC_MEM_WRITE_PROT 22 /* uc_mem_type */

typedef int (*uc_mem_write_fn)(void *uc, uint64_t address, const void *bytes, uint64_t size);

typedef struct {
    uint64_t lo[WATCH_RANGES], hi[WATCH_RANGES]; /* [lo, hi) pending; lo == hi: none */
    uc_mem_write_fn mem_write;
    int32_t hit;        /* an access inside a pending range was seen */
    int32_t hit_write;  /* ... and it was a write */
    uint64_t hit_address, hit_size;
} tllm_uwatch;

EXPORT tllm_uwatch *tllm_uwatch_new(void *mem_write) {
    tllm_uwatch *w = calloc(1, sizeof *w);
    if (w) {
        w->mem_write = (uc_mem_write_fn)mem_write;
    }
    return w;
}

EXPORT void tllm_uwatch_free(tllm_uwatch *w) { free(w); }

EXPORT void tllm_uwatch_set(tllm_uwatch *w, uint32_t slot, uint64_t lo, uint64_t hi) {
    if (slot < WATCH_RANGES) {
        w->lo[slot] = lo;
        w->hi[slot] = hi;
    }
}

EXPORT int32_t tllm_uwatch_hit(const tllm_uwatch *w, uint64_t *address, uint64_t *size, int32_t *write) {
    *address = w->hit_address;
    *size = w->hit_size;
    *write = w->hit_write;
    return w->hit;
}

/* uc_cb_eventmem_t: (uc_engine *, uc_mem_type, uint64_t address, int size, int64_t value, void *user_data) */
EXPORT bool tllm_uwatch_on_prot(void *uc, int type, uint64_t address, int size, int64_t value, void *user) {
    tllm_uwatch *w = user;
    const bool write = type == UC_MEM_WRITE_PROT;
    for (uint32_t i = 0; i < WATCH_RANGES; i++) {
        if (w->lo[i] < address + (uint64_t)size && address < w->hi[i]) {
            if (!w->hit) {
                w->hit = 1;
                w->hit_write = write;
                w->hit_address = address;
                w->hit_size = (uint64_t)size;
            }
            return false;
        }
    }
    if (write) {
        const uint64_t v = (uint64_t)value; /* little-endian host and guest: the low `size` bytes */
        w->mem_write(uc, address, &v, (uint64_t)size);
    }
    return true;
}
