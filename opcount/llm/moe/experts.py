"""Mixture-of-experts blocks found in a causal LM, each with its top-k (read once, whatever the config
calls it), and routed by expectation while it is traced; the parameters one token touches follow from
them (:attr:`.routing.Experts.inactive`).

Routing real weights is data-dependent (``nonzero``, ``where``, a sort and histogram before a
grouped GEMM), which meta tensors cannot follow, and random weights route at random. Expected
routing is deterministic instead: every token goes to ``top_k`` experts and the load is spread as
evenly as integers allow (expert ``e`` of ``E`` gets ``T*k // E`` tokens, one more while ``e <
T*k % E``). The router, its top-k (groups, bias correction) and any shared expert run as the model
wrote them; only the experts' dispatch is replaced.

Recognised forms:

- **fused experts** (transformers 5): one module holding every expert's weights as 3-D tensors
  (``gate_up_proj`` or ``up_proj``, ``down_proj``, optional ``*_bias``), declared through
  transformers' ``use_experts_implementation`` (it says ``has_gate``, ``has_bias``,
  ``is_transposed``) and called as ``experts(hidden, top_k_index, top_k_weights)``; the expert's own
  ``_apply_gate`` (GPT-OSS's clamped SwiGLU, interleaved halves) or ``act_fn`` runs between the
  two products. Each active expert reads its slice of the fused weights once, as a grouped GEMM does;
- **Llama 4** (``Llama4TextMoe``): transposed fused experts, weighted on their input, plus a shared expert;
- **a list of experts** (``gate: nn.Linear`` + ``experts: nn.ModuleList`` + ``top_k``: transformers 4).
- families whose blocks their own module recognises and routes: JetMoE's parallel experts and
  mixture of attention heads (:mod:`.jetmoe`), experts beside identity slots (LongCat-Flash,
  :mod:`.zero_experts`); the arithmetic they share is :mod:`.routing`'s.

Anything else that looks like experts (an ``experts`` attribute, a module named ``*Experts``,
``*MoE`` or ``*Router`` outside a recognised block, a 3-D weight with one slice per expert) is an
:class:`~opcount.errors.OpcountError` naming the module.
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ..models.composite import text_config
from ..patching import patched
from . import jetmoe, zero_experts
from .routing import Experts as Experts
from .routing import expert_loads

# the fields transformers' configs name their routed experts and experts per token by
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K_FIELDS = ("num_experts_per_tok", "top_k", "moe_topk", "num_experts_per_token", "moe_k", "top_k_experts")
_EXPERTS_NAME = re.compile(r"experts?$|moe|router", re.IGNORECASE)
# families whose blocks their own module recognises and routes: find(modules, config), routed(model, found)
_FAMILIES: tuple[Any, ...] = (jetmoe, zero_experts)


# ------------------------------------------------------------------------------------------------
# Recognition
# ------------------------------------------------------------------------------------------------
def _is_fused(module: nn.Module) -> bool:
    """transformers' fused experts: ``use_experts_implementation`` sets these flags on the instance."""
    flags = ("has_gate", "has_bias", "is_transposed")
    if not all(isinstance(getattr(module, f, None), bool) for f in flags):
        return False
    return all(isinstance(p, nn.Parameter) and p.dim() == 3 for p in _fused_weights(module))


def _fused_weights(module: nn.Module) -> tuple[Any, Any]:
    up = "gate_up_proj" if getattr(module, "has_gate", True) else "up_proj"
    return module._parameters.get(up), module._parameters.get("down_proj")


def _is_llama4(module: nn.Module) -> bool:
    experts = getattr(module, "experts", None)
    return (
        type(module).__name__ == "Llama4TextMoe"
        and experts is not None
        and all(isinstance(p, nn.Parameter) and p.dim() == 3 for p in _fused_weights(experts))
        and isinstance(getattr(module, "shared_expert", None), nn.Module)
    )


