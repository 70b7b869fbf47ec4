"""Mixture-of-experts blocks on transformers 5: expected routing of every layout, the routed
experts' FLOPs and weight reads worked by hand, active parameters, and blocks opcount refuses.

Geometry shared by the tiny configs: width D = 64, expert width F = 32, E = 4 experts (8 for
DeepSeek), 1 multiply-add = 1 flop. A gated expert (SwiGLU) is 3 products of D x F per token:
``gate_up [2F, D]`` and ``down [D, F]``, so ``3 D F = 6144`` MACs; a token routed to k experts
costs ``k x 6144``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("fused experts are transformers 5's layout", allow_module_level=True)

from opcount import FlopCountAnalysis  # noqa: E402
from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.moe.experts import expected_routing, find_experts  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from opcount.tracers.meta import TensorShape  # noqa: E402

D, F, E, N, V = 64, 32, 4, 2, 256
ATTENTION = {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V, "hidden_size": D}
EXPERT = 3 * D * F  # 6144 MACs per token, as many parameters per expert


def expert_slices(cost: PhaseCost, experts: str) -> set[str]:
    """The per-expert weight slices the trace read inside ``experts``."""
    return {
        spec.param.removeprefix(experts + ".")
        for call in cost.flops.trace().calls
        for spec in call.inputs
        if getattr(spec, "param", None) and spec.param.startswith(experts + ".")
    }


def mixtral(top_k: int = 2) -> object:
    return transformers.MixtralConfig(
        **ATTENTION, intermediate_size=F, num_hidden_layers=N, num_local_experts=E, num_experts_per_tok=top_k
    )


@pytest.mark.parametrize("phase,batch,seq_len", [("decode", 1, 1), ("decode", 3, 1), ("prefill", 2, 8)])
def test_mixtral_fused_experts(phase: str, batch: int, seq_len: int) -> None:
    llm = CausalLM(mixtral())
    cost = llm.phase(phase, seq_len=seq_len, kv_len=16 if phase == "decode" else 0, batch=batch)
    tokens, k = batch * seq_len, 2
    assert cost.moe_blocks == ("model.layers.0.mlp", "model.layers.1.mlp")
    experts = "model.layers.0.mlp.experts"
    # decode batch 1: 1 x 2 x 6144 = 12,288; batch 3: 36,864; prefill 2 x 8: 16 x 2 x 6144 = 196,608
    assert cost.flops.by_operator(experts)["linear"] == tokens * k * EXPERT
    assert cost.flops.by_operator("model.layers.0.mlp.gate")["linear"] == tokens * D * E  # the router
    # T x k routed tokens over E experts: min(E, T x k) experts are read, each once (gate_up and down)
    read = min(E, tokens * k)
    assert expert_slices(cost, experts) == {f"{w}[{e}]" for e in range(read) for w in ("gate_up_proj", "down_proj")}
    assert cost.flops.unsupported_ops() == {}


def test_qwen2_moe_shared_expert() -> None:
    """Qwen2-MoE: 4 experts, 2 per token, plus a shared expert of width 48 behind a sigmoid gate."""
    shared = 48
    config = transformers.Qwen2MoeConfig(
        **ATTENTION,
        num_hidden_layers=N,
        intermediate_size=96,
        moe_intermediate_size=F,
        shared_expert_intermediate_size=shared,
        num_experts=E,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )
    llm = CausalLM(config)
    for phase, tokens in (("decode", 1), ("prefill", 6)):
        cost = llm.phase(phase, seq_len=tokens, kv_len=4 if phase == "decode" else 0)
        block = "model.layers.1.mlp"
        assert cost.flops.by_operator(f"{block}.experts")["linear"] == tokens * 2 * EXPERT
        # shared expert: 3 x 64 x 48 = 9,216 MACs a token; its gate 64 x 1; the router 64 x 4
        assert cost.flops.by_operator(f"{block}.shared_expert")["linear"] == tokens * 3 * D * shared
        assert cost.flops.by_operator(f"{block}.shared_expert_gate")["linear"] == tokens * D
        assert cost.flops.by_operator(f"{block}.gate")["linear"] == tokens * D * E
    # each layer leaves E - k = 2 experts of 6,144 parameters untouched
    assert llm.parameters - llm.active_parameters == N * (E - 2) * EXPERT


def test_gpt_oss_biased_clamped_experts() -> None:
    """GPT-OSS: transposed fused weights with biases, the clamped SwiGLU on interleaved halves."""
    config = transformers.GptOssConfig(
        **ATTENTION,
        head_dim=16,
        num_hidden_layers=N,
        intermediate_size=F,
        num_local_experts=E,
        num_experts_per_tok=2,
        layer_types=["full_attention"] * N,
    )
    llm = CausalLM(config)
    for phase, tokens in (("decode", 1), ("prefill", 5)):
        cost = llm.phase(phase, seq_len=tokens, kv_len=4 if phase == "decode" else 0)
        ops = cost.flops.by_operator("model.layers.0.mlp.experts")
        assert ops["addmm"] == tokens * 2 * EXPERT  # products with their bias
        assert ops["clamp"] > 0  # the model's own gate ran, not a plain SwiGLU
    # an expert: gate_up [D, 2F] + its bias 2F + down [F, D] + its bias D = 6144 + 64 + 64
    per_expert = EXPERT + 2 * F + D
    assert llm.parameters - llm.active_parameters == N * (E - 2) * per_expert


def test_llama4_interleaved_top1_shared() -> None:
    """Llama 4: MoE every 2nd layer (1 and 3 of 4), top-1 weighting the expert's input, a shared expert."""
    config = transformers.Llama4TextConfig(
        **ATTENTION,
        head_dim=16,
        num_hidden_layers=4,
        intermediate_size=F,
        intermediate_size_mlp=96,
        num_local_experts=E,
        num_experts_per_tok=1,
        interleave_moe_layer_step=2,
        attention_chunk_size=4096,
        no_rope_layers=[1, 1, 1, 1],
        layer_types=["full_attention"] * 4,
    )
    llm = CausalLM(config)
    for phase, batch, tokens in (("decode", 2, 1), ("prefill", 1, 7)):
        cost = llm.phase(phase, seq_len=tokens, kv_len=4 if phase == "decode" else 0, batch=batch)
        assert cost.moe_blocks == ("model.layers.1.feed_forward", "model.layers.3.feed_forward")
        t = batch * tokens
        assert cost.flops.by_operator("model.layers.1.feed_forward.experts")["mm"] == t * 1 * EXPERT
        assert cost.flops.by_operator("model.layers.1.feed_forward.shared_expert")["linear"] == t * EXPERT
        assert cost.flops.by_operator("model.layers.1.feed_forward.router")["linear"] == t * D * E
        # the dense layers: a SwiGLU of width 96
        assert cost.flops.by_operator("model.layers.0.feed_forward")["linear"] == t * 3 * D * 96
    # 2 MoE layers leave E - 1 = 3 experts untouched
    assert llm.parameters - llm.active_parameters == 2 * 3 * EXPERT


