"""The public trace: one forward pass, analyzed any number of ways."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import opcount
from opcount import (
    ActivationCountAnalysis,
    FlopCountAnalysis,
    MemoryTrafficAnalysis,
    Trace,
    hardware,
    roofline,
    sparsity_roofline,
    spec_handle,
)
from opcount.cli import main

FORWARDS = [0]  # forward passes of Counted models, in this process


class Counted(nn.Module):
    """Linear(8, 16) -> ReLU -> Linear(16, 4), counting its forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARDS[0] += 1
        return self.fc2(self.act(self.fc1(x)))


def counted_model() -> tuple[nn.Module, torch.Tensor]:
    """A ``module:factory`` for the command line."""
    return Counted(), torch.randn(2, 8)


counted_again = counted_model  # a second name: `opcount compare` takes each model once


def _forwards(fn: object) -> int:
    before = FORWARDS[0]
    fn()  # type: ignore[operator]
    return FORWARDS[0] - before


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_a_trace_analyzed_three_ways_equals_three_analyses_with_one_forward(tracer: str) -> None:
    model, x = counted_model()
    found: dict[str, object] = {}

    def analyze_the_trace() -> None:
        t = opcount.trace(model, x, tracer=tracer)
        found["trace"] = [
            FlopCountAnalysis(t).by_module_and_operator(),
            ActivationCountAnalysis(t).by_module_and_operator(),
            MemoryTrafficAnalysis(t).by_module_and_operator(),
        ]

    assert _forwards(analyze_the_trace) == 1
    separate = [
        FlopCountAnalysis(model, x, tracer=tracer).by_module_and_operator(),
        ActivationCountAnalysis(model, x, tracer=tracer).by_module_and_operator(),
        MemoryTrafficAnalysis(model, x, tracer=tracer).by_module_and_operator(),
    ]
    assert found["trace"] == separate
    # closed forms: linear = batch * in * out multiply-adds, relu 1 per element
    assert separate[0][""] == {"linear": 2 * 8 * 16 + 2 * 16 * 4, "relu": 2 * 16}


def test_the_trace_holds_what_it_was_traced_with() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x, tracer="dispatch", device="meta")
    assert isinstance(t, Trace)
    assert (t.tracer, t.mode, t.device) == ("dispatch", "eval", "meta")
    assert t.model is model and t.tree.names == ["", "fc1", "act", "fc2"]
    assert [c.kind for c in t.calls] == ["aten::linear", "aten::relu", "aten::linear"]
    assert t.called == {"", "fc1", "act", "fc2"}
    assert t.nodes == ()  # no jit graph: fvcore-style handles need the jit tracer
    with pytest.raises(AttributeError):
        t.calls[0].kind = "aten::mm"  # type: ignore[misc]  # frozen records


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_the_trace_records_the_model_outputs(tracer: str) -> None:
    class TwoOut(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = x * 2
            return y, torch.relu(y)

    t = opcount.trace(TwoOut(), torch.randn(4, 4), tracer=tracer)
    mul, relu = t.calls
    assert t.outputs == (mul.outputs[0], relu.outputs[0])
    assert [o.id for o in t.outputs] == [mul.outputs[0].id, relu.outputs[0].id]


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_fusion_keeps_a_returned_tensor_with_one_elementwise_consumer(tracer: str) -> None:
    class Returned(nn.Module):  # y is returned and read by relu alone
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = x * 2
            return y, torch.relu(y)

    class Internal(nn.Module):  # the same operators, y not returned
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x * 2)

    x = torch.randn(4, 4)
    tensor = 16 * 4  # bytes of one 4x4 float32 tensor
    # mul reads x, writes y; relu reads y, writes its output: 4 tensors moved either way,
    # since the caller reads y after the model returns
    returned = MemoryTrafficAnalysis(opcount.trace(Returned(), x, tracer=tracer), fuse=True)
    assert returned.total() == 4 * tensor
    assert returned.total("", kind="write") == 2 * tensor
    # not returned, y is fused away: mul reads x, relu writes its output
    assert MemoryTrafficAnalysis(opcount.trace(Internal(), x, tracer=tracer), fuse=True).total() == 2 * tensor


