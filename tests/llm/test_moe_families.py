"""JetMoE (parallel experts and a mixture of attention heads) and LongCat-Flash (identity experts
beside the FFN experts) routed by expectation: MACs, parameters and the weights read, worked by hand.

JetMoE's tiny config: width D = 64, E = 4 experts, k = 2 per token, G = 2 KV heads of d = 16
(so k x G = 4 query heads), expert FFN width F = 32, 2 layers, vocabulary V = 256 (tied).
- an MLP expert: gate and up ``[2F, D]`` and down ``[D, F]``: 2·32·64 + 64·32 = 6,144 weights and
  as many MACs per token;
- an attention expert: a query projection ``[G·d, D]`` and an output one ``[D, G·d]``: 2·32·64 = 4,096;
- each block's router ``[E, D]``: 256; the shared ``kv_proj`` ``[2·G·d, D]``: 4,096; a bias of D per block.

LongCat-Flash's tiny config: D = 64, E = 4 FFN experts and Z = 2 identity slots, k = 3 picks a
token; expert width F = 32 (6,144 weights an expert as above); router ``[E + Z, D]``: 384.
A token's 3 picks over 6 slots reach 3·4/6 = 2 real experts.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("JetMoE's and LongCat-Flash's layouts are transformers 5's", allow_module_level=True)

from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.moe.experts import find_experts  # noqa: E402
from opcount.llm.moe.routing import real_routes  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402

D, E, K, G, HEAD, F, V = 64, 4, 2, 2, 16, 32, 256
MLP_EXPERT = 2 * F * D + D * F  # 6,144
ATTN_EXPERT = 2 * G * HEAD * D  # 4,096


def jetmoe() -> CausalLM:
    config = transformers.JetMoeConfig(
        hidden_size=D,
        num_key_value_heads=G,
        kv_channels=HEAD,
        num_experts_per_tok=K,
        num_local_experts=E,
        intermediate_size=F,
        num_hidden_layers=2,
        vocab_size=V,
    )
    return CausalLM(config)


def read_slices(cost: PhaseCost, prefix: str) -> set[str]:
    """The expert slices (``name[e]``) the trace read under ``prefix``."""
    return {
        spec.param.removeprefix(prefix + ".")
        for call in cost.flops.trace().calls
        for spec in call.inputs
        if getattr(spec, "param", None) and spec.param.startswith(prefix + ".") and spec.param.endswith("]")
    }


def test_jetmoe_parameters_total_and_active() -> None:
    llm = jetmoe()
    # per layer: MLP 4·6,144 + router 256 + bias 64 = 24,896; attention 4·4,096 + 256 + 64 + kv_proj
    # 4,096 = 20,800; two norms 128: 45,824. Two layers 91,648 + embedding 256·64 = 16,384 (tied with
    # the output) + final norm 64 = 108,096
    assert llm.parameters == 108_096
    # a token skips E - k = 2 experts of each block: 2 layers x 2 x (6,144 + 4,096) = 40,960
    assert llm.parameters - llm.active_parameters == 40_960
    assert [(e.block, e.count, e.top_k) for e in find_experts(llm.model)] == [
        ("model.layers.0.mlp", E, K),
        ("model.layers.0.self_attention", E, K),
        ("model.layers.1.mlp", E, K),
        ("model.layers.1.self_attention", E, K),
    ]


@pytest.mark.parametrize("phase,tokens", [("decode", 1), ("prefill", 8)])
def test_jetmoe_routed_macs(phase: str, tokens: int) -> None:
    llm = jetmoe()
    cost = llm.phase(phase, seq_len=tokens, kv_len=7 if phase == "decode" else 0)
    assert cost.moe_blocks == (
        "model.layers.0.mlp",
        "model.layers.0.self_attention",
        "model.layers.1.mlp",
        "model.layers.1.self_attention",
    )
    # MLP: router T·256 + T·k routes of 6,144 (decode: 256 + 12,288 = 12,544; prefill 8·256 + 16·6,144 = 100,352)
    assert cost.flops.by_operator("model.layers.0.mlp")["linear"] == tokens * (D * E + K * MLP_EXPERT)
    # attention: router T·256, kv_proj T·4,096, and each route's query and output projections T·k·4,096
    # (decode: 256 + 4,096 + 8,192 = 12,544)
    linear = cost.flops.by_operator("model.layers.0.self_attention")["linear"]
    assert linear == tokens * (D * E + 2 * G * HEAD * D + K * ATTN_EXPERT)
    # T·k routes over E experts: min(E, T·k) experts read, each its two slices once
    read = min(E, tokens * K)
    stacks = ("input_linear.weight", "output_linear.weight")
    assert read_slices(cost, "model.layers.0.mlp") == {f"{s}[{e}]" for e in range(read) for s in stacks}
    assert cost.flops.unsupported_ops() == {}


def test_jetmoe_attention_reads_each_kv_head_once() -> None:
    """The k·G = 4 query heads attend over the G = 2 cached KV heads as they are: no copy of the
    cache k times (transformers' ``repeat``), as grouped-query kernels read it."""
    cost = jetmoe().phase("decode", kv_len=7)
    shapes = [
        [tuple(getattr(t, "shape", ())) for t in call.inputs[:3]]
        for call in cost.flops.trace().calls
        if call.kind.endswith("scaled_dot_product_attention")
    ]
    assert shapes == [[(1, K * G, 1, HEAD), (1, G, 8, HEAD), (1, G, 8, HEAD)]] * 2  # 7 cached + 1 new
    assert not any("repeat" in call.kind for call in cost.flops.trace().calls if "self_attention" in call.scope[-1])


def longcat_config() -> object:
    return transformers.LongcatFlashConfig(
        hidden_size=D,
        ffn_hidden_size=48,
        expert_ffn_hidden_size=F,
        n_routed_experts=4,
        zero_expert_num=2,
        moe_topk=3,
        num_layers=1,
        num_attention_heads=4,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        head_dim=8,
        v_head_dim=16,
        vocab_size=V,
    )


def longcat() -> CausalLM:
    return CausalLM(longcat_config())


def test_real_routes_in_proportion() -> None:
    # 1 token, 3 picks over 4 + 2 slots: 3·4/6 = 2; 5 tokens: 15·4/6 = 10; LongCat-Flash: 12·512/768 = 8
    assert real_routes(1, 3, 4, 2) == 2
    assert real_routes(5, 3, 4, 2) == 10
    assert real_routes(1, 12, 512, 256) == 8
    assert real_routes(1, 2, 3, 1) == 1  # 2·3/4 = 1.5, rounded down


@pytest.mark.parametrize("phase,batch,tokens", [("decode", 1, 1), ("decode", 3, 1), ("prefill", 1, 5)])
def test_longcat_identity_slots(phase: str, batch: int, tokens: int) -> None:
    llm = longcat()
    cost = llm.phase(phase, seq_len=tokens, kv_len=7 if phase == "decode" else 0, batch=batch)
    n = batch * tokens
    real = n * 3 * 4 // 6  # 2, 6 and 10 routes reach an FFN expert
    assert cost.moe_blocks == ("model.layers.0.mlp",)
    assert cost.flops.by_operator("model.layers.0.mlp.experts")["linear"] == real * MLP_EXPERT
    assert cost.flops.by_operator("model.layers.0.mlp.router")["linear"] == n * D * 6  # over E + Z slots
    # the FFN experts that run: min(E, routes), each reading its gate_up and down slices once
    read = {f"{w}[{e}]" for e in range(min(4, real)) for w in ("gate_up_proj", "down_proj")}
    assert read_slices(cost, "model.layers.0.mlp.experts") == read


def test_longcat_parameters_keep_the_experts_that_run() -> None:
    llm = longcat()
    experts = llm.model.get_submodule("model.layers.0.mlp.experts")
    # transformers stacks gate_up for E + Z = 6; the model opcount builds keeps the 4 that run
    assert tuple(experts.gate_up_proj.shape) == (4, 2 * F, D)
    # a token reaches 2 of the 4 FFN experts on average: 2 x 6,144 = 12,288 inactive
    assert llm.parameters - llm.active_parameters == 12_288


def test_longcat_flash_published_active_parameters() -> None:
    """LongCat-Flash's defaults (transformers' LongcatFlashConfig: the published model's shape) give
    the technical report's figures: 560B total, about 27B activated on average."""
    config = transformers.LongcatFlashConfig()
    llm = CausalLM(config)
    # per layer (two MLA sublayers, two dense MLPs, one MoE):
    # MLA: q_a 6144·1536 + q_b 1536·64·192 + kv_a 6144·576 + kv_b 512·64·256 + o 64·128·6144
    #      = 9,437,184 + 18,874,368 + 3,538,944 + 8,388,608 + 50,331,648 = 90,570,752, + norms 1,536 + 512
    mla = 90_570_752 + 2_048
    mlp = 3 * 6144 * 12288  # 226,492,416
    expert = 3 * 6144 * 2048  # 37,748,736
    layer = 2 * mla + 2 * mlp + 512 * expert + 6144 * 768 + 4 * 6144  # router [768, 6144], four norms
    total = 28 * layer + 2 * 131072 * 6144 + 6144  # untied embedding and output, final norm
    assert total == 560_664_958_976
    assert llm.parameters == total
    # 12 picks over 512 + 256 slots reach 8 FFN experts: 504 of 512 idle per layer
    assert llm.active_parameters == total - 28 * 504 * expert == 27_954_796_544


def test_longcat_untrimmed_stack_is_refused() -> None:
    """A LongCat-Flash built by transformers itself holds gate_up slices no token reads: refused
    by name rather than counted."""
    import torch

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(longcat_config())
    with pytest.raises(OpcountError, match=r"model\.layers\.0\.mlp\.experts: gate_up_proj holds 6 experts"):
        find_experts(model)


def test_jetmoe_8b_parameters() -> None:
    """JetMoE-8B's shape (transformers' JetMoeConfig defaults at 24 layers, the model card's
    jetmoe/jetmoe-8b): the model card's 8B total and "2.2B" activated parameters."""
    llm = CausalLM(transformers.JetMoeConfig(num_hidden_layers=24))
    # per layer: MLP experts 8 x 3·5632·2048 = 276,824,064; attention experts 8 x 2·2048·2048 =
    # 67,108,864; kv_proj 2048·4096 = 8,388,608; two routers 2 x 16,384; two biases and two norms 4 x 2,048
    layer = 8 * 3 * 5632 * 2048 + 8 * 2 * 2048 * 2048 + 2048 * 4096 + 2 * 8 * 2048 + 4 * 2048
    assert llm.parameters == 24 * layer + 32000 * 2048 + 2048 == 8_522_237_952  # tied embedding, final norm
    # 6 of 8 experts idle in both blocks: 24 x 6 x (34,603,008 + 8,388,608)
    assert llm.active_parameters == llm.parameters - 24 * 6 * (3 * 5632 * 2048 + 2 * 2048 * 2048) == 2_331_445_248


def test_identity_slots_cut_sweeps_where_the_loads_repeat(caplog: pytest.LogCaptureFixture) -> None:
    """2 picks over 4 + 2 slots: ⌊8T/6⌋ = ⌊4T/3⌋ real routes, whose residue mod 4 repeats every
    3 x 4 = 12 tokens: the sweep's regions are T mod 12, and its fitted points match their traces."""
    import logging

    from opcount.llm.moe.routing import Experts
    from opcount.llm.sweep.points import phase_points, structure_of

    assert Experts(name="e", block="b", count=4, top_k=2, per_expert=1, identity=2).regions == (1, 12)
    assert Experts(name="e", block="b", count=512, top_k=12, per_expert=1, identity=256).regions == (
        1,
        512,
    )  # 8 a token
    assert Experts(name="e", block="b", count=4, top_k=2, per_expert=1).regions == (2, 4)
    config = longcat_config()
    config.moe_topk = 2
    llm = CausalLM(config)
    assert (1, 12) in structure_of(llm).experts
    points = [(batch, 1, 16) for batch in (1, 13, 25, 37, 5, 17, 29)]  # two residues mod 12, fitted
    with caplog.at_level(logging.INFO, logger="opcount"):
        fitted = phase_points(llm, "decode", points)
    assert not [r for r in caplog.records if "instead of fitting" in r.getMessage()]
    for (batch, _, cache), point in zip(points, fitted, strict=True):
        assert point.flops == llm.phase("decode", kv_len=cache, batch=batch).flops.total()
