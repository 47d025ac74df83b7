"""The reference: numpy executors of the quantized model (exact, the oracle
every tier is compared with) and of the float model, their kernel twins and
the sampler the firmware mirrors."""
