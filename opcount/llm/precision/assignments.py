"""Which storage format each weight of an LLM is in: a default and per-module assignments.

An assignment is ``PATTERN=FORMAT`` (``experts=mxfp4``); a bare ``FORMAT`` is the default for the
weights no assignment names. The weights a format applies to are the quantizable ones:

- every ``nn.Linear`` weight, named by its module's path (``model.layers.0.self_attn.q_proj``);
  the default leaves out the output projection (``lm_head``), which an assignment may still name;
- the fused expert stacks of a mixture of experts, ``[experts, out, in]`` parameters of an
  experts module (``model.layers.0.mlp.experts.gate_up_proj``), quantized per expert matrix.

Embeddings, norms, biases, routers and convolutions stay in the unquantized dtype.

**Matching.** ``PATTERN`` is a glob (``*``, ``?``, ``[...]``, as in :mod:`fnmatch`) that matches a
weight when it matches a run of whole components of the weight's dotted path: ``experts`` matches
every weight under a module named ``experts``, ``self_attn`` the attention's projections,
``mlp.experts.down_proj`` one stack, ``layers.0.*`` everything in the first layer, ``*_proj``
every projection. When several assignments match one weight, the last one given wins. An
assignment that matches no weight, an unknown format, and a format a matched weight cannot take
are errors (:class:`WeightAssignmentError`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ...errors import OpcountValueError
from ...hardware.lookup import dtype_name
from .formats import ALIASES, FORMATS, inner_size, refusal

WeightSpec = str | Mapping[str, str] | Sequence[str]


class WeightAssignmentError(OpcountValueError):
    """A weight assignment that names an unknown format, matches no weight, or gives a weight a
    format it cannot take; the message names the assignment."""


def canonical_format(value: Any, allowed: tuple[str, ...] = FORMATS, role: str = "weight") -> str:
    """``value``'s canonical format name (a name, an alias or a torch dtype), checked against ``allowed``."""
    text = str(dtype_name(value)).lower().strip()
    name = ALIASES.get(text, text)
    if name not in allowed:
        raise WeightAssignmentError(
            f"unknown {role} dtype {value!r}; choose one of {', '.join(allowed)} (or bf16, fp16, fp8)"
        )
    return name


@dataclass(frozen=True)
class Weight:
    """One quantizable weight: its parameter name, shape and orientation (``transposed``: ``[.., in, out]``)."""

    param: str
    path: str  # what patterns match: the Linear's module path, or the expert stack's parameter path
    shape: tuple[int, ...]
    transposed: bool = False
    default: bool = True  # whether the default format applies (the output projection: no)


@dataclass(frozen=True)
class WeightFormats:
    """The default format and the ``(pattern, format)`` assignments, in the order given."""

    default: str = "bfloat16"
    assignments: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, spec: Any) -> WeightFormats:
        """The formats from a format (``"int4"``, a torch dtype), ``"PATTERN=FORMAT"`` strings (a list, or
        one string separated by commas) or a mapping ``{pattern: format}``; the default is the bare
        format given (bfloat16 when none is)."""
        if isinstance(spec, Mapping):
            items = [f"{k}={v}" for k, v in spec.items()]
        elif isinstance(spec, str):
            items = spec.split(",")
        elif isinstance(spec, Sequence):
            items = [str(s) for s in spec]
        else:
            items = [spec]  # a torch dtype
        default: str | None = None
        assignments: list[tuple[str, str]] = []
        for item in items:
            if not isinstance(item, str):
                default = canonical_format(item)
                continue
            pattern, sep, fmt = item.strip().rpartition("=")
            if not sep:
                if default is not None:
                    raise WeightAssignmentError(f"weight dtype: two defaults given ({default} and {fmt})")
                default = canonical_format(fmt)
            elif not pattern.strip():
                raise WeightAssignmentError(f"weight assignment {item!r}: expected PATTERN=FORMAT")
            else:
                try:
                    assignments.append((pattern.strip(), canonical_format(fmt)))
                except WeightAssignmentError as e:
                    raise WeightAssignmentError(f"weight assignment {item.strip()}: {e}") from None
        return cls(default or "bfloat16", tuple(assignments))

    def text(self) -> str:
        """The formats as ``--weight-dtype`` takes them: ``experts=mxfp4,bfloat16`` (``bfloat16`` alone
        when uniform)."""
        return ",".join([*(f"{p}={f}" for p, f in self.assignments), self.default])

    def formats(self, weights: Sequence[Weight], owner: str) -> dict[str, str]:
        """The format of each quantizable weight (by parameter name) of the model ``owner`` names;
        the others are absent (they stay unquantized)."""
        chosen = {w.param: self.default for w in weights if w.default}
        for pattern, fmt in self.assignments:
            matched = [w for w in weights if _matches(pattern, w.path)]
            if not matched:
                raise WeightAssignmentError(
                    f"weight assignment {pattern}={fmt}: no linear or expert weight of {owner} matches {pattern!r} "
                    "(a glob over whole components of module paths, e.g. experts, self_attn, mlp.down_proj)"
                )
            for w in matched:
                chosen[w.param] = fmt
        by_name = {w.param: w for w in weights}
        for param, fmt in chosen.items():
            w = by_name[param]
            why = refusal(fmt, inner_size(w.shape, w.transposed))
            if why:
                source = next((f"{p}={f}" for p, f in reversed(self.assignments) if _matches(p, w.path)), fmt)
                raise WeightAssignmentError(f"weight dtype {source}: {w.path} {list(w.shape)}: {why}")
        return chosen

    def assigned(self, weights: Sequence[Weight]) -> set[str]:
        """The parameter names of the weights an assignment names (whatever the default is)."""
        return {w.param for w in weights if any(_matches(p, w.path) for p, _ in self.assignments)}


def _matches(pattern: str, path: str) -> bool:
    """Whether the glob ``pattern`` matches a run of whole components of the dotted ``path``."""
    parts = path.split(".")
    return any(
        fnmatch.fnmatchcase(".".join(parts[i:j]), pattern)
        for i in range(len(parts))
        for j in range(i + 1, len(parts) + 1)
    )


# Expert modules that store each stack as [experts, in, out] without saying so (transformers'
# grouped-GEMM experts say it with ``is_transposed``).
_TRANSPOSED_EXPERTS = frozenset({"Llama4TextExperts"})


def quantizable(model: nn.Module) -> list[Weight]:
    """The weights a format applies to: ``nn.Linear`` weights and fused expert stacks (see the
    module's docstring), each once."""
    get_head: Any = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    names = {id(p): name for name, p in model.named_parameters()}  # a shared weight by its first name
    found: list[Weight] = []
    seen: set[int] = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if id(module.weight) not in seen:
                seen.add(id(module.weight))
                found.append(
                    Weight(names[id(module.weight)], name, tuple(module.weight.shape), default=module is not head)
                )
            continue
        experts = getattr(module, "num_experts", None)
        for pname, p in module.named_parameters(recurse=False):
            if p.dim() == 3 and isinstance(experts, int) and p.shape[0] == experts and id(p) not in seen:
                seen.add(id(p))
                transposed = bool(getattr(module, "is_transposed", type(module).__name__ in _TRANSPOSED_EXPERTS))
                found.append(Weight(names[id(p)], f"{name}.{pname}" if name else pname, tuple(p.shape), transposed))
    return found