def deepseek_v3() -> object:
    return transformers.DeepseekV3Config(
        hidden_size=D,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        intermediate_size=96,
        moe_intermediate_size=F,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=2,
        topk_group=1,
        vocab_size=V,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=4,
    )


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 5)])
def test_deepseek_v3_grouped_router_shared_dense_first(batch: int, seq: int) -> None:
    """DeepSeek-V3: layer 0 dense (first_k_dense_replace = 1), then 8 experts in 2 groups (1 kept),
    2 per token, a shared expert. Its MLA attention is priced elsewhere: the MoE block is traced alone."""
    llm = CausalLM(deepseek_v3())
    model = llm.model
    assert [e.block for e in find_experts(model)] == ["model.layers.1.mlp", "model.layers.2.mlp"]
    t = batch * seq
    with expected_routing(model):
        block = model.model.layers[1].mlp
        flops = FlopCountAnalysis(block, (TensorShape((batch, seq, D), dtype=torch.bfloat16),), tracer="dispatch")
        assert flops.by_operator("experts")["linear"] == t * 2 * EXPERT
        assert flops.by_operator("shared_experts")["linear"] == t * EXPERT  # 1 shared expert of width F
        assert flops.by_operator("gate")["linear"] == t * D * 8  # router logits, in float32
        assert flops.unsupported_ops() == {}
    # 2 MoE layers leave 8 - 2 = 6 experts untouched each
    assert llm.parameters - llm.active_parameters == 2 * 6 * EXPERT


def test_dbrx_flat_expert_weights() -> None:
    """Dbrx: w1, v1, w2 of [E x F, D] each, viewed per expert; its router's softmax top-k as written."""
    config = transformers.DbrxConfig(
        d_model=D,
        n_heads=4,
        n_layers=N,
        max_seq_len=128,
        vocab_size=V,
        attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        ffn_config={"ffn_hidden_size": F, "moe_num_experts": E, "moe_top_k": 2},
    )
    llm = CausalLM(config)
    for phase, tokens in (("decode", 1), ("prefill", 5)):
        cost = llm.phase(phase, seq_len=tokens, kv_len=4 if phase == "decode" else 0)
        assert cost.moe_blocks == ("transformer.blocks.0.ffn", "transformer.blocks.1.ffn")
        ops = cost.flops.by_operator("transformer.blocks.0.ffn.experts")
        assert ops["linear"] + ops["mm"] == tokens * 2 * EXPERT  # gate and up (linear), down (mm)
        assert cost.flops.unsupported_ops() == {}
    assert llm.parameters - llm.active_parameters == N * (E - 2) * EXPERT


def test_only_dense_layers_built_is_no_error() -> None:
    """DeepSeek-V3 cut to its dense first layer (first_k_dense_replace = 1, one layer): no MoE block
    is built, which its config explains, so it is a dense model, not a block opcount missed."""
    config = deepseek_v3()
    config.num_hidden_layers = 1
    llm = CausalLM(config)
    assert find_experts(llm.model) == []
    assert llm.active_parameters == llm.parameters


