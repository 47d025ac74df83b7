/* STM32H750B-DK: console on USART3, PB10 TX / PB11 RX (AF7), wired to the
 * ST-LINK V3 virtual COM port.  Values mirror board.json "uart"/"request". */
#ifndef TLLM_BOARD_CONFIG_H
#define TLLM_BOARD_CONFIG_H

#define TLLM_UART_BASE 0x40004800u       /* USART3 */
#define TLLM_UART_RCC_ENR_OFFSET 0x0E8u  /* RCC_APB1LENR */
#define TLLM_UART_RCC_ENR_BIT 18u        /* USART3EN */
#define TLLM_UART_GPIO_BASE 0x58020400u  /* GPIOB */
#define TLLM_UART_GPIO_RCC_BIT 1u        /* RCC_AHB4ENR GPIOBEN */
#define TLLM_UART_TX_PIN 10u
#define TLLM_UART_RX_PIN 11u
#define TLLM_UART_AF 7u
#define TLLM_UART_KERNEL_HZ 64000000u    /* rcc_pclk1 at reset (before bringup.c sets the PLL) */
#define TLLM_UART_BAUD 115200u
#define TLLM_REQUEST_ADDR 0x97FFC000u    /* last 16 KiB of the 128 MB QSPI window */

/* QUADSPI (bringup.c): two Micron MT25QL512ABB in dual-flash mode, 128 MB = 2^(26+1). */
#define TLLM_QSPI_FLASH_MT25Q 1
#define TLLM_QSPI_DUAL 1u
#define TLLM_QSPI_FSIZE 26u
/* {port (A=0), pin, AF}: PF10 CLK, PG6 BK1_NCS, PD11 BK1_IO0, PF9 BK1_IO1, PF7 BK1_IO2,
 * PF6 BK1_IO3, PH2 BK2_IO0, PH3 BK2_IO1, PG9 BK2_IO2, PG14 BK2_IO3 */
#define TLLM_QSPI_PINS {{5, 10, 9}, {6, 6, 10}, {3, 11, 9}, {5, 9, 10}, {5, 7, 9}, {5, 6, 9}, \
                        {7, 2, 9}, {7, 3, 9}, {6, 9, 9}, {6, 14, 9}}

#endif
