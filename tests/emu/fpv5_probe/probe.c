/* A minimal bare-metal program that shows which FPv5 instructions an
 * emulator executes correctly (tests/emu/test_renode_fpv5.py).
 *
 * The Cortex-M7's FPv5 adds ARMv8's VMAXNM/VMINNM, VCVTA/N/P/M, VRINT* and
 * VSEL to VFPv4; gcc emits VMAXNM for fmaxf and VCVTA for lroundf-like
 * rounding with -mfpu=fpv5-d16.  For every input pair the program stores the
 * result of each instruction in out[] (words, in a fixed order), then the
 * word DONE; an instruction that faults (UsageFault, escalated to HardFault)
 * is skipped by the handler and its slot reads FAULT.  Then the core spins
 * at probe_done.  Compare out[] between Renode, QEMU and Unicorn: QEMU and
 * Unicorn agree with the Arm ARM; Renode 1.15.1 does not.
 *
 * -DPROBE_NO_THUNKLESS leaves out VMAXNM.F64 and VRINTA, for which the
 * Renode workaround (boards/stm32h750/renode/tllm_fpv5.py.j2) has no
 * thunk, so the rest can be checked with the workaround applied.
 *
 * Build: arm-none-eabi-gcc -mcpu=cortex-m7 -mthumb -mfpu=fpv5-d16
 *   -mfloat-abi=hard -O1 -nostdlib -ffreestanding -DCODE_ORIGIN=... -T probe.ld */
#include <stdint.h>

#define FAULT 0xFA17FA17u
#define DONE 0x454E4F44u /* "DONE" */
#define N_OUT 2048

volatile uint32_t out[N_OUT] __attribute__((section(".out")));
volatile uint32_t faulted;
extern uint32_t __stack_top[];
void reset(void);
void hardfault(void);
void probe_done(void);

__attribute__((section(".vectors"), used)) const void *const vectors[8] = {
    __stack_top, reset, hardfault, hardfault, hardfault, hardfault, hardfault, hardfault};

/* Skip the faulting (32-bit) instruction and note the fault. */
__attribute__((naked)) void hardfault(void)
{
    __asm volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, [r0, #24]\n adds r1, #4\n str r1, [r0, #24]\n"
                   "ldr r1, =faulted\n movs r2, #1\n str r2, [r1]\n bx lr\n .ltorg");
}

/* Single precision: edge cases (signed zeros, halves, ties, the int32 and
 * uint32 limits, infinities, quiet and signalling NaNs, subnormals), then
 * pseudo-random bit patterns. */
static const uint32_t f32_edges[] = {
    0x00000000, 0x80000000, 0x3F000000, 0xBF000000, 0x3FC00000, 0xBFC00000, 0x40200000, 0xC0200000,
    0x3EFFFFFF, 0xBEFFFFFF, 0x3F400000, 0x3E800000, 0x406CCCCD, 0xC06CCCCD, 0x4AFFFFFF, 0x4B000000,
    0x4EFFFFFF, 0x4F000000, 0xCF000000, 0xCF000001, 0x4F800000, 0x4F7FFFFF, 0x7F800000, 0xFF800000,
    0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFA00000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
};
static const uint64_t f64_edges[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x3FE0000000000000ull, 0xBFE0000000000000ull,
    0x3FF8000000000000ull, 0xC004000000000000ull, 0x3FDFFFFFFFFFFFFFull, 0xBFDFFFFFFFFFFFFFull,
    0x41DFFFFFFFC00000ull, 0x41DFFFFFFFE00000ull, 0x41E0000000000000ull, 0xC1E0000000000000ull,
    0xC1E0000000100000ull, 0x41EFFFFFFFF00000ull, 0x41F0000000000000ull, 0x7FF0000000000000ull,
    0xFFF0000000000000ull, 0x7FF8000000000000ull, 0x7FF0000000000001ull, 0x0000000000000001ull,
};
#define N_F32 64
#define N_F64 32

