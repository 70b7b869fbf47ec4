"""Tensor-parallel plans as serving engines shard the blocks transformers' ``tp_plan`` leaves whole.

transformers' plans (``base_model_tp_plan``) are written for its own training-time tensor parallelism:
they leave some blocks of the models people serve unsplit (DeepSeek-V3's multi-head latent attention,
GPT-OSS's attention and experts, linear attention and state-space mixers: :mod:`.mixers`), and some
families have none (GPT-2, Falcon, BLOOM, OPT and the other dense decoders of :mod:`.dense`; Mamba).
vLLM splits them all by heads (or channels; for experts, each expert's intermediate channels). A
:class:`.styles.Supplement` says, for one block of one family (``config.model_type``), which of its
children vLLM splits column-wise or row-wise, which it runs whole on every rank (``replicate``), and the
vLLM source that does so.

:func:`engine_plan` returns the plan a layout follows: transformers' own, plus each supplement whose
block transformers' plan does not split (no column-wise and row-wise child in any layer), its entries
replacing the plan's for the same children. A supplement never overrides a block transformers splits; a
model with neither (GPT-Neo, which vLLM does not run) keeps an empty plan and ``--tp`` refuses it.
:data:`HEAD_FIELDS` names the head counts ``--tp`` must divide beyond the attention's, and
:func:`refusal` says why a family opcount otherwise splits is refused for one config.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from torch import nn

from ...models.composite import text_config
from .dense import DENSE, REFUSALS
from .mixers import HEAD_FIELDS as HEAD_FIELDS
from .mixers import SUPPLEMENTS as MIXERS
from .styles import EXPERTS, UNREDUCED, WHOLE, Supplement

__all__ = ["HEAD_FIELDS", "SUPPLEMENTS", "Supplement", "engine_plan", "refusal"]

# config.model_type -> the blocks vLLM splits that transformers' plan leaves whole (a function of the
# config where they depend on it: Falcon's one all-reduce a layer with parallel attention)
SUPPLEMENTS: dict[str, tuple[Supplement, ...] | Callable[[Any], tuple[Supplement, ...]]] = {**MIXERS, **DENSE}


def supplements(config: Any) -> tuple[Supplement, ...]:
    """The supplements of the family of ``config`` (the decoder's, :func:`.models.composite.text_config`)."""
    c = text_config(config)
    found = SUPPLEMENTS.get(str(getattr(c, "model_type", None)), ())
    return found(c) if callable(found) else found


def refusal(config: Any, tp: int) -> str | None:
    """Why ``--tp tp`` is refused for ``config``'s family though opcount splits it, naming the field; None if not."""
    c = text_config(config)
    check = REFUSALS.get(str(getattr(c, "model_type", None)))
    return check(c, tp) if check is not None and tp > 1 else None


def engine_plan(model: nn.Module, config: Any) -> tuple[dict[str, str], list[str]]:
    """transformers' plan for ``model`` with each block it leaves unsplit completed as vLLM splits it,
    and the vLLM sources of the supplements applied. In a block transformers splits, a supplement
    only adds what vLLM runs whole on every rank (a child the plan does not name)."""
    plan = dict(getattr(model, "tp_plan", None) or getattr(model, "_tp_plan", None) or {})
    modules = [n for n, _ in model.named_modules()]
    names = modules + [n for n, _ in model.named_parameters()]
    sources = []
    for supplement in supplements(config):
        blocks = _blocks(supplement.block, modules)
        if not blocks:
            continue
        pattern = blocks[0][: len(blocks[0]) - len(_concrete(supplement.block, blocks[0]))] + supplement.block
        if _splits(plan, blocks, names):
            styles = {c: s for c, s in supplement.styles.items() if s == WHOLE and f"{pattern}.{c}" not in plan}
        else:  # the supplement's entries replace the plan's for the same children (Qwen3-Next's gathered ones)
            styles = dict(supplement.styles)
        for child, style in styles.items():
            plan[f"{pattern}.{child}" if child else pattern] = style
        sources.append(supplement.source)
    return plan, sources


def _blocks(block: str, modules: Iterable[str]) -> list[str]:
    """The modules named ``block`` (``*`` a layer index) under any prefix."""
    pattern = re.compile(r"^(?:.*\.)?" + re.escape(block).replace(r"\*", r"\d+") + "$")
    return [m for m in modules if pattern.match(m)]


def _concrete(block: str, name: str) -> str:
    """The tail of ``name`` that ``block`` matches (its layer index filled in)."""
    depth = block.count(".") + 1
    return ".".join(name.split(".")[-depth:])


def _splits(plan: Mapping[str, str], blocks: list[str], names: list[str]) -> bool:
    """Whether ``plan`` splits any of ``blocks``: a column-wise and a row-wise child, or an experts style."""
    compiled = [(re.compile("^" + re.escape(k).replace(r"\*", r"\d+") + "$"), v) for k, v in plan.items()]
    for block in blocks:
        kinds = set()
        for name in names:
            if name == block and any(p.match(name) and v == EXPERTS for p, v in compiled):
                return True
            if not name.startswith(block + ".") or "." in name[len(block) + 1 :]:
                continue
            style = next((v for p, v in compiled if p.match(name)), None)
            if style in ("colwise", "packed_colwise"):
                kinds.add("col")
            elif style in ("rowwise", "rowwise_split_input", "rowwise_rep", "packed_rowwise", UNREDUCED):
                kinds.add("row")
        if kinds == {"col", "row"}:
            return True
    return False
