/* tllm_icount: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that
 * counts guest instructions exactly, per address range, with snapshots.
 *
 * Debian ships QEMU's plugin loader but not qemu-plugin.h, so the handful
 * of API declarations this plugin uses are written out below (signatures
 * and enum values of the version-1 API).
 *
 * Arguments (-plugin tllm_icount.so,ranges=FILE,marker=ADDR,out=FILE):
 *   ranges  text file, one "start end" pair (hex, end exclusive) per line:
 *           the functions of the firmware image; instructions outside every
 *           range count in an extra "other" slot
 *   marker  address of a function the firmware calls between phases; each
 *           time it executes, the plugin snapshots every counter
 *   out     where to write the result at exit: one line per snapshot,
 *           "S <n> c0 c1 ... cN" (N = number of ranges, last = other)
 *
 * Counting is inline (a TCG add per instruction, no helper call), so it is
 * exact and repeatable; it costs QEMU about 1.7x in run time. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the version-1 plugin API (subset) ---- */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t; /* opaque here: never dereferenced */
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;
/* ---- end of API ---- */

#define MAX_RANGES 4096
#define MAX_SNAPSHOTS 20000

static uint64_t range_start[MAX_RANGES], range_end[MAX_RANGES];
static size_t n_ranges;
static uint64_t counts[MAX_RANGES + 1]; /* last slot: "other" */
static uint64_t marker = UINT64_MAX;
static uint64_t *snapshots; /* MAX_SNAPSHOTS x (n_ranges + 1) */
static size_t n_snapshots;
static char out_path[4096];

static size_t range_of(uint64_t pc) {
    size_t lo = 0, hi = n_ranges; /* ranges are sorted and disjoint */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pc < range_start[mid]) hi = mid;
        else if (pc >= range_end[mid]) lo = mid + 1;
        else return mid;
    }
    return n_ranges;
}

static void on_marker(unsigned int vcpu, void *udata) {
    (void)vcpu;
    (void)udata;
    if (n_snapshots < MAX_SNAPSHOTS) {
        memcpy(snapshots + n_snapshots * (n_ranges + 1), counts, (n_ranges + 1) * sizeof counts[0]);
        n_snapshots++;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        if (pc == marker) /* snapshot before the marker's first instruction counts */
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_marker, QEMU_PLUGIN_CB_NO_REGS, NULL);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &counts[range_of(pc)], 1);
    }
}

static void on_qemu_exit(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    FILE *f = fopen(out_path, "w");
    if (!f) return;
    fprintf(f, "R %zu\n", n_ranges);
    for (size_t s = 0; s <= n_snapshots; s++) {
        const uint64_t *c = s < n_snapshots ? snapshots + s * (n_ranges + 1) : counts;
        fprintf(f, s < n_snapshots ? "S %zu" : "E %zu", s);
        for (size_t r = 0; r <= n_ranges; r++) fprintf(f, " %" PRIu64, c[r]);
        fputc('\n', f);
    }
    fclose(f);
}

static int load_ranges(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long a, b;
    while (n_ranges < MAX_RANGES && fscanf(f, "%llx %llx", &a, &b) == 2) {
        range_start[n_ranges] = a;
        range_end[n_ranges] = b;
        n_ranges++;
    }
    fclose(f);
    return 0;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "ranges=", 7)) {
            if (load_ranges(argv[i] + 7)) return -1;
        } else if (!strncmp(argv[i], "marker=", 7)) {
            marker = strtoull(argv[i] + 7, NULL, 16);
        } else if (!strncmp(argv[i], "out=", 4)) {
            snprintf(out_path, sizeof out_path, "%s", argv[i] + 4);
        } else {
            fprintf(stderr, "tllm_icount: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    if (!out_path[0]) return -1;
    snapshots = calloc(MAX_SNAPSHOTS, (n_ranges + 1) * sizeof(uint64_t));
    if (!snapshots) return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_qemu_exit, NULL);
    return 0;
}
