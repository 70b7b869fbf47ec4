"""What the dispatch tracer's model runs on: its own tensors, torch's fake tensors, or
shape-only tensors.

Each kind says how the inputs and the weights are made for the call, which mode (if any) wraps
the pass, how an operator's outputs are computed, and whether leaf module calls are replayed,
so that the tracer's orchestration (:mod:`.dispatch`) is one and the same for all three.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..torch_internals import FakeTensorMode, pytree, quiet_fake_tensors
from .meta import TensorShape, fake_state, materialize
from .recorder import Recorder
from .replay import Replayer
from .shapes import ShapeRunner


class RealTensors:
    """What the model runs on: how inputs and weights are made, and how an operator computes.

    This one: the model's own tensors, kernels run as usual; inputs given by shape become zeros
    on the model's device.
    """

    on_meta = False

    def __init__(self, claimed: torch.device) -> None:
        self.claimed = claimed
        # how an operator's outputs are made, from (func, args, kwargs, operator number); None: its kernel
        self.compute: Callable[[Any, tuple[Any, ...], dict[str, Any], int], Any] | None = None

    def inputs(self, tree: Any) -> Any:
        return materialize(tree, self.claimed)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Stand-ins for the model's parameters and buffers during the call, by name."""
        return {}  # none: the model's own

    def mode(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def replayer(self, recorder: Recorder) -> Replayer | None:
        """What replays leaf module calls from their records (:mod:`.replay`); None: they all run."""
        return None


class FakeTensors(RealTensors):
    """torch's fake tensors (:mod:`.meta`): the weights swapped for fake stand-ins for the call."""

    on_meta = True

    def __init__(self, claimed: torch.device) -> None:
        super().__init__(claimed)
        self._fake = FakeTensorMode(allow_non_fake_inputs=True)

    def inputs(self, tree: Any) -> Any:
        return materialize(tree, self.claimed, self._fake)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return fake_state(model, self.claimed, self._fake)

    def mode(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(quiet_fake_tensors())
        stack.enter_context(self._fake)
        return stack


class ShapeTensors(RealTensors):
    """Shape-only tensors (:mod:`.shapes`): inputs become shape-only, the weights stay as they are
    (no kernel ever reads them), and each operator's outputs come from its inputs' metadata."""

    on_meta = True

    def __init__(self, claimed: torch.device) -> None:
        super().__init__(claimed)
        self._runner = ShapeRunner(claimed)
        self.compute = self._runner.run

    def inputs(self, tree: Any) -> Any:
        runner = self._runner

        def leaf(x: Any) -> Any:
            if isinstance(x, TensorShape):
                return runner.empty(x.shape, x.dtype)
            return runner.wrap(x) if isinstance(x, torch.Tensor) else x

        return pytree.tree_map(leaf, tree)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        self._runner.remember(t for _, t in named)
        return {}

    def replayer(self, recorder: Recorder) -> Replayer | None:
        return Replayer(recorder, recorder.scopes, self.claimed, self._runner.freeze, self._runner.metas)
