"""Model-zoo builders for the coverage tests: torchvision models at their usual input sizes and
small transformers configs. Weights are never downloaded (weights=None, weights_backbone=None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

# torchvision builds every model here: a test module that imports this one is skipped without it.
models = pytest.importorskip("torchvision.models")

Built = tuple[nn.Module, tuple[Any, ...]]

FAMILIES = {
    "classification": models,
    "segmentation": models.segmentation,
    "detection": models.detection,
    "video": models.video,
    "optical_flow": models.optical_flow,
}


def torchvision_names(family: str) -> list[str]:
    return sorted(models.list_models(module=FAMILIES[family]))


def _crop_size(name: str) -> int:
    """The smallest crop size among the model's published weights (224 when it has none)."""
    crops = []
    for weights in models.get_model_weights(name):
        crop = getattr(weights.transforms(), "crop_size", None)
        if crop:
            crops.append(crop[0] if isinstance(crop, (list, tuple)) else crop)
    return min(crops, default=224)


def torchvision_model(name: str, **overrides: Any) -> Built:
    """The model (eval mode, random weights) and its usual input.

    classification: 1x3xCxC at the weights' crop size; segmentation: 1x3x520x520; detection: one
    3x800x800 image; video: 1x3x16xCxC; optical flow: two 1x3x368x496 frames.
    """
    family = next(f for f in FAMILIES if name in torchvision_names(f))
    kwargs: dict[str, Any] = {"weights": None, **overrides}
    if family in ("segmentation", "detection"):
        kwargs.setdefault("weights_backbone", None)
    model = models.get_model(name, **kwargs).eval()
    crop = overrides.get("image_size", _crop_size(name))
    if family == "classification":
        inputs: tuple[Any, ...] = (torch.randn(1, 3, crop, crop),)
    elif family == "segmentation":
        inputs = (torch.randn(1, 3, 520, 520),)
    elif family == "detection":
        inputs = ([torch.randn(3, 800, 800)],)
    elif family == "video":
        inputs = (torch.randn(1, 3, 16, crop, crop),)
    else:
        inputs = (torch.randn(1, 3, 368, 496), torch.randn(1, 3, 368, 496))
    return model, inputs


class _Keywords(nn.Module):
    """Calls a transformers model with keyword inputs and tuple outputs."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args: torch.Tensor) -> Any:
        return self.model(**dict(zip(self.names, args)), return_dict=False)


def _bert() -> Built:
    import transformers as tf

    cfg = tf.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000
    )
    return tf.BertModel(cfg).eval(), (torch.randint(0, 1000, (2, 16)),)


def _gpt2() -> Built:
    import transformers as tf

    cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=64)
    return tf.GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 1000, (2, 16)),)


def _llama() -> Built:
    import transformers as tf

    cfg = tf.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1000,
    )
    return tf.LlamaForCausalLM(cfg).eval(), (torch.randint(0, 1000, (2, 16)),)


def _t5() -> Built:
    import transformers as tf

    cfg = tf.T5Config(d_model=64, num_layers=2, num_heads=4, d_ff=128, d_kv=16, vocab_size=1000)
    model = _Keywords(tf.T5Model(cfg), ("input_ids", "decoder_input_ids"))
    return model.eval(), (torch.randint(0, 1000, (2, 16)), torch.randint(0, 1000, (2, 8)))


def _vit() -> Built:
    import transformers as tf

    cfg = tf.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8
    )
    return tf.ViTModel(cfg).eval(), (torch.randn(2, 3, 32, 32),)


def _whisper() -> Built:
    import transformers as tf

    cfg = tf.WhisperConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_mel_bins=80,
        max_source_positions=50,
        vocab_size=1000,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
    )
    model = _Keywords(tf.WhisperModel(cfg), ("input_features", "decoder_input_ids"))
    return model.eval(), (torch.randn(1, 80, 100), torch.randint(0, 1000, (1, 8)))


def _clip() -> Built:
    import transformers as tf

    small = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
    cfg = tf.CLIPConfig(
        text_config={**small, "vocab_size": 1000},
        vision_config={**small, "image_size": 32, "patch_size": 8},
        projection_dim=32,
    )
    model = _Keywords(tf.CLIPModel(cfg), ("input_ids", "pixel_values"))
    return model.eval(), (torch.randint(0, 1000, (2, 7)), torch.randn(2, 3, 32, 32))


TRANSFORMERS: dict[str, Callable[[], Built]] = {
    "bert": _bert,
    "gpt2": _gpt2,
    "llama": _llama,
    "t5": _t5,
    "vit": _vit,
    "whisper": _whisper,
    "clip": _clip,
}

__all__ = ["FAMILIES", "TRANSFORMERS", "torchvision_model", "torchvision_names"]
