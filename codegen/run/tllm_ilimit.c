/* tllm_ilimit: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that ends
 * a run after a given number of guest instructions, so an emulator run is
 * bounded by the work it does, not by how busy the host is.
 *
 * Argument: -plugin tllm_ilimit.so,limit=N   (N guest instructions)
 * Past N, it prints "tllm_ilimit: stopped after N guest instructions" on
 * stderr and ends QEMU with exit status 124 (TLLM_ILIMIT_EXIT, run/qemu.py).
 *
 * Each translated block adds its instruction count when it executes (one
 * helper call per block, cheaper than per-instruction counting); the count
 * can pass N by at most one block before the check stops it.  Debian ships
 * QEMU's plugin loader but not qemu-plugin.h: the few declarations used are
 * written out below (the version-1 API's signatures). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the version-1 plugin API (subset) ---- */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t; /* opaque here: never dereferenced */
struct qemu_plugin_tb;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;
/* ---- end of API ---- */

#define TLLM_ILIMIT_EXIT 124

static uint64_t executed, limit = UINT64_MAX;

static void on_block(unsigned int vcpu, void *udata) {
    (void)vcpu;
    executed += (uint64_t)(uintptr_t)udata;
    if (executed > limit) {
        fprintf(stderr, "tllm_ilimit: stopped after %" PRIu64 " guest instructions\n", limit);
        fflush(stderr);
        _exit(TLLM_ILIMIT_EXIT); /* from a vCPU thread: no atexit handlers to wait on the others */
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS,
                                         (void *)(uintptr_t)qemu_plugin_tb_n_insns(tb));
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "limit=", 6)) {
            limit = strtoull(argv[i] + 6, NULL, 10);
        } else {
            fprintf(stderr, "tllm_ilimit: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
