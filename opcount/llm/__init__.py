"""LLM inference cost: prefill and decode with a KV cache, memory footprint, dtypes per role, MoE."""

PHASES = ("prefill", "decode")  # the inference phases a step is priced for: the prompt, one step of generation


def __getattr__(name: str) -> object:
    """``opcount.llm.simulate`` and ``opcount.llm.Workload`` (:mod:`.serve`), imported when first asked for: the
    package itself stays light for the command line's parser, which reads only its constants."""
    if name == "simulate":
        from .serve.simulate import simulate

        return simulate
    if name == "Workload":
        from .serve.workload import Workload

        return Workload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
