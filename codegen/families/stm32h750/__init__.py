"""The STM32H750 family (WeAct MiniSTM32H750, STM32H750B-DK): its register
encodings, the peripheral models the Unicorn runner maps, and the Renode
files every build carries.  The family's C lives in boards/stm32h750/."""
