"""The ``opcount`` command: what a model costs, as a table, a tree, JSON, CSV or markdown.

    opcount resnet50                          a torchvision model (built with weights=None)
    opcount mypkg.models:build --input 1,3,64,64
    opcount hf:GPT2Config --seq-len 128       a transformers model from its config class

Mistakes (an unknown model, a malformed shape, contradictory flags, a model that fails on the
input) print one line naming the problem and exit with status 2; ``--debug`` shows the traceback
instead. Flags are checked before any model is built (:mod:`opcount.cli_args`).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO

import torch
from torch import nn

from . import __version__, report
from .analysis import ActivationCountAnalysis, FlopCountAnalysis
from .cli_args import (
    UsageError,
    check_arguments,
    check_output_paths,
    check_real_weights,
    hf_overrides,
    natural_int,
    positive_int,
)
from .cli_warnings import unsupported_warnings
from .errors import OpcountError
from .ir import DTYPE_BYTES
from .llm import command as llm_command
from .llm.model import expected_routing
from .presets import PRESETS
from .progress import Progress
from .provenance import export_meta
from .tracers.meta import TensorShape

FORMATS = ("table", "tree", "json", "csv", "md", "repr")
COLUMN_ALIASES = {
    "acts": "activations",
    "read": "bytes_read",
    "write": "bytes_written",
    "ai": "intensity",
    "%": "percent",
}
DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "double": torch.float64,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
MEMORY_COLUMNS = {"bytes_read", "bytes_written", "bytes", "intensity"}
ROOFLINE_COLUMNS = {"time", "time_share", "bound", "unit"}
SPARSITY_COLUMNS = {"sparse_flops", "sparse_time", "speedup", "sparsity"}


@dataclass
class Loaded:
    """A model ready to analyze. ``alternatives``: further (inputs, kwargs) to try, in order,
    when the model cannot be traced on the first."""

    model: nn.Module
    inputs: Any
    kwargs: dict[str, Any] | None
    label: str
    alternatives: list[tuple[Any, dict[str, Any] | None]] = field(default_factory=list)


# ================================================================================================
# Arguments
# ================================================================================================
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser(compare: bool = False) -> argparse.ArgumentParser:
    """The command's arguments; ``compare``: those of ``opcount compare MODEL [MODEL ...]``."""
    p = _Parser(
        prog="opcount compare" if compare else "opcount",
        description="What a PyTorch model costs, module by module and operator by operator."
        if not compare
        else "Several models side by side: one row per model, or per operator with --by-operator.",
        epilog="Models run in eval mode on random inputs (seed 0). Examples: opcount resnet50; "
        "opcount resnet50 --format tree --depth 2; opcount hf:GPT2Config --seq-len 128 --format json; "
        "opcount mypkg.models:build --input 1,3,64,64 --columns params,flops,percent; "
        "opcount compare resnet50 vit_b_16 --hardware h100-sxm",
    )
    p.add_argument(
        "models" if compare else "model",
        nargs="+" if compare else None,
        metavar="MODEL",
        help="a torchvision model name (resnet50), module.path:factory or file.py:factory "
        "(returning a model, (model, inputs) or (model, inputs, kwargs)), hf:ConfigOrModelClass, "
        "or llm:NAME, a published LLM architecture (llm:llama-3-8b; docs/llm.md)",
    )
    g = p.add_argument_group("inputs")
    g.add_argument(
        "--input",
        action="append",
        metavar="SHAPE",
        type=parse_shape,
        help="input shape such as 1,3,224,224; repeat for several positional inputs",
    )
    g.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="dtype of --input tensors; a float dtype also converts the model (default float32)",
    )
    g.add_argument(
        "--seq-len",
        type=positive_int,
        metavar="N",
        help="hf: sequence length (default 128; audio models: samples, default 16000)",
    )
    g.add_argument(
        "--hf-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hf: override a config field, e.g. num_hidden_layers=2 (repeatable)",
    )
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--preset",
        default="default",
        choices=PRESETS,
        help="flop formulas: every one (default), exactly fvcore's, or multiply-adds only",
    )
    g.add_argument(
        "--flops-per-mac",
        type=int,
        default=1,
        choices=(1, 2),
        help="flops per multiply-add (fvcore: 1, FlopCounterMode and vendor peaks: 2)",
    )
    g.add_argument(
        "--tracer",
        choices=("jit", "dispatch"),
        help="jit tracing (default; --meta implies dispatch) or the dispatch tracer (docs/dispatch.md)",
    )
    g.add_argument(
        "--mode",
        default="eval",
        choices=("eval", "train"),
        help="dispatch tracer: the forward pass (default) or a training step, forward and backward",
    )
    g.add_argument(
        "--meta",
        action="store_true",
        help="analyze on meta tensors, without the weights or arithmetic (implies --tracer dispatch)",
    )
    g = p.add_argument_group("roofline")
    g.add_argument(
        "--hardware",
        type=_hardware_arg,
        metavar="NAME_OR_FILE",
        help="speed-of-light time per module on a preset (h100-sxm, a100-sxm, l4, t4, rtx-4090, "
        "h200, b200, mi300x, a10g, l40s, xeon-8480-2s, ...), 'local' (this machine, measured once and cached) "
        "or a .toml/.json hardware file; adds columns time, bound",
    )
    g.add_argument(
        "--recalibrate", action="store_true", help="--hardware local: measure this machine again, not from the cache"
    )
    g.add_argument(
        "--roofline-dtype",
        metavar="DTYPE",
        choices=sorted(DTYPE_BYTES),
        help="dtype the roofline assumes (bytes scaled, peaks chosen); default: the model's dtype",
    )
    g.add_argument("--fuse", action="store_true", help="roofline: fuse elementwise epilogues into their producers")
    g.add_argument("--tf32", action="store_true", help="roofline: float32 multiply-adds run as TF32 on tensor units")
    g.add_argument(
        "--plot",
        metavar="FILE",
        help="roofline: write the roofline chart (.png/.svg) to FILE and the "
        "per-module time chart beside it (FILE.time.png); needs --hardware",
    )
    g.add_argument(
        "--sparsity",
        action="append",
        metavar="PATTERN[@NAME]",
        help="sparsity roofline (needs --hardware): 'measured' (the weights' own zeros), '2:4', "
        "'unstructured=0.9', 'block16=87.5%%', or PATTERN@NAME for the weights of modules NAME (a glob); "
        "repeatable; adds columns sparse_flops, sparse_time, speedup, sparsity",
    )
    g = p.add_argument_group("measured")
    g.add_argument(
        "--profile",
        action="store_true",
        help="also run the model: measured time per module and operator (torch.profiler), beside the "
        "prediction with --hardware (%% of speed-of-light); json/csv then hold the measured report; "
        "with --plot, measured vs predicted per module in FILE.profile.png",
    )
    g.add_argument(
        "--repeats",
        type=positive_int,
        default=10,
        metavar="N",
        help="--profile: profiled forward passes after 2 warm-up passes (default 10)",
    )
    llm_command.add_arguments(p)
    g = p.add_argument_group("output")
    g.add_argument(
        "--format",
        default="table",
        choices=FORMATS,
        help="default: table (fvcore's layout); repr: the model as print(model) shows it, the columns inline",
    )
    g.add_argument(
        "--columns",
        type=_column_list,
        metavar="LIST",
        help=f"comma-separated: {', '.join(report.COLUMNS)} (aliases: acts, read, write); "
        "default params,flops (json/csv: every exact statistic computed)",
    )
    g.add_argument(
        "--by-operator",
        action="store_true",
        help="the module x operator breakdown instead of one row per module (table, csv, md)",
    )
    g.add_argument(
        "--depth", type=natural_int, metavar="N", help="module levels shown (default 3; json/csv: every level)"
    )
    g.add_argument(
        "--units",
        default=None,
        choices=("auto", "exact", "1", "K", "M", "G", "T", "P"),
        help="auto: K/M/G/T by magnitude; exact: unrounded; or one fixed unit (1: none)",
    )
    digits = g.add_mutually_exclusive_group()
    digits.add_argument("--decimals", type=natural_int, metavar="N", help="decimals after scaling (table default 3)")
    digits.add_argument("--sig-figs", type=positive_int, metavar="N", help="significant figures (tree/md default 3)")
    g.add_argument("--no-param-shapes", action="store_true", help="table: leave out the parameter rows")
    g.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    g = p.add_argument_group("diagnostics")
    g.add_argument("-q", "--quiet", action="store_true", help="no warnings (unsupported operators, uncalled modules)")
    g.add_argument("--debug", action="store_true", help="show tracebacks and every warning")
    p.add_argument("--version", action="version", version=f"opcount {__version__}")
    return p


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` (or ``1x3x224x224``) -> ``(1, 3, 224, 224)``."""
    body = text.replace(" ", "").strip("()[]")
    parts = body.split("," if "," in body else "x")
    try:
        shape = tuple(int(p) for p in parts if p != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"malformed shape {text!r}: expected integers like 1,3,224,224") from None
    if not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"malformed shape {text!r}: expected positive sizes like 1,3,224,224")
    return shape


def _hardware_arg(text: str) -> Any:
    from .hardware import LOCAL, hardware

    key = text.strip().lower()
    if key == LOCAL or key.startswith(LOCAL + ":"):
        return key  # measured in run(), once --recalibrate and --profile are known
    try:
        return hardware(text)
    except (LookupError, OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e).splitlines()[0]) from None


def _column_list(text: str) -> list[str]:
    keys = [COLUMN_ALIASES.get(k.strip(), k.strip()) for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in report.COLUMNS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown column {', '.join(unknown) or text!r}; choose from {', '.join(report.COLUMNS)}"
        )
    twice = [k for k in dict.fromkeys(keys) if keys.count(k) > 1]
    if twice:  # an alias and its name count as one column (acts, activations)
        raise argparse.ArgumentTypeError(f"column {', '.join(twice)} named twice in {text!r}")
    return keys


# ================================================================================================
# Models and their default inputs
# ================================================================================================
def load(spec: str, args: argparse.Namespace) -> Loaded:
    """The model named by ``spec`` with its inputs (``--input`` wins over the defaults)."""
    if spec.startswith("hf:"):
        return _huggingface(spec[3:], args)
    if ":" in spec:
        return _factory(spec, args)
    return _torchvision(spec, args)


def _dtype(args: argparse.Namespace) -> torch.dtype:
    return DTYPES[args.dtype]


def _random(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(*shape, dtype=dtype)
    return torch.zeros(*shape, dtype=dtype)  # ids/indices: 0 is valid for any vocabulary


def _given_inputs(args: argparse.Namespace) -> tuple[Any, ...] | None:
    if not args.input:
        return None
    if getattr(args, "meta", False):  # never allocated: the dispatch tracer makes meta tensors of them
        return tuple(TensorShape(shape, _dtype(args)) for shape in args.input)
    return tuple(_random(shape, _dtype(args)) for shape in args.input)


def _as_inputs(tensors: tuple[torch.Tensor, ...]) -> Any:
    return tensors[0] if len(tensors) == 1 else tensors


def _prepare(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    model.eval()
    dtype = _dtype(args)
    if dtype.is_floating_point and dtype != torch.float32:
        model.to(dtype)
    return model


# ----- torchvision ------------------------------------------------------------------------------
_FAMILIES = ("video", "segmentation", "detection", "optical_flow", "quantization")


def _torchvision(name: str, args: argparse.Namespace) -> Loaded:
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
        model = _prepare(tvm.get_model(name, **_no_weights(tvm, name)), args)
    given = _given_inputs(args)
    if family == "detection":
        images = list(given) if given else [torch.rand(3, 800, 800, dtype=_dtype(args))]
        bad = [tuple(i.shape) for i in images if len(i.shape) != 3]
        if bad:
            raise UsageError(f"detection models take images of shape C,H,W (one --input per image), got {bad[0]}")
        return Loaded(model, (images,), None, f"{name} ({len(images)} image(s) {_shape_text(images)})")
    tensors = given or tuple(_random(s, _dtype(args)) for s in _default_shapes(tvm, name, family, model))
    return Loaded(model, _as_inputs(tensors), None, f"{name} on {_shape_text(tensors)}")


def _torchvision_models(name: str) -> Any:
    """``torchvision.models``: torchvision is an optional extra, needed only for its model names."""
    try:
        import torchvision.models as tvm
    except ImportError:
        raise UsageError(
            f"model {name!r}: torchvision model names need torchvision, which is not installed: "
            "pip install 'opcount[vision]' (user code: module.path:factory; transformers: hf:ConfigClass)"
        ) from None
    except RuntimeError as e:  # a torchvision built for another torch release fails to load its operators
        raise UsageError(
            f"torchvision failed to load ({_one_line(e)}): install the release built for torch {torch.__version__}"
        ) from e
    return tvm


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
def _factory(spec: str, args: argparse.Namespace) -> Loaded:
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
    except Exception as e:
        raise UsageError(f"{spec}() failed: {_one_line(e)}") from e
    model, inputs, kwargs = _unpack(spec, made)
    model = _prepare(model, args)
    given = _given_inputs(args)
    if given is not None:
        inputs, kwargs = _as_inputs(given), None
    elif inputs is None:
        raise UsageError(f"{spec} returned a model without inputs: pass --input SHAPE or return (model, inputs)")
    return Loaded(model, inputs, kwargs, f"{spec}")


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
        raise UsageError(f"cannot import {target!r}: {_one_line(e)}") from e
    except Exception as e:
        raise UsageError(f"importing {target} failed: {_one_line(e)}") from e


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
def _huggingface(name: str, args: argparse.Namespace) -> Loaded:
    try:
        import transformers
    except ImportError:
        raise UsageError("hf: models need the transformers package (pip install 'opcount[hf]')") from None
    cls: Any = getattr(transformers, name, None) if name.isidentifier() else None
    build: Any = cls
    if isinstance(cls, type) and issubclass(cls, transformers.PretrainedConfig):
        if cls not in transformers.MODEL_MAPPING:
            raise UsageError(f"transformers has no model for {name}: AutoModel knows no model for this config")
        config_class: Any = cls
        build = transformers.AutoModel.from_config
    elif isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        config_class = cls.config_class
    else:
        names = [n for n in dir(transformers) if n.endswith(("Config", "Model"))]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown transformers class {name!r}: expected a config or model class name{hint}")
    where = f"hf:{name}"
    overrides = {"use_cache": False, **hf_overrides(config_class, args.hf_config)}
    try:
        config = config_class(**overrides)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # construction warns about init defaults
            with torch.device("meta"):  # no storage: counting the weights is free
                model = build(config)
            if not args.meta:
                check_real_weights(where, model, "--hf-config num_hidden_layers=2")
                model = build(config)
    except UsageError:
        raise
    except ImportError as e:  # a model needing an optional package (DETR: timm)
        raise UsageError(f"{where}: {_one_line(e)}") from e
    except Exception as e:  # raised by the constructors on the config's values, whatever its type
        raise UsageError(f"{where}: invalid config: {_one_line(e)}") from e
    model = _prepare(model, args)
    given = _given_inputs(args)
    if given is not None:
        return Loaded(model, _as_inputs(given), None, f"{type(model).__name__} on {_shape_text(given)}")
    with _made_on(args):
        kwargs = _hf_inputs(model, config, args.seq_len)
    label = f"{type(model).__name__} on {', '.join(f'{k} {_shape_text([v])}' for k, v in kwargs.items())}"
    alternatives: list[tuple[Any, dict[str, Any] | None]] = []
    if _is_causal_lm(transformers, config) and "input_ids" in kwargs:
        # transformers builds its causal mask with torch.vmap, which torch.jit.trace cannot
        # record; a ready 4-D additive mask (as the model would build) skips that step.
        n = kwargs["input_ids"].shape[-1]
        with _made_on(args):
            mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        alternatives.append(((), {**kwargs, "attention_mask": mask.to(_float_dtype(args))}))
    return Loaded(model, (), kwargs, label, alternatives)


def _made_on(args: argparse.Namespace) -> Any:
    """--meta: tensors made on the meta device, so that a long --seq-len costs no memory."""
    return torch.device("meta") if getattr(args, "meta", False) else nullcontext()


def _float_dtype(args: argparse.Namespace) -> torch.dtype:
    dtype = _dtype(args)
    return dtype if dtype.is_floating_point else torch.float32


def _is_causal_lm(transformers: Any, config: Any) -> bool:
    kind = type(config)
    return (
        not getattr(config, "is_encoder_decoder", False)
        and kind in transformers.MODEL_FOR_CAUSAL_LM_MAPPING
        and kind not in transformers.MODEL_FOR_MASKED_LM_MAPPING
    )


def _hf_inputs(model: nn.Module, config: Any, seq_len: int | None) -> dict[str, torch.Tensor]:
    """Random inputs for what the model's forward takes: its main input, and the other modality
    of a text-image model (CLIP: ``input_ids`` and ``pixel_values``), each from its sub-config."""
    main = getattr(model, "main_input_name", "input_ids")
    takes = inspect.signature(model.forward).parameters
    wanted = [main] + [name for name in ("input_ids", "pixel_values") if name != main and name in takes]
    gen = torch.Generator().manual_seed(0)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    inputs = {name: _hf_input(name, model, config, seq_len, gen, dtype) for name in wanted}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = _hf_input("input_ids", model, config, seq_len, gen, dtype)
    return inputs


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


# ================================================================================================
# Running
# ================================================================================================
class _Collect(logging.Handler):
    """Holds opcount's warnings until the progress line is gone, then they print as one block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _captured_warnings(debug: bool) -> Iterator[_Collect]:
    logger = logging.getLogger("opcount")
    handler = _Collect()
    logger.addHandler(handler)
    old_propagate = logger.propagate
    logger.propagate = False
    try:
        with warnings.catch_warnings():
            if not debug:  # torch.jit's deprecation notices are about our tracer, not the user's model
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate


def _needed(args: argparse.Namespace) -> set[str]:
    columns = set(args.columns or ())
    roles = {"flops"}
    if "activations" in columns:
        roles.add("activations")
    if columns & MEMORY_COLUMNS:
        roles.add("memory")
    if args.hardware is not None or columns & ROOFLINE_COLUMNS:
        if args.hardware is None:
            raise UsageError(f"columns {', '.join(sorted(columns & ROOFLINE_COLUMNS))} need --hardware")
        roles.add("roofline")
    if _wants_sparsity(args) and args.hardware is None:
        raise UsageError("--sparsity and the columns sparse_flops, sparse_time, speedup, sparsity need --hardware")
    if getattr(args, "sparsity", None):
        from .sparsity import parse_sparsity_args

        try:  # before tracing: a typo should not cost a trace
            parse_sparsity_args(args.sparsity)
        except ValueError as e:
            raise UsageError(f"--sparsity: {e}") from None
    if args.plot and args.hardware is None:
        raise UsageError("--plot needs --hardware")
    return roles


def _wants_sparsity(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "sparsity", None)) or bool(set(args.columns or ()) & SPARSITY_COLUMNS)


def _analyses(loaded: Loaded, args: argparse.Namespace, inputs: Any, kwargs: Any) -> dict[str, Any]:
    """Trace the model once and build every analysis the output needs on that one trace."""
    roles = _needed(args)
    # --tracer/--mode/--meta; mode and device are refused by the jit tracer with a clear error
    options: dict[str, Any] = {"tracer": getattr(args, "tracer", None) or "jit"}
    if getattr(args, "mode", "eval") != "eval":
        options["mode"] = args.mode
    if getattr(args, "meta", False):
        options["device"] = "meta"
    flops = FlopCountAnalysis(
        loaded.model, inputs, kwargs, preset=args.preset, flops_per_mac=args.flops_per_mac, **options
    )
    traced = flops.trace()  # the one forward pass of this run
    found: dict[str, Any] = {"flops": flops}
    if "activations" in roles:
        found["activations"] = ActivationCountAnalysis(traced)
    if "memory" in roles:
        from .memory import MemoryTrafficAnalysis  # the costlier import, only when asked for

        found["memory"] = MemoryTrafficAnalysis(traced)
    if "roofline" in roles:
        from .memory import MemoryTrafficAnalysis

        # analyze() turns it into the roofline report
        found["roofline"] = MemoryTrafficAnalysis(traced, fuse=args.fuse)
    for analysis in found.values():  # run() warns once per operator, naming the columns it misses
        analysis.unsupported_ops_warnings(False)
    return found


def analyze(loaded: Loaded, args: argparse.Namespace, spinner: Progress) -> dict[str, Any]:
    """Run every analysis the output needs; on a trace failure try the loader's alternatives."""
    attempts = [(loaded.inputs, loaded.kwargs), *loaded.alternatives]
    first_error: Exception | None = None
    _needed(args)  # a mistake in the arguments is reported before any tracing
    for inputs, kwargs in attempts:
        try:
            spinner.update(f"tracing {loaded.label}")
            found = _analyses(loaded, args, inputs, kwargs)
            for role, analysis in found.items():
                spinner.update(f"{role}: analyzing {loaded.label}")
                analysis.by_module()  # analyses are lazy: do the work here, under the spinner
            if "roofline" in found:
                from .roofline import roofline

                spinner.update(f"roofline on {args.hardware.name}")
                traced = found["roofline"]
                found["roofline"] = roofline(
                    traced,
                    hardware=args.hardware,
                    dtype=args.roofline_dtype,
                    allow_tf32=args.tf32,
                )
                if _wants_sparsity(args):
                    from .sparsity import parse_sparsity_args, sparsity_roofline

                    spinner.update(f"sparsity roofline on {args.hardware.name}")
                    found["sparsity"] = sparsity_roofline(
                        traced,
                        hardware=args.hardware,
                        sparsity=parse_sparsity_args(args.sparsity or []),
                        dtype=args.roofline_dtype,
                        allow_tf32=args.tf32,
                        flops_per_mac=args.flops_per_mac,
                    )
            return found
        except OpcountError as e:
            first_error = first_error or e
    assert first_error is not None
    raise first_error


def render(analyses: dict[str, Any], args: argparse.Namespace) -> str:
    flops = analyses["flops"]
    common: dict[str, Any] = {"activations": analyses.get("activations"), "memory": analyses.get("memory")}
    rl = analyses.get("roofline")
    sp = analyses.get("sparsity")
    if rl is not None:
        common["extra"] = {"roofline": rl} if sp is None else {"roofline": rl, "sparsity": sp}
        if args.columns is None:
            args.columns = ["params", "flops", "time", "time_share", "bound"]
            if args.format == "repr":  # the model string gives every additive column its share
                args.columns.remove("time_share")
            if sp is not None:
                args.columns = ["params", "flops", "sparse_flops", "time", "sparse_time", "speedup", "sparsity"]
    text = _render(flops, common, args)
    if rl is not None and args.format not in ("json", "csv"):
        text += "\n\n" + rl.summary()
        if sp is not None:
            text += "\n" + sp.summary()
    return text


def _render(flops: Any, common: dict[str, Any], args: argparse.Namespace) -> str:
    fmt = args.format
    if fmt in ("json", "csv"):
        meta = export_meta(flops, model=args.model, roofline=(common.get("extra") or {}).get("roofline"))
        kw = {"columns": args.columns, "max_depth": args.depth, "meta": meta, **common}
        if fmt == "json":
            return report.to_json(flops, **kw)
        return report.to_csv(flops, level="operators" if args.by_operator else "modules", **kw).rstrip("\n")
    columns = args.columns or ["params", "flops"]
    depth = 3 if args.depth is None else args.depth
    number_format = _number_format(args, significant=fmt in ("tree", "md", "repr"))
    if fmt == "md":
        return report.to_markdown(
            flops,
            level="operators" if args.by_operator else "modules",
            columns=columns,
            max_depth=depth,
            number_format=number_format,
            **common,
        )
    if fmt == "repr":
        return report.flop_count_str(flops, columns=columns, number_format=number_format, **common)
    if fmt == "tree":
        return report.tree_str(flops, columns=columns, max_depth=depth, number_format=number_format, **common)
    if args.by_operator:
        cols = [c for c in columns if c != "params"] or ["flops"]
        return report.operator_table(flops, columns=cols, max_depth=args.depth, number_format=number_format, **common)
    return report.module_table(
        flops,
        columns=columns,
        max_depth=depth,
        number_format=number_format,
        show_param_shapes=not args.no_param_shapes,
        **common,
    )


def _number_format(args: argparse.Namespace, significant: bool) -> report.NumberFormat:
    unit = {"1": "", None: "auto"}.get(args.units, args.units)
    if args.sig_figs is not None:
        return report.NumberFormat(unit, args.sig_figs, significant=True)
    if args.decimals is not None:
        return report.NumberFormat(unit, args.decimals)
    return report.NumberFormat(unit, 3, significant=significant)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _profiled(loaded: Loaded, analyses: dict[str, Any], args: argparse.Namespace, spinner: Progress, text: str) -> str:
    """--profile: measured times beside the roofline already computed; json/csv: the measured report alone."""
    from .profile import profile

    spinner.update(f"profiling {loaded.label} ({args.repeats} passes)")
    measured = profile(
        loaded.model, loaded.inputs, loaded.kwargs, repeats=args.repeats, predicted=analyses.get("roofline")
    )
    if args.plot:
        path = Path(args.plot)
        measured.plot(path.with_name(f"{path.stem}.profile{path.suffix}"))
    if args.format == "json":
        return measured.to_json()
    if args.format == "csv":
        return measured.to_csv("operators" if args.by_operator else "modules").rstrip("\n")
    depth = 3 if args.depth is None else args.depth
    return "\n\n".join([text, measured.summary(), measured.table(max_depth=depth), measured.table(by="operator")])


def _llm(args: argparse.Namespace, spinner: Progress) -> str:
    """LLM inference phases (opcount.llm.command): built and traced on the meta device."""
    text, points = llm_command.run(args, args.hf_config, spinner.update)
    if args.plot:
        if args.hardware is None:
            raise UsageError("--plot needs --hardware")
        from .llm.plot import save_llm_chart

        spinner.update(f"plotting {args.plot}")
        save_llm_chart(points, args, args.plot)
    return text


def _local_hardware(args: argparse.Namespace, spinner: Progress) -> Any:
    """--hardware local: this machine's device; with --profile, the one the profile runs on (the CPU:
    the command builds models there), so that % of speed of light is against it."""
    from .hardware import hardware

    name = args.hardware if ":" in args.hardware or not getattr(args, "profile", False) else "local:cpu"
    spinner.update(f"measuring this machine ({name})")
    return hardware(name, recalibrate=getattr(args, "recalibrate", False))


def run(args: argparse.Namespace, stderr: TextIO) -> str:
    torch.manual_seed(0)  # random inputs and weights: data-dependent models give the same counts
    # --debug output is read as a log: no line redrawn between its warnings
    spinner = Progress(stderr, enabled=False if args.debug else None)
    llm = llm_command.wanted(args)
    if llm:  # its own flags, checked before anything is built
        llm_command.check(args)
        check_output_paths(args)
    else:
        check_arguments(args, _dtype(args))
        _needed(args)  # before building: a typo should not cost a model
    with _captured_warnings(args.debug) as caught:
        try:
            if isinstance(args.hardware, str):
                args.hardware = _local_hardware(args, spinner)
            elif getattr(args, "recalibrate", False):
                raise UsageError("--recalibrate applies to --hardware local")
            if llm:
                text = _llm(args, spinner)
            else:
                text = _whole_model(args, spinner, caught)
        finally:
            spinner.close()
    if not args.quiet:
        stderr.writelines(f"opcount: warning: {message}\n" for message in dict.fromkeys(caught.messages))
    return text


def _whole_model(args: argparse.Namespace, spinner: Progress, caught: _Collect) -> str:
    spinner.update(f"building {args.model}")
    loaded = load(args.model, args)
    # mixture-of-experts blocks route by expectation: random weights route at random, and meta
    # tensors cannot route at all (docs/llm.md)
    routing = expected_routing(loaded.model) if args.model.startswith("hf:") else nullcontext()
    with torch.no_grad(), routing:
        analyses = analyze(loaded, args, spinner)
    text = render(analyses, args)
    caught.messages += unsupported_warnings(analyses, args.columns or ["params", "flops"])
    if args.profile:
        text = _profiled(loaded, analyses, args, spinner, text)
    if args.plot:
        from .plot import save_charts

        spinner.update(f"plotting {args.plot}")
        save_charts(analyses["roofline"], args.plot)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """The ``opcount`` command; returns the exit status."""
    stderr = sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv[:1] == ["compare"]:  # a first word, not a subparser: `opcount resnet50` stays as it is
            from .compare import compare

            args = build_parser(compare=True).parse_args(argv[1:])
            text = compare(args, stderr)
        else:
            args = build_parser().parse_args(argv)
            text = run(args, stderr)
        if args.output:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        else:
            sys.stdout.write(text + "\n")
        return 0
    except SystemExit as e:  # --help and --version
        return int(e.code or 0)
    except KeyboardInterrupt:
        stderr.write("opcount: interrupted\n")
        return 130
    except (UsageError, OpcountError, ValueError, OSError) as e:
        # Mistakes in what was asked: a bad argument, a model that fails on its input.
        if debug:
            traceback.print_exc()
        message = str(e) if isinstance(e, (UsageError, OpcountError)) else _one_line(e)
        stderr.write(f"opcount: error: {message.splitlines()[0] if message else type(e).__name__}\n")
        return 2
    except Exception as e:
        if debug:
            traceback.print_exc()
        stderr.write(f"opcount: internal error: {_one_line(e)} (run with --debug for the traceback)\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