static uint32_t lcg;
static uint32_t next(void)
{
    lcg = lcg * 1664525u + 1013904223u;
    return lcg;
}

/* Random floats of every magnitude near the rounding cases: exponents
 * 100..160, any sign and mantissa. */
static uint32_t random_f32(void)
{
    const uint32_t r = next();
    return (r & 0x807FFFFFu) | ((100u + (next() >> 8) % 61u) << 23);
}

static uint64_t random_f64(void)
{
    const uint64_t hi = next(), lo = next();
    return ((hi & 0x800FFFFFu) | ((uint64_t)(1000u + (next() >> 8) % 60u) << 20)) << 32 | lo;
}

static inline float f_of(uint32_t u)
{
    union { uint32_t u; float f; } v = {u};
    return v.f;
}
static inline uint32_t u_of(float f)
{
    union { float f; uint32_t u; } v = {f};
    return v.u;
}
static inline double d_of(uint64_t u)
{
    union { uint64_t u; double d; } v = {u};
    return v.d;
}
static inline uint64_t ud_of(double d)
{
    union { double d; uint64_t u; } v = {d};
    return v.u;
}

#define OP2S(name, insn)                                                                                     \
    static inline uint32_t name(uint32_t a, uint32_t b)                                                     \
    {                                                                                                        \
        float r = f_of(0xDEAD0001u);                                                                         \
        __asm volatile(insn " %0, %1, %2" : "+t"(r) : "t"(f_of(a)), "t"(f_of(b)));                           \
        return u_of(r);                                                                                      \
    }
#define OP1S(name, insn)                                                                                     \
    static inline uint32_t name(uint32_t a)                                                                  \
    {                                                                                                        \
        float r = f_of(0xDEAD0001u);                                                                         \
        __asm volatile(insn " %0, %1" : "+t"(r) : "t"(f_of(a)));                                             \
        return u_of(r);                                                                                      \
    }
#define OP1D(name, insn) /* double in, single (an integer) out */                                           \
    static inline uint32_t name(uint64_t a)                                                                  \
    {                                                                                                        \
        float r = f_of(0xDEAD0001u);                                                                         \
        __asm volatile(insn " %0, %P1" : "+t"(r) : "w"(d_of(a)));                                            \
        return u_of(r);                                                                                      \
    }
#define OP2D(name, insn)                                                                                     \
    static inline uint64_t name(uint64_t a, uint64_t b)                                                     \
    {                                                                                                        \
        double r = d_of(0xDEAD0001DEAD0001ull);                                                              \
        __asm volatile(insn " %P0, %P1, %P2" : "+w"(r) : "w"(d_of(a)), "w"(d_of(b)));                        \
        return ud_of(r);                                                                                     \
    }

OP2S(maxnm_s, "vmaxnm.f32")
OP2S(minnm_s, "vminnm.f32")
OP1S(cvta_s32_s, "vcvta.s32.f32")
OP1S(cvtn_s32_s, "vcvtn.s32.f32")
OP1S(cvtp_s32_s, "vcvtp.s32.f32")
OP1S(cvtm_s32_s, "vcvtm.s32.f32")
OP1S(cvta_u32_s, "vcvta.u32.f32")
OP1S(cvtn_u32_s, "vcvtn.u32.f32")
OP1S(cvtp_u32_s, "vcvtp.u32.f32")
OP1S(cvtm_u32_s, "vcvtm.u32.f32")
#ifndef PROBE_NO_THUNKLESS
OP1S(rinta_s, "vrinta.f32")
#endif
OP1D(cvta_s32_d, "vcvta.s32.f64")
OP1D(cvtn_s32_d, "vcvtn.s32.f64")
OP1D(cvtp_s32_d, "vcvtp.s32.f64")
OP1D(cvtm_s32_d, "vcvtm.s32.f64")
OP1D(cvta_u32_d, "vcvta.u32.f64")
OP1D(cvtm_u32_d, "vcvtm.u32.f64")
#ifndef PROBE_NO_THUNKLESS
OP2D(maxnm_d, "vmaxnm.f64")
#endif
/* VFPv4 instructions for comparison (Renode 1.15.1 gets these right) */
OP2S(div_s, "vdiv.f32")
OP1S(cvt_s32_s, "vcvt.s32.f32")
OP1S(cvtr_s32_s, "vcvtr.s32.f32")
OP1S(cvtb_f32_f16, "vcvtb.f32.f16")

