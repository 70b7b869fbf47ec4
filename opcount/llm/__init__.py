"""LLM inference cost: prefill and decode with a KV cache, memory footprint, dtypes per role, MoE."""

PHASES = ("prefill", "decode")  # the inference phases a step is priced for: the prompt, one step of generation
