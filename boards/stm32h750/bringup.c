/* STM32H750 bring-up from reset, so that a board flashed with nothing but
 * this firmware runs it: the 480 MHz clock tree, QUADSPI in memory-mapped
 * mode for the weights, then the L1 caches.  Register facts: RM0433 (RCC,
 * PWR, SYSCFG, FLASH, QUADSPI), the Cortex-M7 TRM (caches) and the flash
 * chips' datasheets; the board's pins and chip come from board_config.h.
 *
 * Clock: PLL1 from HSI (64 MHz, so no board crystal to get wrong) /4 x60 =
 * 960 MHz VCO, /2 = 480 MHz on revision V silicon (VOS0, overdrive on), 400
 * MHz (VOS1) on the older revision Y; AHB /2, every APB /2, flash 4 wait
 * states.  tllm_bringup_pclk_hz is the APB clock the console USART divides.
 *
 * QUADSPI: the link is board data (board.json "qspi_flash", generated into
 * board_config.h with the datasheet source of each limit beside it): kernel
 * clock PLL2R (132 MHz) / (TLLM_QSPI_PRESCALER + 1), 132 MHz on both boards,
 * SDR, TLLM_QSPI_DCYC dummy cycles, TLLM_QSPI_CSHT + 1 cycles of chip select
 * high.  The W25Q64 (WeAct) gets its volatile QE bit set and is read with
 * QUAD OUTPUT FAST READ (6Bh, 3-byte address, 8 dummy cycles); the two
 * MT25QL512 of the DK, in dual-flash mode, are first taken out of QPI mode
 * (F5h on four lines, harmless if they are not in it) and read with the
 * 4-byte-address QUAD OUTPUT FAST READ (6Ch, 8 dummy cycles by default).
 * SSHIFT samples half a cycle late, which the flash's clock-to-output time
 * needs at this clock.
 *
 * SDRAM (only when board_config.h defines TLLM_SDRAM_BASE: a build whose plan
 * puts the KV cache there, `--kv-region sdram`): the FMC's pins, SDCRx and
 * SDTRx from the part's geometry and timings (board.json "sdram", encoded by
 * codegen/families/stm32h750/registers.py), the FMC enabled, then the part's
 * power-up sequence: clock enable, the power-up wait, precharge all, eight
 * auto-refreshes, load mode register, and the refresh rate.  Then an MPU
 * region makes the window Normal write-back memory: the default memory map
 * has 0xC0000000-0xDFFFFFFF as Device memory, uncached, where an unaligned
 * load faults.  docs/sdram.md has the sources. */
#include <stdint.h>

#include "board_config.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

#define RCC_BASE 0x58024400u
#define RCC_CR REG(RCC_BASE + 0x000u)
#define RCC_CFGR REG(RCC_BASE + 0x010u)
#define RCC_D1CFGR REG(RCC_BASE + 0x018u)
#define RCC_D2CFGR REG(RCC_BASE + 0x01Cu)
#define RCC_D3CFGR REG(RCC_BASE + 0x020u)
#define RCC_PLLCKSELR REG(RCC_BASE + 0x028u)
#define RCC_PLLCFGR REG(RCC_BASE + 0x02Cu)
#define RCC_PLL1DIVR REG(RCC_BASE + 0x030u)
#define RCC_PLL2DIVR REG(RCC_BASE + 0x038u)
#define RCC_D1CCIPR REG(RCC_BASE + 0x04Cu)
#define RCC_AHB3ENR REG(RCC_BASE + 0x0D4u)
#define RCC_AHB4ENR REG(RCC_BASE + 0x0E0u)
#define RCC_APB4ENR REG(RCC_BASE + 0x0F4u)
#define RCC_CR_HSION (1u << 0)
#define RCC_CR_HSIRDY (1u << 2)
#define RCC_CR_PLL1ON (1u << 24)
#define RCC_CR_PLL1RDY (1u << 25)
#define RCC_CR_PLL2ON (1u << 26)
#define RCC_CR_PLL2RDY (1u << 27)
#define RCC_CFGR_SW_PLL1 3u
#define RCC_CFGR_SWS(v) (((v) >> 3) & 7u)

