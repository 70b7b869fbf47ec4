"""Training: the memory a training step holds per device (model states by optimizer and ZeRO
stage, activations saved for backward under recomputation) and its time, throughput and cost."""