static inline uint32_t selgt_s(uint32_t a, uint32_t b)
{
    float r = f_of(0xDEAD0001u);
    __asm volatile("cmp %3, #0\n vselgt.f32 %0, %1, %2" : "+t"(r) : "t"(f_of(a)), "t"(f_of(b)), "r"(a) : "cc");
    return u_of(r);
}

static int n;
static void put(uint32_t v)
{
    if (n < N_OUT - 1) {
        out[n++] = faulted ? FAULT : v;
    }
    faulted = 0;
}

void reset(void)
{
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10/CP11 full access */
    __asm volatile("dsb\n isb" ::: "memory");
    lcg = 0x12345678u;
    uint32_t s[N_F32];
    uint64_t d[N_F64];
    for (int i = 0; i < N_F32; i++) {
        s[i] = i < (int)(sizeof f32_edges / 4) ? f32_edges[i] : random_f32();
    }
    for (int i = 0; i < N_F64; i++) {
        d[i] = i < (int)(sizeof f64_edges / 8) ? f64_edges[i] : random_f64();
    }
    faulted = 0;
    n = 0;
    for (int i = 0; i < N_F32; i++) { /* 14 words per input */
        const uint32_t a = s[i], b = s[(i * 7 + 3) % N_F32];
        put(maxnm_s(a, b));
        put(minnm_s(a, b));
        put(cvta_s32_s(a));
        put(cvtn_s32_s(a));
        put(cvtp_s32_s(a));
        put(cvtm_s32_s(a));
        put(cvta_u32_s(a));
        put(cvtn_u32_s(a));
        put(cvtp_u32_s(a));
        put(cvtm_u32_s(a));
        put(div_s(a, b));
        put(cvt_s32_s(a));
        put(cvtr_s32_s(a));
        put(selgt_s(a, b));
    }
    for (int i = 0; i < N_F64; i++) { /* 8 words per input */
        const uint64_t a = d[i], b = d[(i * 5 + 1) % N_F64];
        put(cvta_s32_d(a));
        put(cvtn_s32_d(a));
        put(cvtp_s32_d(a));
        put(cvtm_s32_d(a));
        put(cvta_u32_d(a));
        put(cvtm_u32_d(a));
#ifndef PROBE_NO_THUNKLESS
        const uint64_t m = maxnm_d(a, b);
        put((uint32_t)m);
        put((uint32_t)(m >> 32));
#else
        put((uint32_t)b);
        put((uint32_t)(b >> 32));
#endif
    }
    for (int i = 0; i < 8; i++) { /* 2 words per input */
#ifndef PROBE_NO_THUNKLESS
        put(rinta_s(s[i * 3]));
#else
        put(s[i * 3]);
#endif
        put(cvtb_f32_f16(s[40 + i] >> 3));
    }
    /* every pair of edge cases through VMAXNM/VMINNM.F32 (NaN against NaN, signed zeros...), hashed */
    uint32_t hmax = 2166136261u, hmin = 2166136261u;
    for (int i = 0; i < (int)(sizeof f32_edges / 4); i++) {
        for (int j = 0; j < (int)(sizeof f32_edges / 4); j++) {
            hmax = (hmax ^ maxnm_s(f32_edges[i], f32_edges[j])) * 16777619u;
            hmin = (hmin ^ minnm_s(f32_edges[i], f32_edges[j])) * 16777619u;
        }
    }
    put(hmax);
    put(hmin);
    put(DONE);
    probe_done();
}

__attribute__((noinline, used)) void probe_done(void)
{
    for (;;) {
        __asm volatile("nop");
    }
}