def _is_dbrx(module: nn.Module) -> bool:
    """Dbrx's experts: ``mlp.w1``, ``mlp.v1``, ``mlp.w2`` of ``[experts x ffn, width]`` each."""
    mlp, count, width = (getattr(module, a, None) for a in ("mlp", "num_experts", "ffn_hidden_size"))
    if type(module).__name__ != "DbrxExperts" or not isinstance(count, int) or not isinstance(width, int):
        return False
    weights = [getattr(mlp, w, None) for w in ("w1", "v1", "w2")]
    return all(isinstance(w, nn.Parameter) and w.dim() == 2 and w.shape[0] == count * width for w in weights)


def _is_expert_list(module: nn.Module) -> bool:
    """A router (``gate``) over a list of ``experts`` choosing ``top_k`` per token (transformers 4)."""
    gate, experts, top_k = (getattr(module, a, None) for a in ("gate", "experts", "top_k"))
    return (
        isinstance(gate, nn.Linear)
        and isinstance(experts, nn.ModuleList)
        and isinstance(top_k, int)
        and gate.out_features == len(experts)
    )


def config_top_k(text: Any) -> int | None:
    """Experts per token as the decoder's config names them (the first of :data:`TOP_K_FIELDS` it
    has), None where it names none."""
    for field in TOP_K_FIELDS:
        value = getattr(text, field, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _top_k(block: nn.Module, config: Any, where: str) -> int:
    """Experts per token: the block's or its router's ``top_k``, else the config's field."""
    for module in (block, *block.children()):
        value = getattr(module, "top_k", None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    from_config = config_top_k(config)
    if from_config is not None:
        return from_config
    raise OpcountError(f"{where}: no top_k on the block, its router or the config: opcount cannot route it")


def _count(experts: nn.Module) -> int:
    if _is_dbrx(experts):
        return int(getattr(experts, "num_experts"))  # noqa: B009 (nn.Module's __getattr__ is typed as a tensor)
    return int(_fused_weights(experts)[0].shape[0])


def _parent(name: str) -> str:
    return name.rpartition(".")[0]


def find_experts(model: nn.Module, config: Any = None) -> list[Experts]:
    """Every set of routed experts in ``model``, each with its ``top_k``; an expert-like module no rule
    covers is an error naming it. ``config``: the model's (its own ``config`` when not given), whose
    decoder's config (:func:`.composite.text_config`) gives a top-k no block or router holds."""
    config = text_config(config if config is not None else getattr(model, "config", None))
    modules = dict(model.named_modules())
    found: list[Experts] = []
    covered: set[str] = set()
    for name, module in modules.items():
        if _is_fused(module) or _is_dbrx(module) or (name.endswith(".experts") and _is_llama4(modules[_parent(name)])):
            count = _count(module)
            if not _is_dbrx(module) and _fused_weights(module)[1].shape[0] != count:
                raise OpcountError(f"{name}: {count} up-projections for {_fused_weights(module)[1].shape[0]} down")
            block = _parent(name)
            per_expert = sum(p.numel() for p in module.parameters()) // count
            k = _top_k(modules[block], config, name)
            found.append(Experts(name=name, block=block, count=count, top_k=k, per_expert=per_expert))
            covered.update(n for n in modules if n == name or n.startswith(name + "."))
        elif _is_expert_list(module):
            experts: Any = module.experts
            per_expert = sum(p.numel() for p in experts[0].parameters())
            found.append(
                Experts(
                    name=f"{name}.experts",
                    block=name,
                    count=len(experts),
                    top_k=_top_k(module, config, name),
                    per_expert=per_expert,
                )
            )
            covered.update(n for n in modules if n.startswith(f"{name}.experts."))
            covered.add(f"{name}.experts")
    for family in _FAMILIES:
        more, inside = family.find(modules, config)
        found.extend(more)
        covered.update(inside)
    blocks = tuple(e.block + "." for e in found)
    for name, module in modules.items():
        # the router, its gate and a shared expert inside a recognised block run as the model wrote them
        if not name or name in covered or (name + ".").startswith(blocks):
            continue
        leaf = name.rpartition(".")[2]
        if leaf.startswith("shared"):  # a shared expert runs densely on every token, as traced
            covered.update(n for n in modules if n.startswith(name + "."))
            continue
        if _looks_like_experts(name, module):
            raise OpcountError(
                f"{name} ({type(module).__name__}) looks like a mixture-of-experts block that opcount does not "
                "recognise: its cost on meta tensors would not be the experts' routed work"
            )
    if not found and expert_count(config) > 1 and _sparse_layers_built(config):
        raise OpcountError(
            f"{type(model).__name__}: its config has {expert_count(config)} experts but opcount recognises no "
            "mixture-of-experts block in it"
        )
    return found


def _looks_like_experts(name: str, module: nn.Module) -> bool:
    leaf = name.rpartition(".")[2]
    kind = type(module).__name__
    if leaf == "experts" or kind.endswith(("Experts", "Expert", "MoE", "Moe", "MoA", "Router", "TopKGating")):
        return True
    if isinstance(getattr(module, "experts", None), nn.Module):
        return True
    # one weight slice per expert, in any module: a 3-D floating parameter
    return any(p.dim() == 3 and p.is_floating_point() for p in module.parameters(recurse=False)) and bool(
        _EXPERTS_NAME.search(kind)
    )


def _sparse_layers_built(text: Any) -> bool:
    """Whether the decoder's config puts experts in one of the layers built, by the layer selectors
    transformers' MoE families use (dense first layers, a per-layer kind, a sparse step); without one,
    every layer."""
    layers = getattr(text, "num_hidden_layers", None)
    if not isinstance(layers, int):
        return True
    first_dense = getattr(text, "first_k_dense_replace", None)
    if isinstance(first_dense, int) and layers <= first_dense:
        return False
    moe_layers = getattr(text, "moe_layers", None)  # Llama 4: the indices of its MoE layers
    if isinstance(moe_layers, list) and not any(isinstance(i, int) and i < layers for i in moe_layers):
        return False
    kinds = getattr(text, "mlp_layer_types", None)
    if isinstance(kinds, list) and kinds and all(k == "dense" for k in kinds[:layers]):
        return False
    step, dense = getattr(text, "decoder_sparse_step", None), getattr(text, "mlp_only_layers", None) or []
    if isinstance(step, int) and step > 0:
        return any((i + 1) % step == 0 and i not in dense for i in range(layers))
    return True


def expert_count(text: Any) -> int:
    """The routed experts the decoder's config names, by any of :data:`EXPERT_FIELDS`."""
    if text is None:
        return 0
    if getattr(text, "is_moe", True) is False:  # Doge keeps an expert count it does not use unless is_moe
        return 0
    values = [getattr(text, f, None) for f in EXPERT_FIELDS]
    ffn = getattr(text, "ffn_config", None)  # Dbrx keeps them in a sub-config
    values.append(getattr(ffn, "moe_num_experts", None))
    return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)


# ------------------------------------------------------------------------------------------------
# Expected routing
# ------------------------------------------------------------------------------------------------
def _slice_names(module: nn.Module) -> list[str]:
    return [n for n in module._buffers if "[" in n]


def _add_slices(module: nn.Module) -> None:
    """Each expert's slice of the fused weights as a named buffer (``gate_up_proj[3]``), so the
    trace prices it as the weight it is and each active expert is read once."""
    count = _count(module)
    if _is_dbrx(module):  # [experts x ffn, width] viewed as [experts, ffn, width], on its mlp
        module = getattr(module, "mlp")  # noqa: B009
    for pname, p in list(module._parameters.items()):
        if p is not None and p.dim() >= 2 and p.shape[0] % count == 0:
            with torch.enable_grad():  # a training step's gradient flows from each slice into its stack
                stack = p.view(count, -1, *p.shape[1:]) if p.shape[0] != count else p
                for e in range(count):
                    module.register_buffer(f"{pname}[{e}]", stack[e], persistent=False)


def _slice(module: nn.Module, pname: str, e: int) -> Any:
    return module._buffers.get(f"{pname}[{e}]")


def _project(module: nn.Module, pname: str, e: int, x: torch.Tensor, transposed: bool) -> torch.Tensor:
    weight = _slice(module, pname, e)
    assert weight is not None  # made by _add_slices for every fused weight
    bias = _slice(module, f"{pname}_bias", e)
    if transposed:  # [in, out]
        return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)
    return torch.nn.functional.linear(x, weight, bias)