#define PWR_BASE 0x58024800u
#define PWR_CSR1 REG(PWR_BASE + 0x004u)
#define PWR_CR3 REG(PWR_BASE + 0x00Cu)
#define PWR_D3CR REG(PWR_BASE + 0x018u)
#define PWR_CR3_BYPASS (1u << 0)
#define PWR_CR3_LDOEN (1u << 1)
#define PWR_CR3_SCUEN (1u << 2)
#define PWR_CSR1_ACTVOSRDY (1u << 13)
#define PWR_D3CR_VOSRDY (1u << 13)
#define PWR_D3CR_VOS_SCALE1 (3u << 14)

#define SYSCFG_PWRCR REG(0x5800042Cu)
#define DBGMCU_IDC REG(0x5C001000u)
#define REV_ID_V 0x2003u

#define FLASH_ACR REG(0x52002000u)
#define FLASH_ACR_4WS_WRHIGHFREQ2 ((2u << 4) | 4u)

#define QSPI_BASE 0x52005000u
#define QSPI_CR REG(QSPI_BASE + 0x00u)
#define QSPI_DCR REG(QSPI_BASE + 0x04u)
#define QSPI_SR REG(QSPI_BASE + 0x08u)
#define QSPI_FCR REG(QSPI_BASE + 0x0Cu)
#define QSPI_DLR REG(QSPI_BASE + 0x10u)
#define QSPI_CCR REG(QSPI_BASE + 0x14u)
#define QSPI_DR8 (*(volatile uint8_t *)(QSPI_BASE + 0x20u))
#define QSPI_CR_EN (1u << 0)
#define QSPI_CR_SSHIFT (1u << 4)
#define QSPI_CR_DFM (1u << 6)
#define QSPI_CR_PRESCALER(p) ((uint32_t)(p) << 24)
#define QSPI_SR_TCF (1u << 1)
#define QSPI_SR_BUSY (1u << 5)
#define QSPI_FCR_CTCF (1u << 1)
/* CCR fields: instruction, then (modes: 0 none, 1 one line, 3 four lines) */
#define CCR_INSTR(c) ((uint32_t)(c))
#define CCR_IMODE(m) ((uint32_t)(m) << 8)
#define CCR_ADMODE(m) ((uint32_t)(m) << 10)
#define CCR_ADSIZE(bytes) ((uint32_t)((bytes) - 1u) << 12)
#define CCR_DCYC(n) ((uint32_t)(n) << 18)
#define CCR_DMODE(m) ((uint32_t)(m) << 24)
#define CCR_FMODE_MEMORY_MAPPED (3u << 26)

#define FMC_BASE 0x52004000u
#define FMC_BCR1 REG(FMC_BASE + 0x000u)
#define FMC_SDCR1 REG(FMC_BASE + 0x140u)
#define FMC_SDCR2 REG(FMC_BASE + 0x144u)
#define FMC_SDTR1 REG(FMC_BASE + 0x148u)
#define FMC_SDTR2 REG(FMC_BASE + 0x14Cu)
#define FMC_SDCMR REG(FMC_BASE + 0x150u)
#define FMC_SDRTR REG(FMC_BASE + 0x154u)
#define FMC_BCR1_FMCEN (1u << 31)
/* SDCMR: MODE (bits 0-2), CTB2 (3) / CTB1 (4), NRFS - 1 (5-8), MRD (9-21) */
#define SDCMR_CLOCK_ENABLE 1u
#define SDCMR_PALL 2u
#define SDCMR_AUTO_REFRESH 3u
#define SDCMR_LOAD_MODE 4u
#define SDCMR_NRFS(n) ((uint32_t)((n) - 1u) << 5)
#define SDCMR_MRD(m) ((uint32_t)(m) << 9)
#define RCC_AHB3ENR_FMCEN (1u << 12)

#define MPU_CTRL REG(0xE000ED94u)
#define MPU_RNR REG(0xE000ED98u)
#define MPU_RBAR REG(0xE000ED9Cu)
#define MPU_RASR REG(0xE000EDA0u)
#define MPU_CTRL_ENABLE_PRIVDEFENA 5u /* the default map stays behind the regions for privileged code */

#define SCB_CCR REG(0xE000ED14u)
#define SCB_CCSIDR REG(0xE000ED80u)
#define SCB_CSSELR REG(0xE000ED84u)
#define SCB_ICIALLU REG(0xE000EF50u)
#define SCB_DCISW REG(0xE000EF60u)
#define SCB_CCR_DC (1u << 16)
#define SCB_CCR_IC (1u << 17)

uint32_t tllm_bringup_pclk_hz;

static void barrier(void)
{
    __asm volatile("dsb\n isb" ::: "memory");
}

