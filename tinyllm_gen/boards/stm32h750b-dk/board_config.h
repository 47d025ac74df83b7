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
#define TLLM_UART_KERNEL_HZ 64000000u    /* rcc_pclk1 at reset: HSI 64 MHz, no prescaler */
#define TLLM_UART_BAUD 115200u
#define TLLM_REQUEST_ADDR 0x97FFC000u    /* last 16 KiB of the 128 MB QSPI window */

#endif
