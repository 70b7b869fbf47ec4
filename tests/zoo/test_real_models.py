"""Real models with awkward inputs and outputs analyze without error."""

from __future__ import annotations

import pytest
import torch

from opcount import FlopCountAnalysis

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")


# Traced, the image sizes torchvision reads are tensors, so its torch.tensor(size) copies a tensor and warns.
@pytest.mark.filterwarnings("ignore:To copy construct from a tensor:UserWarning")
def test_detection_model_with_a_list_of_images() -> None:
    model = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None).eval()
    a = FlopCountAnalysis(model, ([torch.randn(3, 800, 800)],))
    by_module = a.by_module()
    assert by_module["backbone"] > 0 and by_module["rpn"] > 0 and by_module["roi_heads"] > 0
    # The backbone's convolutions alone: a ResNet-50 body on the resized 800x800 image.
    assert a.by_operator("backbone.body")["conv"] > 4e9 * (800 * 800) / (224 * 224) * 0.9


def _gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_gpt2_with_cache_output() -> None:
    # fvcore fails on this model: its output holds a DynamicCache object.
    model, ids = _gpt2(), torch.randint(0, 1000, (1, 16))
    a = FlopCountAnalysis(model, (ids,))
    # Linear/Conv1D layers per block: qkv 64->192, proj 64->64, fc 64->256, proj 256->64, and the LM head.
    per_block = 16 * (64 * 192 + 64 * 64 + 64 * 256 + 256 * 64)
    head = 16 * 64 * 1000
    assert a.by_operator()["addmm"] == 2 * per_block
    assert a.by_operator("lm_head")["linear"] == head


def test_bert_with_keyword_inputs() -> None:
    cfg = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=1000
    )
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 1000, (1, 16))
    a = FlopCountAnalysis(model, (), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    per_layer = 16 * (3 * 64 * 64 + 64 * 64 + 64 * 128 + 128 * 64)
    pooler = 64 * 64
    assert a.by_operator()["linear"] == 2 * per_layer + pooler
