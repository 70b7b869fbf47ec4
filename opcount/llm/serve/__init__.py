"""Served traffic over a deployment's step costs: a workload (:mod:`.workload`), the step's price from traced
phases (:mod:`.step_cost`), the engine's scheduler as vLLM's v1 scheduler runs it (:mod:`.scheduler`), and the
simulation with its latency percentiles and throughput (:mod:`.simulate`; docs/simulate.md)."""
