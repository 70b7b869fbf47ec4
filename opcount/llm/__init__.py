"""LLM inference cost: prefill and decode with a KV cache, memory footprint, dtypes per role, MoE."""
