"""Running the model for the profile: the unprofiled wall time, then the profiled passes, with
a ``record_function`` range around every module call and every forward pass (the names the
event walk in :mod:`.events` reads back).

The model is left as it was, also after an error: hooks removed, training flags untouched,
buffers restored, the global RNG forked, ``OpOverload.__call__`` put back. A failure in the
forward pass is re-raised as :class:`ProfileError` naming the module that failed.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from .._runtime import kineto_quiet
from ..errors import OpcountError, OpcountValueError
from ..messages import FAILURES, first_line
from ..scopes import ModuleTree, failure_site
from ..torch_internals import OpOverload, custom_op_definitions, op_qualified_name, pytree
from ..tracers.patching import replaced

__all__ = ["MODULE_RANGE", "PASS_RANGE", "ProfileError", "Runner", "model_device"]

MODULE_RANGE = "opcount.module:"  # + canonical module name ("" for the model)
PASS_RANGE = "opcount.forward#"  # + pass index


class ProfileError(OpcountError):
    """The model failed during a profiled forward pass; the message names the module."""


def model_device(model: nn.Module, inputs: Any, device: str | None) -> torch.device:
    found = next((p.device for p in model.parameters()), None)
    if found is None:
        leaves = pytree.tree_leaves(inputs)
        found = next((t.device for t in leaves if isinstance(t, torch.Tensor)), torch.device("cpu"))
    if device is None:
        device = found.type
    if device not in ("cpu", "cuda"):
        raise OpcountValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise OpcountValueError("device='cuda' but no CUDA device is available")
    if found.type != device:
        raise OpcountValueError(f"the model is on {found.type}, not {device}: move the model and inputs there first")
    return found


class Runner:
    """Runs the forward passes: unprofiled wall time, then profiled passes with module ranges."""

    def __init__(
        self,
        model: nn.Module,
        tree: ModuleTree,
        args: tuple[Any, ...],
        kw: dict[str, Any],
        device: torch.device,
        grad: bool,
    ) -> None:
        self.model, self.tree, self.args, self.kw, self.device, self.grad = model, tree, args, kw, device, grad
        self.cuda = device.type == "cuda"

    def forward(self) -> None:
        self.model(*self.args, **self.kw)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def clock(self, event: Any) -> float:
        """An event's measured time in seconds: kernel time on CUDA, wall time on CPU."""
        seconds: float = (event.device_time_total if self.cuda else event.time_range.elapsed_us()) * 1e-6
        return seconds

    def wall_time(self) -> float:
        if self.cuda:
            # torch leaves Event's constructor unannotated
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            self.forward()
            end.record()
            end.synchronize()
            milliseconds: float = start.elapsed_time(end)
            return milliseconds * 1e-3
        t0 = time.perf_counter()
        self.forward()
        return time.perf_counter() - t0

    def measure(self, repeats: int, warmup: int) -> tuple[float, list[Any]]:
        """(median unprofiled time, the top-level event of every profiled pass)."""
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(_preserved(self.model, self.tree, self.device))
                stack.enter_context(torch.set_grad_enabled(self.grad))
                for _ in range(warmup):
                    self.forward()
                self.sync()
                walls = [self.wall_time() for _ in range(repeats)]
                stack.enter_context(_module_ranges(self.tree))
                stack.enter_context(_custom_ops_recorded())
                self.forward()  # once more with the ranges: their first use allocates
                self.sync()
                with kineto_quiet(self.cuda), torch_profile(activities=activities) as prof:
                    for i in range(repeats):
                        with record_function(f"{PASS_RANGE}{i}"):
                            self.forward()
                        self.sync()
        except FAILURES as e:  # re-raised with the module that failed (sys.exit too)
            raise _forward_error(self.model, self.tree, e) from e
        passes = {e.name: e for e in prof.events() if e.cpu_parent is None and e.name.startswith(PASS_RANGE)}
        if len(passes) != repeats:
            raise ProfileError(f"the profiler recorded {len(passes)} of {repeats} forward passes")
        return statistics.median(walls), [passes[f"{PASS_RANGE}{i}"] for i in range(repeats)]


def _forward_error(model: nn.Module, tree: ModuleTree, e: BaseException) -> ProfileError:
    what, first = failure_site(model, tree, e), first_line(e)
    return ProfileError(f"forward pass failed while profiling, in {what}: {type(e).__name__}: {first}")


@contextlib.contextmanager
def _preserved(model: nn.Module, tree: ModuleTree, device: torch.device) -> Iterator[None]:
    """Buffers and training flags as they were, the global RNG untouched (dropout draws from a fork)."""
    modules = [tree.module(name) for name in tree.names]
    flags = [(m, m.training) for m in modules]
    buffers = [(b, b.detach().clone()) for m in modules for b in m._buffers.values() if b is not None]
    devices = (
        [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    )
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for buf, value in buffers:
                buf.copy_(value)
        for m, flag in flags:
            m.training = flag


@contextlib.contextmanager
def _module_ranges(tree: ModuleTree) -> Iterator[None]:
    """A ``record_function`` range around every call of every module, named by its canonical
    name. The hooks are removed and ranges left open by an error are closed on the way out."""
    open_ranges: list[tuple[str, record_function]] = []
    handles = []

    def enter(name: str) -> Callable[..., None]:
        def pre_hook(module: nn.Module, args: Any) -> None:
            rf = record_function(MODULE_RANGE + name)
            rf.__enter__()  # type: ignore[no-untyped-call]  # torch leaves record_function unannotated
            open_ranges.append((name, rf))

        return pre_hook

    def leave(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            while open_ranges:  # a range opened by a child that failed is closed with it
                top, rf = open_ranges.pop()
                rf.__exit__(None, None, None)
                if top == name:
                    break

        return hook

    try:
        for name in tree.names:
            module = tree.module(name)
            # Our range opens before the user's pre-hooks run and closes after their hooks.
            handles.append(module.register_forward_pre_hook(enter(name), prepend=True))
            handles.append(module.register_forward_hook(leave(name), always_call=True))
        yield
    finally:
        for h in handles:
            h.remove()
        while open_ranges:
            open_ranges.pop()[1].__exit__(None, None, None)


@contextlib.contextmanager
def _custom_ops_recorded() -> Iterator[None]:
    """Give ``torch.library.custom_op`` operators a profiler event when called through their
    ``OpOverload`` (the dispatcher records them only through ``torch.ops.ns.op(...)``).
    ``OpOverload.__call__`` is replaced under :mod:`opcount.tracers.patching`'s lock and put
    back if it is still ours."""
    defined = custom_op_definitions()
    if not defined:  # none defined, or the internal moved: custom ops stay unnamed
        yield
        return
    name_of = op_qualified_name

    def recorded(original: Any) -> Any:
        def call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            name = name_of(self)
            if name in defined:
                with record_function(name):
                    return original(self, *args, **kwargs)
            return original(self, *args, **kwargs)

        return call

    with replaced(OpOverload, "__call__", recorded):
        yield
