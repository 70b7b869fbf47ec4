"""A phase on a parallel layout (tensor, pipeline, expert and data parallelism): what each device holds and
runs, the collectives between devices, whether it fits, its time and its cost."""

# Here rather than in deployment.py, so that the command line's flags read them without the pricing.
# The share of a device's reported memory an engine takes for weights, activations and the KV cache: vLLM's
# gpu_memory_utilization, whose default is 0.9 (CacheConfig in vllm/config/cache.py; vLLM's engine arguments).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
MAX_PRICE = 1e4  # dollars per device-hour: above any rental price
