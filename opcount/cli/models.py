"""What a model spec on the command line names, built, with its inputs.

    resnet50                       a torchvision model, built with weights=None, at its own input size
    mypkg.models:build             user code: a factory returning a model, (model, inputs) or
    path/file.py:build             (model, inputs, kwargs); the file imported under a private name
    hf:GPT2Config                  a transformers model from its config (or model) class, no download
    hf:path/to/config.json         the causal LM a local config describes (or hf:MODEL_DIR, its folder)

``--input`` replaces the default inputs and ``--dtype`` sets their dtype (a float dtype converts
the model too); ``--meta`` makes them shapes that are never allocated. A spec that names nothing,
or a factory that fails, is a :class:`~opcount.cli.args.UsageError` naming the spec.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..llm.models.build import is_causal_lm, learned_positions
from ..llm.models.fields import FieldError, check_no_hub_code
from ..llm.models.limits import check_config, module_budget
from ..llm.models.local_config import looks_local, read_config, with_values
from ..messages import FAILURES, one_line
from ..torch_internals import pytree
from ..tracers.meta import TensorShape
from .args import UsageError, check_kept, check_real_weights, hf_overrides, invalid_config
from .options import Inputs


@dataclass
class Loaded:
    """A model ready to analyze. ``alternatives``: further (inputs, kwargs) to try, in order,
    when the model cannot be traced on the first."""

    model: nn.Module
    inputs: Any
    kwargs: dict[str, Any] | None
    label: str
    alternatives: list[tuple[Any, dict[str, Any] | None]] = field(default_factory=list)


def load(spec: str, inputs: Inputs) -> Loaded:
    """The model named by ``spec`` with its inputs (``--input`` wins over the defaults)."""
    _check_dtype(spec, inputs)
    if spec.startswith("hf:"):
        return _huggingface(spec[3:], inputs)
    if ":" in spec:
        return _factory(spec, inputs)
    return _torchvision(spec, inputs)


def _check_dtype(spec: str, inputs: Inputs) -> None:
    # A factory or a transformers model brings its own inputs: an integer --dtype has none to set.
    if inputs.shapes or inputs.dtype.is_floating_point or not (":" in spec or spec.startswith("hf:")):
        return
    raise UsageError(
        f"--dtype {inputs.dtype_name} sets the dtype of --input tensors, and {spec} makes its own inputs: "
        "give --input SHAPE, or a float --dtype (it converts the model and its float inputs)"
    )


def _random(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(*shape, dtype=dtype)
    return torch.zeros(*shape, dtype=dtype)  # ids/indices: 0 is valid for any vocabulary


def _given_inputs(inputs: Inputs) -> tuple[Any, ...] | None:
    if not inputs.shapes:
        return None
    if inputs.meta:  # never allocated: the dispatch tracer makes meta tensors of them
        return tuple(TensorShape(shape, inputs.dtype) for shape in inputs.shapes)
    return tuple(_random(shape, inputs.dtype) for shape in inputs.shapes)


def _as_inputs(tensors: tuple[torch.Tensor, ...]) -> Any:
    return tensors[0] if len(tensors) == 1 else tensors


def _prepare(model: nn.Module, inputs: Inputs) -> nn.Module:
    try:
        model.eval()  # torch's own recursion over the children: one frame per level of nesting
    except RecursionError:
        raise UsageError(
            f"the model ({type(model).__name__}) nests modules deeper than Python's recursion limit "
            f"({sys.getrecursionlimit()}): torch's model.eval() could not walk it; raise the limit with "
            "sys.setrecursionlimit(), as running the model itself needs"
        ) from None
    dtype = inputs.dtype
    if dtype.is_floating_point and dtype != torch.float32:
        model.to(dtype)
    return model


# ----- torchvision ------------------------------------------------------------------------------
_FAMILIES = ("video", "segmentation", "detection", "optical_flow", "quantization")


def _torchvision(name: str, inputs: Inputs) -> Loaded:
    tvm = _torchvision_models(name)
    known = tvm.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(
            f"unknown model {name!r}: not a torchvision model{hint} "
            "(user code: module.path:factory; transformers: hf:ConfigClass)"
        )
    family = next((f for f in _FAMILIES if name in tvm.list_models(module=getattr(tvm, f))), "classification")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weights=None construction warns about init defaults
        model = _prepare(tvm.get_model(name, **_no_weights(tvm, name)), inputs)
    given = _given_inputs(inputs)
    if family == "detection":
        images = list(given) if given else [torch.rand(3, 800, 800, dtype=inputs.dtype)]
        bad = [tuple(i.shape) for i in images if len(i.shape) != 3]
        if bad:
            raise UsageError(f"detection models take images of shape C,H,W (one --input per image), got {bad[0]}")
        return Loaded(model, (images,), None, f"{name} ({len(images)} image(s) {_shape_text(images)})")
    tensors = given or tuple(_random(s, inputs.dtype) for s in _default_shapes(tvm, name, family, model))
    return Loaded(model, _as_inputs(tensors), None, f"{name} on {_shape_text(tensors)}")


def _torchvision_models(name: str) -> Any:
    """``torchvision.models``: torchvision is an optional extra, needed only for its model names."""
    try:
        import torchvision.models as tvm
    except ImportError:
        raise UsageError(
            f"model {name!r}: torchvision model names need torchvision, which is not installed: "
            f"{vision_install_hint(torch.__version__)} (user code: module.path:factory; transformers: hf:ConfigClass)"
        ) from None
    except RuntimeError as e:  # a torchvision built for another torch release fails to load its operators
        raise UsageError(
            f"torchvision failed to load ({one_line(e)}): install the release built for torch "
            f"{torch.__version__}: {vision_install_hint(torch.__version__)}"
        ) from e
    return tvm


def vision_install_hint(torch_version: str) -> str:
    """The pip line that adds torchvision without moving the installed torch: the ``vision`` extra
    alone lets pip take the newest torchvision, which requires (and installs) its own torch release.
    Each torchvision is built for one torch minor release: 0.(minor + 15) for torch 2.minor since
    torch 2.0 and torchvision 0.15 (torchvision's README, "Installation"; the PyTorch wiki's domain
    version compatibility matrix): torch 2.13 -> 0.28, 2.14 -> 0.29, 2.15 -> 0.30."""
    release = re.match(r"2\.(\d+)\.", torch_version)
    if release is None:  # not a release the rule covers: name the extra alone
        return "pip install 'opcount[vision]'"
    minor = int(release.group(1))
    return f"pip install 'opcount[vision]' 'torchvision==0.{minor + 15}.*' (the release built for torch 2.{minor})"


def _no_weights(tvm: Any, name: str) -> dict[str, None]:
    """Keyword arguments that keep every weight download off, the backbone's included."""
    import inspect

    params = inspect.signature(tvm.get_model_builder(name)).parameters
    return {key: None for key in ("weights", "weights_backbone") if key in params}