/* ---- clocks --------------------------------------------------------- */

static void clock_init(void)
{
    const int rev_v = (DBGMCU_IDC >> 16) == REV_ID_V;
    /* Supply from the LDO (no SMPS on the H750), then wait for it. */
    PWR_CR3 = (PWR_CR3 & ~(PWR_CR3_SCUEN | PWR_CR3_BYPASS)) | PWR_CR3_LDOEN;
    while (!(PWR_CSR1 & PWR_CSR1_ACTVOSRDY)) {
    }
    PWR_D3CR = (PWR_D3CR & ~(3u << 14)) | PWR_D3CR_VOS_SCALE1;
    while (!(PWR_D3CR & PWR_D3CR_VOSRDY)) {
    }
    if (rev_v) { /* VOS0: scale 1 plus the overdrive, which SYSCFG holds */
        RCC_APB4ENR |= 1u << 1; /* SYSCFGEN */
        (void)RCC_APB4ENR;
        SYSCFG_PWRCR |= 1u;     /* ODEN */
        while (!(PWR_D3CR & PWR_D3CR_VOSRDY)) {
        }
    }
    /* A bootloader may have left PLL1 running the core: back to HSI first,
     * since PLL1's dividers only take writes while it is off. */
    RCC_CR |= RCC_CR_HSION;
    while (!(RCC_CR & RCC_CR_HSIRDY)) {
    }
    RCC_CFGR &= ~7u;
    while (RCC_CFGR_SWS(RCC_CFGR) != 0u) {
    }
    RCC_CR &= ~(RCC_CR_PLL1ON | RCC_CR_PLL2ON);
    while (RCC_CR & (RCC_CR_PLL1RDY | RCC_CR_PLL2RDY)) {
    }
    /* HSI 64 MHz / M=4 = 16 MHz (input range 8-16 MHz), x N into the wide
     * VCO, / P=2 for the core, Q=4 and R=2 enabled for peripherals.
     * PLL2 (QUADSPI's kernel clock, board_config.h's TLLM_QSPI_KERNEL_SEL):
     * the same 16 MHz x 33 = 528 MHz wide VCO, / R=4 = 132 MHz, so the link
     * runs at 132 MHz with prescaler 1, the fastest the chips' 133 MHz STR
     * and the H750's 133 MHz SDR limits allow from a 16 MHz step. */
    const uint32_t n = rev_v ? 60u : 50u;
    /* DIVM2 = DIVM1 = 4, source HSI */
    RCC_PLLCKSELR = (RCC_PLLCKSELR & ~((0x3Fu << 12) | (0x3Fu << 4) | 3u)) | (4u << 12) | (4u << 4);
    RCC_PLLCFGR = (RCC_PLLCFGR & ~0xFFu) | (3u << 6) | (3u << 2) | (7u << 16) | (1u << 21); /* RGE 8-16 MHz, wide
                                                                                          * VCOs, P1/Q1/R1, R2 on */
    RCC_PLL1DIVR = (n - 1u) | ((2u - 1u) << 9) | ((4u - 1u) << 16) | ((2u - 1u) << 24);
    RCC_PLL2DIVR = (33u - 1u) | ((2u - 1u) << 9) | ((2u - 1u) << 16) | ((4u - 1u) << 24);
    RCC_CR |= RCC_CR_PLL1ON | RCC_CR_PLL2ON;
    while ((RCC_CR & (RCC_CR_PLL1RDY | RCC_CR_PLL2RDY)) != (RCC_CR_PLL1RDY | RCC_CR_PLL2RDY)) {
    }
    /* Slow the buses and the flash before the core speeds up. */
    FLASH_ACR = FLASH_ACR_4WS_WRHIGHFREQ2;
    while ((FLASH_ACR & 0x3Fu) != FLASH_ACR_4WS_WRHIGHFREQ2) {
    }
    RCC_D1CFGR = (4u << 4) | 8u; /* D1CPRE /1, D1PPRE /2, HPRE /2 */
    RCC_D2CFGR = (4u << 8) | (4u << 4); /* D2PPRE2 /2, D2PPRE1 /2 */
    RCC_D3CFGR = 4u << 4; /* D3PPRE /2 */
    RCC_CFGR = (RCC_CFGR & ~7u) | RCC_CFGR_SW_PLL1;
    while (RCC_CFGR_SWS(RCC_CFGR) != RCC_CFGR_SW_PLL1) {
    }
    tllm_bringup_pclk_hz = 16000000u * n / 2u / 4u; /* core / AHB 2 / APB 2 */
}

