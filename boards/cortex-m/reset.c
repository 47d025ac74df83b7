/* The first code after reset on every Cortex-M7 board: enable the FPU
 * (CP10/CP11 in CPACR) before the compiler may emit any floating-point
 * instruction, then continue in the board's own tllm_reset_c (copy .data,
 * zero .bss, clocks, ...).  Naked, so it touches no stack and no FPU
 * register before CPACR is set. */
void tllm_reset_c(void);

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
