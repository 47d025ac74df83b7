/* WeAct MiniSTM32H750: console on USART1, PA9 TX / PA10 RX (AF7) on the
 * header.  Values mirror board.json "uart"/"request". */
#ifndef TLLM_BOARD_CONFIG_H
#define TLLM_BOARD_CONFIG_H

#define TLLM_UART_BASE 0x40011000u       /* USART1 */
#define TLLM_UART_RCC_ENR_OFFSET 0x0F0u  /* RCC_APB2ENR */
#define TLLM_UART_RCC_ENR_BIT 4u         /* USART1EN */
#define TLLM_UART_GPIO_BASE 0x58020000u  /* GPIOA */
#define TLLM_UART_GPIO_RCC_BIT 0u        /* RCC_AHB4ENR GPIOAEN */
#define TLLM_UART_TX_PIN 9u
#define TLLM_UART_RX_PIN 10u
#define TLLM_UART_AF 7u
#define TLLM_UART_KERNEL_HZ 64000000u    /* rcc_pclk2 at reset (before bringup.c sets the PLL) */
#define TLLM_UART_BAUD 115200u
#define TLLM_REQUEST_ADDR 0x907FC000u    /* last 16 KiB of the 8 MB W25Q64 window */

/* QUADSPI (bringup.c): one Winbond W25Q64JV on bank 1, 8 MB = 2^(22+1). */
#define TLLM_QSPI_FLASH_W25Q 1
#define TLLM_QSPI_DUAL 0u
#define TLLM_QSPI_FSIZE 22u
/* {port (A=0), pin, AF}: PB2 CLK, PB6 BK1_NCS, PD11 IO0, PD12 IO1, PE2 IO2, PD13 IO3 */
#define TLLM_QSPI_PINS {{1, 2, 9}, {1, 6, 10}, {3, 11, 9}, {3, 12, 9}, {4, 2, 9}, {3, 13, 9}}

#endif