def test_dense_model_active_equals_total() -> None:
    llm = CausalLM(transformers.LlamaConfig(**ATTENTION, intermediate_size=F, num_hidden_layers=N))
    assert llm.active_parameters == llm.parameters


def test_mixtral_active_parameters_closed_form() -> None:
    """Mixtral, tied nothing: embeddings V x D twice, per layer attention q, o (D x D) and k, v
    (D x 32), two norms, the router D x E and E experts; a final norm."""
    llm = CausalLM(mixtral())
    attention = 2 * D * D + 2 * D * 32
    layer = attention + 2 * D + D * E + E * EXPERT
    assert llm.parameters == 2 * V * D + N * layer + D  # 2 x 16,384 + 2 x 41,280 + 64 = 115,392
    assert llm.active_parameters == llm.parameters - N * (E - 2) * EXPERT  # 115,392 - 24,576 = 90,816


class MadeUpExperts(nn.Module):
    """Experts opcount has no rule for: one 3-D weight, a data-dependent dispatch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, D, D))

    def forward(self, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return hidden[index.flatten().nonzero()]


def test_unknown_block_is_an_error_naming_it() -> None:
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(mixtral())
        model.model.layers[1].mlp.experts = MadeUpExperts()
    with pytest.raises(OpcountError, match=r"model\.layers\.1\.mlp \(MixtralSparseMoeBlock\).*does not recognise"):
        CausalLM(model).phase("decode", kv_len=4)


def test_config_with_experts_but_no_block_is_an_error() -> None:
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(mixtral())
    for layer in model.model.layers:  # every block swapped for something that is no known MoE
        layer.mlp = nn.Identity()
    with pytest.raises(OpcountError, match="config has 4 experts but opcount recognises no mixture-of-experts"):
        CausalLM(model).phase("decode", kv_len=4)


def test_command_reports_total_and_active(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from opcount.cli import main

    fields = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": V, "num_local_experts": E, "num_experts_per_tok": 2}  # fmt: skip
    args = ["hf:MixtralConfig", *(a for k, v in fields.items() for a in ("--hf-config", f"{k}={v}"))]
    assert main([*args, "--phase", "decode", "--kv-len", "8", "--format", "json", "-q"]) == 0
    parameters = json.loads(capsys.readouterr().out)["llm"]["parameters"]
    assert parameters["total"] - parameters["active"] == N * (E - 2) * EXPERT  # 24,576
    assert main([*args, "--phase", "decode", "--kv-len", "8", "-q"]) == 0
    assert f"({round(parameters['active'] / 1e3, 1)}K active)" in capsys.readouterr().out


def test_training_step_differentiates_each_expert_slice(capsys: pytest.CaptureFixture[str]) -> None:
    """A training step of the routed experts: the backward computes the input's and the weight's
    gradient of each product, twice the forward's 16 tokens x 2 experts x 6,144 MACs."""
    import json

    from opcount.cli import main

    fields = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": V, "num_local_experts": E, "num_experts_per_tok": 2}  # fmt: skip
    args = ["hf:MixtralForCausalLM", *(a for k, v in fields.items() for a in ("--hf-config", f"{k}={v}"))]
    for meta in (["--meta"], []):
        assert main([*args, "--seq-len", "16", "--mode", "train", *meta, "--format", "json", "-q"]) == 0
        rows = json.loads(capsys.readouterr().out)["operators"]
        ops = {r["operator"]: r["flops"] for r in rows if r["module"] == "model.layers.0.mlp.experts"}
        assert ops["linear"] == 16 * 2 * EXPERT
        assert ops["mm"] == 2 * 16 * 2 * EXPERT


def test_expert_slices_read_in_their_stack_format() -> None:
    """gpt-oss with its experts in mxfp4 (blocks of 32 weights sharing an 8-bit scale: 4.25 bits a
    weight), the rest bf16: decode at batch 1 reads 2 experts a layer, each gate_up 64 x 128 and
    down 64 x 64 = 12,288 weights -> 6,144 + 384 bytes, and its biases 128 + 64 in bf16 -> 384 bytes."""
    from opcount.llm.precision.dtypes import Precision

    config = transformers.GptOssConfig(
        **ATTENTION, head_dim=16, num_hidden_layers=N, intermediate_size=D, num_local_experts=E,
        num_experts_per_tok=2, layer_types=["full_attention"] * N,
    )  # fmt: skip
    llm = CausalLM(config, Precision(weight=["experts=mxfp4", "bf16"]))
    cost = llm.phase("decode", kv_len=8, hardware="h100-sxm")
    assert cost.roofline is not None
    read = sum(t.layer.weight_bytes for t in cost.roofline.layers if ".mlp.experts" in t.layer.name)
    assert read == N * 2 * (12288 // 2 + 12288 // 32 + (128 + 64) * 2)  # 27,648