def _default_shapes(tvm: Any, name: str, family: str, model: nn.Module) -> list[tuple[int, ...]]:
    if family == "segmentation":
        return [(1, 3, 520, 520)]
    if family == "optical_flow":
        return [(1, 3, 520, 960), (1, 3, 520, 960)]
    meta, crop = _weights_meta(tvm, name)
    if family == "video":
        h, w = crop if isinstance(crop, tuple) else (112, 112)
        return [(1, 3, max(16, meta.get("min_temporal_size", 0)), h, w)]
    # A model built without weights may be configured for another size than its weights (ViT-H/14).
    size = getattr(model, "image_size", None)
    if not isinstance(size, int):
        size = crop if isinstance(crop, int) else 224
    return [(1, 3, size, size)]


def _weights_meta(tvm: Any, name: str) -> tuple[dict[str, Any], Any]:
    """The default weights' metadata and evaluation crop size, when torchvision has them."""
    try:
        weights = tvm.get_model_weights(name).DEFAULT
    except (ValueError, AttributeError, KeyError):
        return {}, None
    crop = getattr(weights.transforms, "keywords", {}).get("crop_size")
    if isinstance(crop, (list, tuple)):
        crop = tuple(crop) if len(crop) == 2 else crop[0]
    return dict(weights.meta), crop


def _shape_text(tensors: Sequence[Any]) -> str:
    return ", ".join("x".join(map(str, t.shape)) for t in tensors)


