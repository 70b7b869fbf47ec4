"""A phase on a parallel layout (tensor, pipeline, expert and data parallelism): what each device holds and
runs, the collectives between devices, whether it fits, its time and its cost."""

# Here rather than in deployment.py, so that the command line's --reserve and --price read them without the pricing.
DEFAULT_RESERVE = 0.1  # of a device's memory, for the engine: vLLM's gpu_memory_utilization defaults to 0.9
MAX_PRICE = 1e4  # dollars per device-hour: above any rental price