def _run_expert(module: Any, e: int, x: torch.Tensor, transposed: bool, has_gate: bool) -> torch.Tensor:
    """One expert on its tokens ``x``: up (and gate) projection, the model's gate or activation, down."""
    up = "gate_up_proj" if has_gate else "up_proj"
    h = _project(module, up, e, x, transposed)
    apply_gate: Callable[[torch.Tensor], torch.Tensor] | None = getattr(module, "_apply_gate", None)
    if has_gate:
        if apply_gate is not None:
            h = apply_gate(h)
        else:  # Llama 4: gate and up halves, the gate activated
            gate, value = h.chunk(2, dim=-1)
            h = module.act_fn(gate) * value
    else:
        h = module.act_fn(h)
    y = _project(module, "down_proj", e, h, transposed)
    if getattr(module, "has_post_expert_norm", False):
        y = module.post_expert_norm(y)
    return y


def _dispatch(
    module: nn.Module, hidden: torch.Tensor, weights: torch.Tensor, top_k: int, on_input: bool
) -> torch.Tensor:
    """Expert ``e`` runs on the first ``load_e`` tokens, weighted (on its input or its output) and
    summed back into their rows."""
    transposed = bool(getattr(module, "is_transposed", True))
    has_gate = bool(getattr(module, "has_gate", True))
    count = int(_fused_weights(module)[0].shape[0])
    out = torch.zeros_like(hidden)
    for e, load in enumerate(expert_loads(hidden.shape[0], top_k, count)):
        if load == 0:
            continue  # an expert no token reaches is not read
        x, w = hidden[:load], weights[:load, :1].to(hidden.dtype)
        y = _run_expert(module, e, x * w if on_input else x, transposed, has_gate)
        out.index_add_(0, torch.arange(load, device=hidden.device), y if on_input else y * w)
    return out