# ----- user code --------------------------------------------------------------------------------
def _factory(spec: str, options: Inputs) -> Loaded:
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise UsageError(f"malformed model {spec!r}: expected module.path:factory or path/file.py:factory")
    module = _import(target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{target} has no attribute {attr!r}")
        obj = getattr(obj, part)
    try:
        made = obj() if callable(obj) and not isinstance(obj, nn.Module) else obj
    except FAILURES as e:  # sys.exit in user code is its error, not the command's exit
        raise UsageError(f"{spec}() failed: {one_line(e)}") from e
    model, inputs, kwargs = _unpack(spec, made)
    model = _prepare(model, options)
    given = _given_inputs(options)
    if given is not None:
        inputs, kwargs = _as_inputs(given), None
    elif inputs is None:
        raise UsageError(f"{spec} returned a model without inputs: pass --input SHAPE or return (model, inputs)")
    else:  # the model was converted to --dtype: its own float inputs must follow, or the first layer fails
        inputs, kwargs = _converted(inputs, options.dtype), _converted(kwargs, options.dtype)
    return Loaded(model, inputs, kwargs, f"{spec}")


def _converted(tree: Any, dtype: torch.dtype) -> Any:
    """``tree`` (a factory's inputs or kwargs) with its floating-point tensors in a float ``--dtype``,
    as :func:`_prepare` converted the model; integer tensors (ids, indices) stay as they are."""
    if not dtype.is_floating_point or dtype == torch.float32:
        return tree

    def leaf(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return pytree.tree_map(leaf, tree)


def _import(target: str) -> Any:
    path = Path(target)
    try:
        if target.endswith(".py") or os.sep in target:
            if not path.is_file():
                raise UsageError(f"no such file: {target}")
            # A private name: a user's json.py must not replace the json module for everyone.
            name = f"_opcount_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module  # dataclasses and pickle look a class's module up by name
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            return module
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # like `python -m`: the current directory's packages
        return importlib.import_module(target)
    except UsageError:
        raise
    except ModuleNotFoundError as e:
        raise UsageError(f"cannot import {target!r}: {one_line(e)}") from e
    except FAILURES as e:  # a module that exits on import, too
        raise UsageError(f"importing {target} failed: {one_line(e)}") from e


def _unpack(spec: str, made: Any) -> tuple[nn.Module, Any, dict[str, Any] | None]:
    if isinstance(made, nn.Module):
        return made, None, None
    if isinstance(made, (tuple, list)) and len(made) in (2, 3) and isinstance(made[0], nn.Module):
        kwargs = made[2] if len(made) == 3 else None
        if kwargs is not None and not isinstance(kwargs, dict):
            raise UsageError(f"{spec}: the third item returned must be a dict of keyword arguments")
        return made[0], made[1], kwargs
    raise UsageError(f"{spec} returned {type(made).__name__}, not a model, (model, inputs) or (model, inputs, kwargs)")


# ----- transformers -----------------------------------------------------------------------------
def _huggingface(name: str, inputs: Inputs) -> Loaded:
    try:
        import transformers
    except ImportError:
        raise UsageError("hf: models need the transformers package (pip install 'opcount[hf]')") from None
    cls: Any = getattr(transformers, name, None) if name.isidentifier() else None
    build: Any = cls
    config_class: Any = None
    base: Any = None
    local = looks_local(name)  # a config.json or a downloaded model's folder: its causal LM
    if local:
        base = read_config(name)
        config_class, build = type(base), transformers.AutoModelForCausalLM.from_config
    elif isinstance(cls, type) and issubclass(cls, transformers.PretrainedConfig):
        if cls not in transformers.MODEL_MAPPING:
            raise UsageError(f"transformers has no model for {name}: AutoModel knows no model for this config")
        config_class = cls
        build = transformers.AutoModel.from_config
    elif isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        config_class = cls.config_class
    else:
        names = [n for n in dir(transformers) if n.endswith(("Config", "Model"))]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown transformers class {name!r}: expected a config or model class name{hint}")
    where = f"hf:{name}"
    overrides = {"use_cache": False, **hf_overrides(config_class, inputs.hf_config)}
    try:
        config = with_values(base, overrides) if local else config_class(**overrides)
        check_kept(where, config, overrides)
        check_config(config)  # a billion layers would hang the build on meta too
        check_no_hub_code(config)  # a kernel from the Hub: transformers would download it while building
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # construction warns about init defaults
            with torch.device("meta"), module_budget(where):  # no storage: counting the weights is free
                model = build(config)
            if not inputs.meta:
                check_real_weights(where, model, "--hf-config num_hidden_layers=2")
                model = build(config)
    except UsageError:
        raise
    except FieldError as e:
        raise UsageError(f"{where}: {e}") from None
    except ImportError as e:  # a model needing an optional package (DETR: timm)
        raise UsageError(f"{where}: {one_line(e)}") from e
    except Exception as e:  # raised by the constructors on the config's values, whatever its type
        raise invalid_config(where, inputs.hf_config, e) from e
    model = _prepare(model, inputs)
    given = _given_inputs(inputs)
    if given is not None:
        return Loaded(model, _as_inputs(given), None, f"{type(model).__name__} on {_shape_text(given)}")
    with _made_on(inputs):
        kwargs = _hf_inputs(model, config, inputs.seq_len)
    label = f"{type(model).__name__} on {', '.join(f'{k} {_shape_text([v])}' for k, v in kwargs.items())}"
    alternatives: list[tuple[Any, dict[str, Any] | None]] = []
    if is_causal_lm(config) and "input_ids" in kwargs:
        # transformers builds its causal mask with torch.vmap, which torch.jit.trace cannot
        # record; a ready 4-D additive mask (as the model would build) skips that step.
        n = kwargs["input_ids"].shape[-1]
        with _made_on(inputs):
            mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        alternatives.append(((), {**kwargs, "attention_mask": mask.to(_float_dtype(inputs.dtype))}))
    return Loaded(model, (), kwargs, label, alternatives)


def _made_on(inputs: Inputs) -> Any:
    """--meta: tensors made on the meta device, so that a long --seq-len costs no memory."""
    return torch.device("meta") if inputs.meta else nullcontext()


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float32


def _hf_inputs(model: nn.Module, config: Any, seq_len: int | None) -> dict[str, torch.Tensor]:
    """Random inputs for what the model's forward takes: its main input, and the other modality
    of a text-image model (CLIP: ``input_ids`` and ``pixel_values``), each from its sub-config."""
    main = getattr(model, "main_input_name", "input_ids")
    takes = inspect.signature(model.forward).parameters
    wanted = [main] + [name for name in ("input_ids", "pixel_values") if name != main and name in takes]
    if seq_len and "input_ids" in wanted:
        _check_positions(model, config, seq_len)
    gen = torch.Generator().manual_seed(0)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    inputs = {name: _hf_input(name, model, config, seq_len, gen, dtype) for name in wanted}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = _hf_input("input_ids", model, config, seq_len, gen, dtype)
    return inputs


def _check_positions(model: nn.Module, config: Any, seq_len: int) -> None:
    # The real model fails past its learned position table (IndexError); on meta nothing is looked
    # up and the trace would price a model that cannot run.
    table = learned_positions(model, config)
    if table is not None and seq_len > table[1]:
        name, rows = table
        raise UsageError(
            f"--seq-len {seq_len}: more positions than the {rows} rows of {type(model).__name__}'s learned "
            f"position table '{name}' (set --hf-config max_position_embeddings, or a shorter --seq-len)"
        )


def _hf_input(
    name: str, model: nn.Module, config: Any, seq_len: int | None, gen: torch.Generator, dtype: torch.dtype
) -> torch.Tensor:
    if name == "input_ids":
        text = getattr(config, "text_config", None) or config
        vocab = int(getattr(text, "vocab_size", 0) or 2)
        default = min(128, getattr(text, "max_position_embeddings", 128) or 128)  # CLIP's text takes 77
        return torch.randint(vocab, (1, seq_len or default), generator=gen)
    if name == "pixel_values":
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", 224)
        h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
        return torch.randn(1, getattr(vision, "num_channels", 3), h, w, generator=gen).to(dtype)
    if name == "input_values":
        return torch.randn(1, seq_len or 16000, generator=gen).to(dtype)
    if name == "input_features":
        frames = 2 * getattr(config, "max_source_positions", 1500)
        return torch.randn(1, getattr(config, "num_mel_bins", 80), frames, generator=gen).to(dtype)
    raise UsageError(
        f"{type(model).__name__} takes {name!r}, which opcount cannot make up; "
        "write a factory returning (model, inputs, kwargs) and run opcount module.path:factory"
    )
