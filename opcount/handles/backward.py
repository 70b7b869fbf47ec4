"""Backward kernels: a training step's gradient operators, each priced as the forward it mirrors.

The dispatch tracer records autograd's backward kernels under their own names
(``convolution_backward``, ``threshold_backward``, ``native_batch_norm_backward``, ...); the
handles here price them from the forward operators' formulas, applied to forward-shaped
arguments rebuilt from the kernel's own (:mod:`.backward_args`):

- a product's gradients are products of the forward's size: ``convolution_backward`` costs one
  forward convolution per gradient computed (input, weight), plus the sum over the batch and
  positions that makes the bias gradient (matrix products' gradients are recorded as the
  ``mm`` / ``bmm`` they are);
- any other fused kernel (activation, dropout, softmax, pooling, resampling, normalization,
  attention) costs two of its forward: its gradient expression is about the size of the
  forward one, applied to the incoming gradient. Attention's backward runs four products where
  its forward runs two, so two forwards is exact there.

Each kernel is registered in the flop, activation and memory registries exactly where its
forward is: with a handle where the forward has one (a multiply-add and fvcore handle if the
forward's is; ``preset="fvcore"`` keeps the mirrors of fvcore's handles), explicitly free
where the forward is free, and unsupported where the forward is. The losses' backward kernels
have formulas of their own (:mod:`.loss`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..ir import Spec, tensor
from .attention import sdpa_handle
from .backward_args import ATTENTION_BACKWARD, CONV_BACKWARD, MIRRORS, SDPA, Mirror, required_output_mask
from .counts import Cost
from .memory import Access, Traffic, whole
from .registry import ACTIVATIONS, FLOPS, MEMORY, Handle, MakeHandle, Registry, SpecFn
from .zero_cost import FVCORE_IGNORED

FAMILY = "backward"
_CONV_FLOPS = (
    "(d_input, d_weight, d_bias) = convolution_backward(grad [n, c_out, *o], x, w, ...): one forward "
    "convolution per gradient computed among d_input and d_weight, n * prod(w) * prod(o) multiply-adds "
    "each (transposed: prod(i)), as `_convolution`; d_bias adds numel(grad) - c_out flops (the gradient "
    "summed over the batch and positions, as `sum`)."
)
_CONV_MEMORY = (
    "d_input reads the incoming gradient and the weight and writes the input's size; d_weight reads "
    "the incoming gradient and the input and writes the weight's size; d_bias reads the incoming "
    "gradient and writes c_out values: each gradient computed is a kernel of its own (cuDNN's dgrad, "
    "wgrad and PyTorch's bias sum), reading its operands once and writing its result once."
)


def conv_backward_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Each gradient among (d_input, d_weight, d_bias) that ``output_mask`` asks for: its operands
    read once, its result written once."""
    grad, x, w = (tensor(inputs[i]) for i in range(3))
    mask = required_output_mask(inputs)
    reads = ((grad, w), (grad, x), (grad,))
    read: list[Access] = []
    write: list[Access] = []
    for needed, operands, result in zip(mask, reads, outputs[:3], strict=True):
        if needed:
            read += whole(operands)
            write += whole([result])
    return Traffic(tuple(read), tuple(write))


_CONV_TRAFFIC: SpecFn = conv_backward_traffic  # type: ignore[assignment]  # the registry is typed for counts


def _counted(mirror: Mirror, handles: Mapping[str, Handle], as_cost: bool) -> SpecFn:
    """The sum of the forward handles' counts over the mirrored calls: a Cost (multiply-adds and
    flops apart) for flops, a plain count for activations. A kind the metric does not price
    (``sum`` for activations) adds nothing."""

    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost | int | float:
        macs: int | float = 0
        flops: int | float = 0
        for kind, ins, outs in mirror.rebuild(inputs, outputs):
            forward = handles.get(kind)
            if forward is None:
                continue
            value = forward.fn(ins, outs)
            if type(value) is Cost:
                macs, flops = macs + value.macs, flops + value.flops
                continue
            n = sum(value.values()) if isinstance(value, Mapping) else value
            if not isinstance(n, (int, float)):
                raise TypeError(f"the {kind} handle returned {type(value).__name__}, not a count")
            if forward.macs:
                macs += n
            else:
                flops += n
        return Cost(macs, flops) if as_cost else macs + flops

    return handle


def _moved(mirror: Mirror, handles: Mapping[str, Handle]) -> SpecFn:
    """Every byte the forward handles' traffic moves over the mirrored calls; not fusable."""

    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
        read: list[Access] = []
        write: list[Access] = []
        for kind, ins, outs in mirror.rebuild(inputs, outputs):
            forward = handles.get(kind)
            if forward is None:
                continue
            traffic = forward.fn(ins, outs)
            if not isinstance(traffic, Traffic):
                raise TypeError(f"the {kind} memory handle returned {type(traffic).__name__}, not a Traffic")
            read += traffic.read
            write += traffic.write
        return Traffic(tuple(read), tuple(write))

    return handle  # type: ignore[return-value]  # the registry is typed for counts


def _doc(op: str, mirror: Mirror, forward: Handle, registry: Registry) -> str:
    if op == CONV_BACKWARD:
        return _CONV_MEMORY if registry is MEMORY else _CONV_FLOPS
    name = mirror.forward.split("::", 1)[1]
    if registry is MEMORY:
        return (
            f"{mirror.times} x the traffic of `{name}`({mirror.args}) (the {forward.fn.__name__} rule), "
            "the incoming gradient's shape as its output; not fusable."
        )
    return (
        f"{mirror.times} x `{name}`({mirror.args}), the incoming gradient's shape as its output; "
        f"`{name}`: {forward.doc}"
    )


def _maker(op: str, mirror: Mirror, registry: Registry) -> MakeHandle:
    """How ``registry`` makes ``op``'s handle from its forward's (and the extra kinds')."""

    def make(handles: Mapping[str, Handle]) -> Handle:
        forward = handles[mirror.forward]
        used = {k: handles[k] for k in (mirror.forward, *mirror.extra) if k in handles}
        if registry is MEMORY:
            fn = _CONV_TRAFFIC if op == CONV_BACKWARD else _moved(mirror, used)
        else:
            fn = _counted(mirror, used, as_cost=registry is FLOPS)
        fn.__name__ = fn.__qualname__ = op.split("::", 1)[1]
        doc = _doc(op, mirror, forward, registry)
        fn.__doc__ = doc
        return Handle(fn, (op,), forward.macs, forward.fvcore, None, FAMILY, doc)

    return make


# Each registry prices, frees or leaves unsupported each kernel as it does the kernel's forward.
for _op, _mirror in MIRRORS.items():
    for _registry in (FLOPS, ACTIVATIONS, MEMORY):
        _registry.mirror(_op, _mirror.forward, _maker(_op, _mirror, _registry), family=FAMILY)

# The kernels whose forward fvcore ignores: ignored by ``preset="fvcore"`` too.
FVCORE_IGNORED_BACKWARD: frozenset[str] = frozenset(op for op, m in MIRRORS.items() if m.forward in FVCORE_IGNORED)


def unmasked_attention_backward() -> dict[str, Handle]:
    """Attention's backward kernels priced as two ``causal_attention="unmasked"`` sdpa calls: an
    ``is_causal=True`` kernel counts only the query/key pairs its causal mask keeps."""
    sdpa = Handle(sdpa_handle(causal_unmasked_only=True), ops=(SDPA,), macs=True)
    return {
        op: Handle(_counted(MIRRORS[op], {SDPA: sdpa}, as_cost=True), ops=(op,), macs=True) for op in ATTENTION_BACKWARD
    }
