/* The reset path of every Cortex-M7 board, on the symbols of
 * boards/cortex-m/linker.ld.j2 (the same names on every board):
 *
 *   Reset_Handler          FPU on (CP10/CP11 in CPACR) before the compiler
 *                          may emit any floating-point instruction; naked, so
 *                          it touches no stack and no FPU register first
 *   tllm_board_early_init  the board's: what must precede any RAM access
 *                          (the H750's D2 SRAM clocks); .data/.bss not ready
 *   .data copied, .bss zeroed
 *   tllm_board_bringup     the board's: clocks, external flash, caches, MPU,
 *                          fault configuration (may use .data/.bss)
 *   every arena zeroed     the zero table, after bring-up so it runs at full
 *                          clock with the caches on; a static array is zero on
 *                          the host too
 *   stack painted          for tllm_board_stack_peak()
 *   constructors, tllm_board_init(), tllm_main(), tllm_board_exit()
 *
 * The vector table and fault handlers stay in each board's startup.c. */
#include <stddef.h>
#include <stdint.h>

#include "tllm_board.h"

#define STACK_CANARY 0xC5C5C5C5u

extern uint32_t __stack_limit__[];
extern uint32_t __stack_top__[];
extern uint32_t __data_load__[];
extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t *__zero_table_start__[];
extern uint32_t *__zero_table_end__[];
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);

void tllm_board_early_init(void);
void tllm_board_bringup(void);
void Reset_Handler(void);
void tllm_reset_c(void) __attribute__((noreturn, used));

__attribute__((naked)) void Reset_Handler(void)
{
    __asm volatile(
        "ldr r0, =0xE000ED88\n"   /* CPACR */
        "ldr r1, [r0]\n"
        "orr r1, r1, #(0xF << 20)\n"
        "str r1, [r0]\n"
        "dsb\n"
        "isb\n"
        "b tllm_reset_c\n"
        ".ltorg\n");
}

void tllm_reset_c(void)
{
    tllm_board_early_init();
    /* Volatile stops gcc from turning the loops into memcpy/memset calls
     * (harmless, but keep boot self-contained). */
    volatile uint32_t *dst = __data_start__;
    const uint32_t *src = __data_load__;
    while (dst < __data_end__) {
        *dst++ = *src++;
    }
    for (dst = __bss_start__; dst < __bss_end__; ++dst) {
        *dst = 0u;
    }
    tllm_board_bringup();
    for (uint32_t **z = __zero_table_start__; z < __zero_table_end__; z += 2) {
        for (dst = z[0]; dst < z[1]; ++dst) {
            *dst = 0u;
        }
    }
    uint32_t sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (dst = __stack_limit__; (uintptr_t)dst < (uintptr_t)sp - 64u; ++dst) {
        *dst = STACK_CANARY;
    }
    for (void (**f)(void) = __init_array_start; f < __init_array_end; ++f) {
        (*f)();
    }
    tllm_board_init();
    tllm_board_exit(tllm_main());
}

/* Bytes of stack ever used since reset (0 if the canary was never touched). */
size_t tllm_board_stack_peak(void)
{
    const uint32_t *p = __stack_limit__;
    while (p < __stack_top__ && *p == STACK_CANARY) {
        ++p;
    }
    return (size_t)((uintptr_t)__stack_top__ - (uintptr_t)p);
}
