"""Activations saved for backward: the measurement on fake tensors against what autograd saves
in a real CPU training step, measured here with ``torch.autograd.graph.saved_tensors_hooks``
(each storage once, the parameters' and buffers' excluded), and recomputation's closed forms."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from opcount.errors import OpcountError
from opcount.training.saved import measure


def saved_by_autograd(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes autograd saves in one real training forward of ``model`` (and its loss)."""
    state = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, int] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in state:
            seen[storage._cdata] = storage.nbytes()
            keep.append(t)  # alive until the end: no storage address is reused
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*args, **kwargs)
        out = out.loss if hasattr(out, "loss") and out.loss is not None else out
        out.sum()
    return sum(seen.values())


class Stack(nn.Module):
    """Three layers of Linear(8, 32) -> ReLU -> Linear(32, 8) in an nn.ModuleList."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8)) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_stack_closed_form() -> None:
    """Batch 2, float32. Per layer autograd saves the first Linear's input (2 x 8 x 4 = 64 bytes:
    the layer's input) and the ReLU's output (2 x 32 x 4 = 256 bytes), which the second Linear
    saves too (one storage); the weights are parameters. None: 3 x (64 + 256) = 960. Full: the
    three inputs (3 x 64 = 192) + one layer's internals (256) = 448."""
    model, x = Stack(), torch.randn(2, 8)
    saved = measure(model, (x,), {})
    assert saved.total == 960 == saved_by_autograd(model, (x,), {})
    assert saved.kept("full") == 448
    assert saved.kept("selective") == 960  # no attention
    assert saved.layers_name == "layers"


def tiny_gpt2(**extra: Any) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64, **extra)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_gpt2_step_equals_autograd(attention: str) -> None:
    model = tiny_gpt2(attn_implementation=attention)
    ids = torch.randint(0, 100, (2, 16))
    kwargs = {"input_ids": ids, "labels": ids}
    expected = saved_by_autograd(model, (), kwargs)
    assert measure(model, (), kwargs, seq_len=16).total == expected
    # on the meta device, as the LLM path builds it: the same bytes
    with torch.device("meta"):
        meta = tiny_gpt2(attn_implementation=attention)
    assert measure(meta, (), {"input_ids": ids.to("meta"), "labels": ids.to("meta")}, seq_len=16).total == expected


def test_recompute_full_below_selective_below_none() -> None:
    model = tiny_gpt2(attn_implementation="eager")  # saves its [batch, heads, query, key] scores
    ids = torch.randint(0, 100, (2, 16))
    saved = measure(model, (), {"input_ids": ids, "labels": ids}, seq_len=16)
    none, selective, full = (saved.kept(r) for r in ("none", "selective", "full"))
    assert full < selective < none
    # selective drops the score-shaped tensors only: each a multiple of 2 x 4 heads x 16 x 16 elements
    assert (none - selective) % (2 * 4 * 16 * 16) == 0


def test_full_recompute_needs_layers() -> None:
    saved = measure(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(1, 4),), {})
    with pytest.raises(OpcountError, match="no layers"):
        saved.kept("full")


def test_the_model_is_left_as_it_was() -> None:
    model = Stack().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    measure(model, (torch.randn(2, 8),), {})
    assert not model.training and not any(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.layers[0]._forward_hooks and not model.layers[0]._forward_pre_hooks


class ReadsAValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y if bool(y.sum() > 0) else -y  # data-dependent: fake tensors hold no values


def test_a_model_that_reads_a_value_is_named() -> None:
    with pytest.raises(OpcountError, match="ReadsAValue: the activations saved for backward are measured on fake"):
        measure(ReadsAValue(), (torch.randn(2, 4),), {})


def test_the_layers_are_the_list_holding_most_parameters() -> None:
    """Two decoder-like layers, each with a list of eight small experts: the layers are the
    two-element list, not a longer list of experts."""
    from opcount.training.saved import layers_of

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.Linear(16, 16)
            self.experts = nn.ModuleList(nn.Linear(16, 2) for _ in range(8))

    model = nn.Module()
    model.layers = nn.ModuleList(Layer() for _ in range(2))
    found = layers_of(model)
    assert found is not None and found[0] == "layers"