def test_roofline_fuse_groups_keep_a_returned_tensor() -> None:
    class Block(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = x * 2
            return y, torch.relu(y)

    model = nn.Sequential()
    model.add_module("b", Block())
    report = roofline(opcount.trace(model, torch.randn(4, 4)), hardware="h100-sxm", fuse=[["b"]])
    # within the group, relu's read of y is on chip, but y is still written: the caller reads it
    assert report.total_bytes == 3 * 16 * 4


@torch.library.custom_op("opcount_tracing_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@scale.register_fake
def _scale_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesScale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(x)


def _layer_flops(report: opcount.RooflineReport, op: str) -> list[float]:
    return [t.layer.flops for t in report.layers if t.layer.op == op]


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_a_set_op_handle_override_prices_the_roofline(tracer: str) -> None:
    hw = hardware("h100-sxm")
    t = opcount.trace(UsesScale(), torch.randn(64, 64), tracer=tracer)
    plain = roofline(t, hardware=hw)
    assert plain.unsupported == {"opcount_tracing_test::scale": 1}
    assert _layer_flops(plain, "scale") == []  # neither flops nor bytes: no layer

    n = 10**15  # compute-bound: flops / peak dwarfs the 32 KiB moved
    flops = FlopCountAnalysis(t).set_op_handle("opcount_tracing_test::scale", spec_handle(lambda i, o: n))
    priced = roofline(flops, hardware=hw)
    assert _layer_flops(priced, "scale") == [n]  # a plain handle: flops as returned
    peak = hw.peak_of("vector", "float32")
    assert peak is not None
    assert priced.total_time == pytest.approx(n / peak)
    assert priced.total_time > 1000 * plain.total_time

    # marked as multiply-adds: 2 flops each, whatever the analysis' flops_per_mac
    for per_mac in (1, 2):
        macs = FlopCountAnalysis(t, flops_per_mac=per_mac)
        macs.set_op_handle("opcount_tracing_test::scale", spec_handle(lambda i, o: n, macs=True))
        assert _layer_flops(roofline(macs, hardware=hw), "scale") == [2 * n]


def test_roofline_of_a_flop_analysis_with_the_default_preset_is_the_roofline_of_its_trace() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x)
    for per_mac in (1, 2):
        a = roofline(FlopCountAnalysis(t, flops_per_mac=per_mac), hardware="h100-sxm")
        assert [(lt.layer.flops, lt.time) for lt in a.layers] == [
            (lt.layer.flops, lt.time) for lt in roofline(t, hardware="h100-sxm").layers
        ]
    # linear: 2 flops per multiply-add
    assert roofline(t, hardware="h100-sxm").total_flops == 2 * (2 * 8 * 16 + 2 * 16 * 4) + 2 * 16


def test_roofline_traces_with_the_dispatch_tracer_on_meta() -> None:
    model, x = counted_model()
    on_meta = roofline(model, x, "h100-sxm", tracer="dispatch", device="meta")
    assert on_meta.total_time == roofline(model, x, "h100-sxm").total_time
    sparse = sparsity_roofline(model, x, "h100-sxm", tracer="dispatch", device="meta")
    assert sparse.dense.total_time == on_meta.total_time


def test_reports_of_a_trace_run_no_forward() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x)

    def reports() -> None:
        roofline(t, hardware="h100-sxm")
        roofline(FlopCountAnalysis(t), hardware="h100-sxm")
        sparsity_roofline(t, hardware="h100-sxm")

    assert _forwards(reports) == 0


def test_profile_takes_a_trace_for_its_prediction() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x)
    measured = opcount.profile(model, x, hardware="h100-sxm", predicted=t, repeats=1, warmup=0)
    assert measured.roofline is not None
    assert measured.roofline.total_time == roofline(t, hardware="h100-sxm").total_time
    with pytest.raises(TypeError, match="needs hardware"):
        opcount.profile(model, x, predicted=t, repeats=1, warmup=0)
    with pytest.raises(ValueError, match="another model"):
        opcount.profile(Counted(), x, hardware="h100-sxm", predicted=t, repeats=1, warmup=0)