/* ---- QUADSPI ---------------------------------------------------------- */

static const uint8_t qspi_pins[][3] = TLLM_QSPI_PINS; /* {port (A=0), pin, alternate function} */

/* One pin on an alternate function, at the fastest output speed; its port clocked first. */
static void af_pin(uint32_t port, uint32_t pin, uint32_t af)
{
    const uint32_t base = 0x58020000u + 0x400u * port;
    RCC_AHB4ENR |= 1u << port;
    (void)RCC_AHB4ENR;
    REG(base + 0x00u) = (REG(base + 0x00u) & ~(3u << (2u * pin))) | (2u << (2u * pin)); /* MODER: AF */
    REG(base + 0x08u) |= 3u << (2u * pin);                                              /* OSPEEDR: very high */
    const uint32_t afr = base + (pin < 8u ? 0x20u : 0x24u), shift = 4u * (pin & 7u);
    REG(afr) = (REG(afr) & ~(0xFu << shift)) | (af << shift);
}

/* One indirect-mode command: instruction (and, if data, one byte written). */
static void qspi_command(uint32_t ccr, int with_byte, uint8_t byte)
{
    while (QSPI_SR & QSPI_SR_BUSY) {
    }
    if (with_byte) {
        QSPI_DLR = 0u; /* one byte */
    }
    QSPI_CCR = ccr;
    if (with_byte) {
        QSPI_DR8 = byte;
    }
    while (!(QSPI_SR & QSPI_SR_TCF)) {
    }
    QSPI_FCR = QSPI_FCR_CTCF;
}

static void qspi_init(void)
{
    for (uint32_t i = 0; i < sizeof qspi_pins / sizeof qspi_pins[0]; i++) {
        af_pin(qspi_pins[i][0], qspi_pins[i][1], qspi_pins[i][2]);
    }
    RCC_D1CCIPR = (RCC_D1CCIPR & ~(3u << 4)) | ((uint32_t)TLLM_QSPI_KERNEL_SEL << 4); /* QSPISEL */
    RCC_AHB3ENR |= 1u << 14; /* QSPIEN */
    (void)RCC_AHB3ENR;
    QSPI_CR = QSPI_CR_PRESCALER(TLLM_QSPI_PRESCALER) | QSPI_CR_SSHIFT | (TLLM_QSPI_DUAL ? QSPI_CR_DFM : 0u);
    QSPI_DCR = ((uint32_t)TLLM_QSPI_FSIZE << 16) | ((uint32_t)TLLM_QSPI_CSHT << 8); /* 2^(FSIZE+1) bytes */
    QSPI_CR |= QSPI_CR_EN;
#if defined(TLLM_QSPI_FLASH_W25Q)
    qspi_command(CCR_IMODE(1) | CCR_INSTR(0x66u), 0, 0); /* reset enable */
    qspi_command(CCR_IMODE(1) | CCR_INSTR(0x99u), 0, 0); /* reset */
    for (volatile uint32_t i = 0; i < 20000u; i++) {    /* tRST 30 us at up to 480 MHz */
    }
    qspi_command(CCR_IMODE(1) | CCR_INSTR(0x50u), 0, 0); /* write enable for volatile status */
    qspi_command(CCR_IMODE(1) | CCR_DMODE(1) | CCR_INSTR(0x31u), 1, 0x02u); /* status register 2: QE */
    QSPI_CCR = CCR_FMODE_MEMORY_MAPPED | CCR_DMODE(3) | CCR_DCYC(TLLM_QSPI_DCYC) | CCR_ADSIZE(3) | CCR_ADMODE(1) |
               CCR_IMODE(1) | CCR_INSTR(TLLM_QSPI_READ_INSTR); /* 6Bh */
#elif defined(TLLM_QSPI_FLASH_MT25Q)
    qspi_command(CCR_IMODE(3) | CCR_INSTR(0xF5u), 0, 0); /* reset QPI to extended SPI (both chips) */
    QSPI_CCR = CCR_FMODE_MEMORY_MAPPED | CCR_DMODE(3) | CCR_DCYC(TLLM_QSPI_DCYC) | CCR_ADSIZE(4) | CCR_ADMODE(1) |
               CCR_IMODE(1) | CCR_INSTR(TLLM_QSPI_READ_INSTR); /* 6Ch */
#else
#error "board_config.h names no QSPI flash chip"
#endif
}