def _dbrx_expert(module: Any, e: int, x: torch.Tensor) -> torch.Tensor:
    """Dbrx's expert: ``act(x w1ᵀ) * (x v1ᵀ)``, then ``@ w2`` (stored ``[ffn, width]``)."""
    mlp = module.mlp
    gate = torch.nn.functional.linear(x, _slice(mlp, "w1", e))
    up = torch.nn.functional.linear(x, _slice(mlp, "v1", e))
    return torch.mm(mlp.activation_fn(gate) * up, _slice(mlp, "w2", e))


def _dbrx_forward(name: str, top_k: int) -> Callable[..., torch.Tensor]:
    def forward(self: Any, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> Any:
        if top_k_index.shape[-1] != top_k:
            raise OpcountError(f"{name}: routed {top_k_index.shape[-1]} experts per token, expected {top_k}")
        flat = hidden.reshape(-1, self.hidden_size)
        out = torch.zeros_like(flat)
        for e, load in enumerate(expert_loads(flat.shape[0], top_k, self.num_experts)):
            if load:
                y = _dbrx_expert(self, e, flat[:load]) * top_k_weights[:load, :1]
                out.index_add_(0, torch.arange(load, device=flat.device), y)
        return out.view(hidden.shape[0], -1, self.hidden_size)

    return forward


def _fused_forward(name: str, top_k: int) -> Callable[..., torch.Tensor]:
    def forward(self: nn.Module, hidden: Any, top_k_index: Any = None, top_k_weights: Any = None) -> torch.Tensor:
        if not all(isinstance(t, torch.Tensor) for t in (hidden, top_k_index, top_k_weights)) or hidden.dim() != 2:
            raise OpcountError(f"{name}: called without (hidden [tokens, width], top_k_index, top_k_weights)")
        if top_k_index.shape[-1] != top_k:
            raise OpcountError(f"{name}: routed {top_k_index.shape[-1]} experts per token, expected {top_k}")
        return _dispatch(self, hidden, top_k_weights, top_k, on_input=False).to(hidden.dtype)

    return forward


def _llama4_forward(self: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama 4's block: the router's sigmoid scores weight each routed expert's input, plus the shared expert."""
    flat = hidden.reshape(-1, self.hidden_dim)
    scores, logits = self.router(flat)
    out: torch.Tensor = self.shared_expert(flat)
    out.add_(self.experts(flat, scores))
    return out, logits


def _llama4_experts(top_k: int) -> Callable[..., torch.Tensor]:
    def forward(self: nn.Module, hidden: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return _dispatch(self, hidden, scores, top_k, on_input=True)

    return forward


def _list_forward(block: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of experts (transformers 4): the router, softmax and top-k as in the model, then
    expert ``e`` on its share of the tokens, weighted and summed back; a gated shared expert."""
    batch, seq, width = hidden.shape
    flat = hidden.view(-1, width)
    logits = block.gate(flat)
    weights = torch.softmax(logits, dim=1, dtype=torch.float)
    weights, _ = torch.topk(weights, block.top_k, dim=-1)
    if getattr(block, "norm_topk_prob", True):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(hidden.dtype)
    out = torch.zeros_like(flat)
    experts: nn.ModuleList = block.experts
    for expert, load in zip(experts, expert_loads(flat.shape[0], block.top_k, len(experts)), strict=True):
        if load == 0:
            continue
        y = expert(flat[:load]) * weights[:load, :1]
        out.index_add_(0, torch.arange(load, device=flat.device), y)
    shared = getattr(block, "shared_expert", None)
    if isinstance(shared, nn.Module):
        y = shared(flat)
        gate = getattr(block, "shared_expert_gate", None)
        if isinstance(gate, nn.Module):
            y = torch.sigmoid(gate(flat)) * y
        out = out + y
    return out.view(batch, seq, width), logits


@contextlib.contextmanager
def expected_routing(model: nn.Module, experts: Sequence[Experts] | None = None) -> Iterator[list[str]]:
    """Every mixture-of-experts block of ``model`` routes by expectation for the block; yields
    their module names. ``experts``: the blocks :func:`find_experts` found (found here when not
    given); an expert-like module no rule covers is then an error naming it."""
    modules = dict(model.named_modules())
    found = find_experts(model) if experts is None else experts
    forwards: list[tuple[object, str, Any]] = []  # the modules whose forward routes by expectation
    sliced: list[nn.Module] = []
    blocks: list[str] = []
    for e in found:
        if e.family:
            continue
        experts_module, block = modules[e.name], modules[e.block]
        if _is_llama4(block):
            forwards.append((experts_module, "forward", types.MethodType(_llama4_experts(e.top_k), experts_module)))
            forwards.append((block, "forward", types.MethodType(_llama4_forward, block)))
        elif _is_expert_list(block):
            forwards.append((block, "forward", types.MethodType(_list_forward, block)))
        elif _is_dbrx(experts_module):
            forward = _dbrx_forward(e.name, e.top_k)
            forwards.append((experts_module, "forward", types.MethodType(forward, experts_module)))
        else:
            forward = _fused_forward(e.name, e.top_k)
            forwards.append((experts_module, "forward", types.MethodType(forward, experts_module)))
        if not _is_expert_list(block):
            sliced.append(experts_module)
        blocks.append(e.block)
    with contextlib.ExitStack() as stack:
        routed: list[str] = []
        for family in _FAMILIES:
            routed += stack.enter_context(family.routed(model, [e for e in found if e.family == family.FAMILY]))
        stack.enter_context(patched(forwards))
        stack.callback(_remove_slices, sliced)
        for experts_module in sliced:
            _add_slices(experts_module)
        yield list(dict.fromkeys(routed + blocks))


def _remove_slices(modules: Sequence[nn.Module]) -> None:
    for experts in modules:
        holder = getattr(experts, "mlp") if _is_dbrx(experts) else experts  # noqa: B009
        for n in _slice_names(holder):
            del holder._buffers[n]