def test_fvcore_style_handles_get_the_jit_values_of_a_trace() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x)

    def out_elements(inputs: list, outputs: list) -> int:  # fvcore's handle signature
        return int(torch.Size(outputs[0].type().sizes()).numel())

    a = FlopCountAnalysis(t).set_op_handle("aten::linear", out_elements)
    assert a.by_operator() == {"linear": 2 * 16 + 2 * 4, "relu": 2 * 16}
    dispatch = FlopCountAnalysis(opcount.trace(model, x, tracer="dispatch")).set_op_handle("aten::linear", out_elements)
    with pytest.raises(opcount.HandleError, match="only the jit tracer"):
        dispatch.total()


def test_copy_of_an_analysis_of_a_trace() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x, tracer="dispatch")
    a = FlopCountAnalysis(t, flops_per_mac=2).set_op_handle("aten::relu", None)
    assert _forwards(lambda: a.copy().total()) == 0
    assert a.copy().total() == a.total() == 2 * (2 * 8 * 16 + 2 * 16 * 4)
    bigger = a.copy(new_inputs=torch.randn(6, 8))  # traced as the Trace was
    assert bigger.tracer == "dispatch" and bigger.total() == 3 * a.total()
    other = a.copy(opcount.trace(model, torch.randn(4, 8)))
    assert type(other) is FlopCountAnalysis and other.flops_per_mac == 2 and other.total() == 2 * a.total()
    assert a.inputs is x


def test_wrong_types_are_clear_errors() -> None:
    model, x = counted_model()
    t = opcount.trace(model, x)
    with pytest.raises(TypeError, match="takes no inputs"):
        FlopCountAnalysis(t, x)
    with pytest.raises(TypeError, match="takes no tracer, device"):
        MemoryTrafficAnalysis(t, tracer="dispatch", device="meta")
    with pytest.raises(TypeError, match="needs the model's inputs"):
        FlopCountAnalysis(model)
    with pytest.raises(TypeError, match=r"nn.Module or an opcount.Trace, got str"):
        ActivationCountAnalysis("resnet50")
    with pytest.raises(TypeError, match="takes no inputs"):
        roofline(t, x, "h100-sxm")
    with pytest.raises(TypeError, match="takes no device"):
        roofline(t, hardware="h100-sxm", device="meta")
    with pytest.raises(TypeError, match="got list"):
        roofline([model], x, "h100-sxm")
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module, got Trace"):
        opcount.trace(t, x)
    with pytest.raises(ValueError, match="need tracer='dispatch'"):
        opcount.trace(model, x, device="meta")
    with pytest.raises(ValueError, match="unknown tracer"):
        opcount.trace(model, x, tracer="fx")
    with pytest.raises(TypeError, match="takes no new_inputs"):
        FlopCountAnalysis(t).copy(t, x)


def test_the_command_line_traces_each_model_once(capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"{__name__}:counted_model"
    columns = ["--columns", "params,flops,activations,bytes,time", "--hardware", "h100-sxm", "-q"]
    assert _forwards(lambda: main([spec, *columns])) == 1
    assert _forwards(lambda: main([spec, "--meta", *columns, "--sparsity", "2:4"])) == 1
    assert _forwards(lambda: main(["compare", spec, f"{__name__}:counted_again", "-q"])) == 2
    out = capsys.readouterr().out
    assert "fc1" in out


def test_an_llm_phase_traces_the_model_once() -> None:
    transformers = pytest.importorskip("transformers")
    from opcount.llm.causal_lm import CausalLM

    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=100
    )
    llm = CausalLM(config)
    calls: list[int] = []
    handle = llm.model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        cost = llm.phase("decode", kv_len=8, hardware="h100-sxm")
    finally:
        handle.remove()
    assert len(calls) == 1  # flops, bytes and the roofline from one forward pass
    assert cost.time > 0