/* ---- SDRAM ------------------------------------------------------------ */

#if defined(TLLM_SDRAM_BASE)
static const uint8_t sdram_pins[][2] = TLLM_SDRAM_PINS; /* {port (A=0), pin} */

static void sdram_command(uint32_t command)
{
    /* The H7's FMC has no SDSR busy flag: a command is taken as written. */
    FMC_SDCMR = command | (TLLM_SDRAM_BANK == 2u ? (1u << 3) : (1u << 4));
}

static void sdram_init(void)
{
    for (uint32_t i = 0; i < sizeof sdram_pins / sizeof sdram_pins[0]; i++) {
        const uint32_t port = sdram_pins[i][0], pin = sdram_pins[i][1];
        af_pin(port, pin, TLLM_SDRAM_AF);
        const uint32_t pupdr = 0x58020000u + 0x400u * port + 0x0Cu; /* pull-up, as ST's BSP sets them */
        REG(pupdr) = (REG(pupdr) & ~(3u << (2u * pin))) | (1u << (2u * pin));
    }
    RCC_D1CCIPR = (RCC_D1CCIPR & ~3u) | TLLM_SDRAM_FMCSEL; /* FMCSEL */
    RCC_AHB3ENR |= RCC_AHB3ENR_FMCEN;
    (void)RCC_AHB3ENR;
    /* SDCLK, RBURST and RPIPE (and TRC, TRP) of bank 2 are read from the bank 1
     * registers (RM0433): the same values go to both. */
    FMC_SDCR1 = TLLM_SDRAM_SDCR;
    FMC_SDTR1 = TLLM_SDRAM_SDTR;
#if TLLM_SDRAM_BANK == 2u
    FMC_SDCR2 = TLLM_SDRAM_SDCR;
    FMC_SDTR2 = TLLM_SDRAM_SDTR;
#endif
    FMC_BCR1 |= FMC_BCR1_FMCEN;
    sdram_command(SDCMR_CLOCK_ENABLE);
    for (volatile uint32_t i = 0; i < TLLM_SDRAM_POWERUP_LOOPS; i++) { /* the part's power-up wait */
    }
    sdram_command(SDCMR_PALL);
    sdram_command(SDCMR_AUTO_REFRESH | SDCMR_NRFS(8u)); /* the part needs two or more */
    sdram_command(SDCMR_LOAD_MODE | SDCMR_MRD(TLLM_SDRAM_MODE));
    FMC_SDRTR = (uint32_t)TLLM_SDRAM_REFRESH << 1;
}

/* Region 0: the SDRAM as Normal write-back memory, never executed. Write-back
 * agrees with how the firmware uses it: only the core reads and writes the KV
 * cache there (no DMA), so no line is ever stale. */
static void sdram_mpu_init(void)
{
    __asm volatile("dmb" ::: "memory");
    MPU_CTRL = 0u;
    MPU_RNR = 0u;
    MPU_RBAR = TLLM_SDRAM_BASE;
    MPU_RASR = TLLM_SDRAM_MPU_RASR;
    MPU_CTRL = MPU_CTRL_ENABLE_PRIVDEFENA;
    barrier();
}
#endif

/* ---- caches ----------------------------------------------------------- */

static void cache_init(void)
{
    barrier();
    SCB_ICIALLU = 0u;
    barrier();
    SCB_CCR |= SCB_CCR_IC;
    barrier();
    SCB_CSSELR = 0u; /* level 1 data cache */
    barrier();
    const uint32_t ccsidr = SCB_CCSIDR;
    const uint32_t sets = ((ccsidr >> 13) & 0x7FFFu) + 1u, ways = ((ccsidr >> 3) & 0x3FFu) + 1u;
    for (uint32_t s = 0; s < sets; s++) {
        for (uint32_t w = 0; w < ways; w++) {
            SCB_DCISW = (s << 5) | (w << 30); /* 32-byte lines, four ways */
        }
    }
    barrier();
    SCB_CCR |= SCB_CCR_DC;
    barrier();
}

/* Called once from the reset path, after .data and .bss. */
void tllm_board_bringup(void)
{
    clock_init();
    qspi_init(); /* before the D-cache: no speculative reads of an unmapped window */
#if defined(TLLM_SDRAM_BASE)
    sdram_init(); /* before reset.c zeroes the arenas, the KV cache's in SDRAM among them */
    sdram_mpu_init();
#endif
    cache_init();
}
