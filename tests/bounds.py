"""How long a test lets an emulator run: the run itself is bounded by guest
instructions (run/firmware.instruction_bound, the QEMU tllm_ilimit plugin,
Unicorn's block counter), so the wall clock is only a backstop for a hung
emulator, set far above (at least ten times) any idle run here, so that a
busy machine slows the suite and never fails it."""

BACKSTOP_S = 3600.0
