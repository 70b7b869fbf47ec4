"""What a phase or a generation of a causal LM refuses, checked before anything is traced (so a
sweep refuses a bad point before its first trace, as :meth:`.phases.CausalLM.phase` would)."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ..errors import OpcountValueError

PHASES = ("prefill", "decode")


class CausalLM(Protocol):
    """What the checks read of :class:`.phases.CausalLM` (a protocol: that module imports this one)."""

    model: nn.Module

    @property
    def learned_positions(self) -> tuple[str, int] | None: ...

    def check_sizes(self, batch: int, positions: int) -> None: ...


def check_generation(llm: CausalLM, prompt_len: int, gen_len: int, batch: int) -> None:
    """Refuse a generation :func:`.phases.generation` would refuse, in its order."""
    if not isinstance(gen_len, int) or gen_len < 0:
        raise OpcountValueError(f"gen_len must be an integer >= 0, got {gen_len!r}")
    if isinstance(prompt_len, int) and isinstance(batch, int):  # check_phase checks the types
        llm.check_sizes(batch, prompt_len + gen_len)  # the last step's, before the prefill is traced
    check_phase_request(llm, "prefill", prompt_len, 0, batch)
    if gen_len:
        check_phase_request(llm, "decode", None, prompt_len, batch)
        check_phase_request(llm, "decode", None, prompt_len + gen_len - 1, batch)


def check_phase_request(llm: CausalLM, phase: str, seq_len: int | None, kv_len: int, batch: int) -> int:
    """Refuse a phase :meth:`.phases.CausalLM.phase` would refuse; returns its ``seq_len``."""
    if phase not in PHASES:
        raise OpcountValueError(f"unknown phase {phase!r}; choose prefill or decode")
    if seq_len is None:
        if phase == "prefill":
            raise OpcountValueError("prefill needs seq_len (the prompt's tokens)")
        seq_len = 1
    if phase == "prefill" and kv_len:
        raise OpcountValueError("prefill starts from an empty cache: kv_len is for decode")
    for name, value, least in (("seq_len", seq_len, 1), ("kv_len", kv_len, 0), ("batch", batch, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise OpcountValueError(f"{name} must be an integer >= {least}, got {value!r}")
    llm.check_sizes(batch, kv_len + seq_len)
    positions = llm.learned_positions
    if positions is not None and kv_len + seq_len > positions[1]:
        # On meta an out-of-range position is never looked up: the real model fails, the trace would not
        name, rows = positions
        raise OpcountValueError(
            f"{kv_len + seq_len} positions (kv_len {kv_len} + seq_len {seq_len}) exceed the {rows} rows of "
            f"{type(llm.model).__name__}'s learned position table '{name}'"
        )
    return seq_len
