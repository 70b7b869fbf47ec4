"""Roofline (AMAIX): hardware models, speed-of-light times worked by hand, the AMAIX
refinements (scaling factors, pipelines, fusion) and the charts."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis
from opcount.hardware.lookup import PRESETS, Hardware, UnknownHardwareError, hardware
from opcount.roofline import (
    FLOPS_PER_MAC,
    Layer,
    mac_array_scale,
    nvdla_scale_ops,
    roofline,
    speed_of_light,
)

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

# A made-up device with round numbers: 100 GFLOP/s tensor, 10 GFLOP/s vector, 10 GB/s.
TOY = Hardware(
    "toy",
    {"tensor": {"float32": 100e9, "float16": 200e9}, "vector": {"float32": 10e9, "float16": 20e9}},
    bandwidth=10e9,
    clock_hz=1e9,
)


def lenet_conv1() -> nn.Module:
    return nn.Conv2d(1, 20, 5)  # AMAIX: i = (28, 28, 1), k = (5, 5, 1, 20), o = (24, 24, 20)


# ----- hand-worked ---------------------------------------------------------------------------
def test_lenet_first_layer_has_288000_multiply_adds() -> None:
    x = torch.randn(1, 1, 28, 28)
    macs = FlopCountAnalysis(lenet_conv1(), x).total()
    assert macs == 24 * 24 * 20 * 5 * 5 * 1 == 288_000  # o_w o_h o_c k_w k_h k_c
    report = roofline(lenet_conv1(), x, "nvdla-full", dtype="float16")
    (layer,) = report.layers
    assert layer.layer.flops == FLOPS_PER_MAC * 288_000  # peaks count a multiply-add as 2
    # AMAIX's general model in fp16: ifmap 28*28*1, weights 5*5*1*20 (+ 20 biases), ofmap 24*24*20.
    assert layer.layer.ifmap_bytes == 2 * 28 * 28
    assert layer.layer.weight_bytes == 2 * (5 * 5 * 20 + 20)
    assert layer.layer.ofmap_bytes == 2 * 24 * 24 * 20
    assert layer.layer.unit == "tensor"
    # 576,000 FLOP / 2.048 TFLOP/s = 281.25 ns; (1,568 + 1,040 + 23,040) = 25,648 B / 64 GB/s = 400.75 ns.
    assert layer.compute_time == pytest.approx(576_000 / 2.048e12)
    assert layer.memory_time == pytest.approx(25_648 / 64e9)
    assert layer.limited_by == "memory"
    assert report.cycles(report.total_time) == pytest.approx(400.75)


def test_memory_bound_and_compute_bound_layers_on_toy_hardware() -> None:
    # Linear(256 -> 512, no bias) on [64, 256], then ReLU, in float32.
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU())
    report = roofline(model, torch.randn(64, 256), TOY)
    linear, relu = report.layers
    # linear: 2 * 64*256*512 = 16,777,216 FLOP on the tensor unit -> 167.77216 us;
    # bytes (64*256 + 256*512 + 64*512) * 4 = 720,896 -> 72.0896 us: compute bound.
    assert (linear.layer.unit, linear.layer.flops, linear.layer.bytes) == ("tensor", 16_777_216, 720_896)
    assert linear.time == pytest.approx(16_777_216 / 100e9) == pytest.approx(167.77216e-6)
    assert linear.limited_by == "compute"
    # relu: 64*512 = 32,768 FLOP on the vector unit -> 3.2768 us; bytes 2 * 32,768 * 4 = 262,144
    # -> 26.2144 us: memory bound.
    assert (relu.layer.unit, relu.layer.flops, relu.layer.bytes) == ("vector", 32_768, 262_144)
    assert relu.time == pytest.approx(26.2144e-6)
    assert relu.limited_by == "memory"
    assert report.total_time == pytest.approx(167.77216e-6 + 26.2144e-6)
    assert report.module("0").time == pytest.approx(linear.time)


def test_dtype_scales_bytes_and_picks_the_peak() -> None:
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU())
    report = roofline(model, torch.randn(64, 256), TOY, dtype="float16")
    linear, relu = report.layers
    assert linear.layer.bytes == 720_896 / 2 and linear.layer.precision == "float16"
    assert linear.time == pytest.approx(16_777_216 / 200e9)
    assert relu.time == pytest.approx(262_144 / 2 / 10e9)


def test_speed_of_light_on_hand_made_layers() -> None:
    layers = [
        Layer("mem", flops=1e6, ifmap_bytes=4e6, ofmap_bytes=4e6, unit="vector", owners=("", "mem")),
        Layer("cmp", flops=2e9, weight_bytes=1e6, unit="tensor", owners=("", "cmp")),
    ]
    report = speed_of_light(layers, TOY)
    mem, cmp_ = report.layers
    assert (mem.compute_time, mem.memory_time, mem.limited_by) == (pytest.approx(1e-4), pytest.approx(8e-4), "memory")
    assert (cmp_.compute_time, cmp_.memory_time, cmp_.limited_by) == (
        pytest.approx(0.02),
        pytest.approx(1e-4),
        "compute",
    )
    assert mem.intensity == pytest.approx(1e6 / 8e6)
    assert report.total_time == pytest.approx(0.0208)


# ----- AMAIX refinements ---------------------------------------------------------------------
def test_nvdla_utilization_for_channels_not_multiple_of_the_array() -> None:
    # c = 3 input channels on Tc = 64, k = 20 kernels on Tk = 16: 1 * 2 * 1024 / 60 executed per useful MAC.
    assert mac_array_scale(3, 20, tc=64, tk=16) == pytest.approx(
        math.ceil(3 / 64) * math.ceil(20 / 16) * 64 * 16 / (3 * 20)
    )
    assert mac_array_scale(3, 20) == pytest.approx(2048 / 60)
    assert mac_array_scale(128, 32) == 1.0  # both divide: full utilization
    assert mac_array_scale(65, 16) == pytest.approx(2 * 64 / 65)  # temporal fragmentation only
    with pytest.raises(ValueError):
        mac_array_scale(0, 16)

    model = nn.Conv2d(3, 20, 3)
    x = torch.randn(1, 3, 16, 16)
    plain = roofline(model, x, "nvdla-full", dtype="float16")
    scaled = roofline(model, x, "nvdla-full", dtype="float16", scale_ops={"conv": nvdla_scale_ops()})
    assert scaled.layers[0].layer.flops == pytest.approx(plain.layers[0].layer.flops * 2048 / 60)
    assert scaled.layers[0].layer.bytes == plain.layers[0].layer.bytes


def test_data_scaling_factors_per_operator() -> None:
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU())
    x = torch.randn(64, 256)
    report = roofline(
        model,
        x,
        TOY,
        scale_weight={"linear": 2.0},  # e.g. padding to the buffer width
        scale_ifmap={"relu": lambda call: 0.0},  # fused with its producer: nothing to read
        scale_ofmap=1.0,
    )
    linear, relu = report.layers
    assert linear.layer.weight_bytes == 2 * 256 * 512 * 4
    assert relu.layer.ifmap_bytes == 0 and relu.layer.ofmap_bytes == 64 * 512 * 4
    with pytest.raises(ValueError, match="scale_ops"):
        roofline(model, x, TOY, scale_ops=lambda call: -1.0)


def test_pipeline_time_is_the_max_of_its_members() -> None:
    layers = [
        Layer("a", flops=0, ifmap_bytes=10e6, owners=("", "a")),  # 1 ms
        Layer("b", flops=30e6, owners=("", "b")),  # 3 ms on the vector unit
        Layer("c", flops=0, ofmap_bytes=20e6, owners=("", "c")),  # 2 ms
    ]
    alone = speed_of_light(layers, TOY)
    assert alone.total_time == pytest.approx(6e-3)
    piped = speed_of_light(layers, TOY, pipeline=[["a", "b"]])
    assert piped.total_time == pytest.approx(max(1e-3, 3e-3) + 2e-3)
    a, b, c = piped.layers
    assert (a.effective_time, b.effective_time, c.effective_time) == (0.0, pytest.approx(3e-3), pytest.approx(2e-3))
    assert a.time == pytest.approx(1e-3)  # its own roofline is kept, only hidden
    with pytest.raises(ValueError, match="no layer"):
        speed_of_light(layers, TOY, pipeline=[["a", "zzz"]])
    with pytest.raises(ValueError, match="both"):
        speed_of_light(layers, TOY, pipeline=[["a"], ["a", "c"]])


def test_pipeline_on_a_model_by_module_names() -> None:
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU())
    x = torch.randn(64, 256)
    report = roofline(model, x, TOY, pipeline=[["0", "1"]])
    assert report.total_time == pytest.approx(max(167.77216e-6, 26.2144e-6))
    assert sum(s.time for s in report.by_operator().values()) == pytest.approx(report.total_time)


def test_fusion_removes_the_intermediate_traffic() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))
    x = torch.randn(1, 3, 8, 8)
    inp, mid, w0, b0 = 3 * 64 * 4, 8 * 64 * 4, 8 * 3 * 9 * 4, 8 * 4
    plain = roofline(model, x, TOY)
    fused = roofline(model, x, TOY, fuse=[["0", "1"]])
    conv = plain.layers[0]
    assert (conv.layer.ifmap_bytes, conv.layer.weight_bytes, conv.layer.ofmap_bytes) == (inp, w0 + b0, mid)
    f_conv, f_relu, f_conv2 = fused.layers
    # The conv's output stays on chip: not written, not read back by the relu.
    assert f_conv.layer.ofmap_bytes == 0 and f_relu.layer.ifmap_bytes == 0
    # The relu's output is read outside the group: still written, still read by conv2.
    assert f_relu.layer.ofmap_bytes == mid and f_conv2.layer.ifmap_bytes == mid
    assert plain.total_bytes - fused.total_bytes == 2 * mid
    # The memory analysis' automatic epilogue fusion does the same here.
    auto = roofline(model, x, TOY, fuse=True)
    assert auto.total_bytes == fused.total_bytes
    with pytest.raises(ValueError, match="no module"):
        roofline(model, x, TOY, fuse=[["0", "nope"]])


def test_report_rollups_sum_to_the_total() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 10))
    report = roofline(model.eval(), torch.randn(2, 3, 8, 8), "h100-sxm", dtype="float16")
    total = report.total_time
    assert report.module("").time == pytest.approx(total)
    assert sum(s.time for s in report.by_operator().values()) == pytest.approx(total)
    assert sum(s.time for s in report.leaf_modules().values()) == pytest.approx(total)
    assert {t.layer.unit for t in report.layers if t.layer.op in ("conv", "linear")} == {"tensor"}
    assert "speed of light" in report.summary()
    assert "conv" in report.table(by="operator") and "(model)" not in report.table()


def test_unit_mapping_tf32_and_fallbacks() -> None:
    model = nn.Linear(64, 64)
    x = torch.randn(8, 64)
    assert roofline(model, x, "h100-sxm").layers[0].layer.unit == "vector"  # plain fp32: CUDA cores
    tf32 = roofline(model, x, "h100-sxm", allow_tf32=True).layers[0].layer
    assert (tf32.unit, tf32.precision) == ("tensor", "tf32")
    t4 = roofline(model, x, "t4", dtype="bfloat16").layers[0].layer  # Turing has no bf16 at all
    assert (t4.unit, t4.precision) == ("vector", "float32")
    with pytest.raises(ValueError, match="no unit"):
        roofline(model, x, "nvdla-full", dtype="float32")
    forced = roofline(model, x, "h100-sxm", dtype="float16", unit=lambda call: "vector").layers[0].layer
    assert forced.unit == "vector"


# ----- hardware ------------------------------------------------------------------------------
def test_presets_and_lookup() -> None:
    for name in ("h100-sxm", "h100-pcie", "a100-sxm", "l4", "t4", "rtx-4090", "xeon-8480-2s", "m2-max", "nvdla-full"):
        hw = hardware(name)
        assert hw.name == name and hw.bandwidth > 0 and "vector" in hw.peak
    assert hardware("H100_SXM") is PRESETS["h100-sxm"]
    nvdla = hardware("nvdla")
    assert nvdla.peak["tensor"]["float16"] == 2 * 16 * 64 * 1e9 and nvdla.bandwidth == 64e9
    assert nvdla.ridge("tensor", "float16") == pytest.approx(32.0)
    with pytest.raises(UnknownHardwareError, match="h100-sxm"):
        hardware("h200-nvl")
    with pytest.raises(TypeError):
        PRESETS["l4"].peak["vector"]["float32"] = 1.0  # type: ignore[index]


def test_hardware_from_toml_and_json_files(tmp_path) -> None:
    toml = tmp_path / "npu.toml"
    toml.write_text(
        'name = "npu"\nbandwidth = 64e9\nclock_hz = 1e9\n[peak.tensor]\nfloat16 = 2.048e12\n[peak.vector]\nfloat16 = 16e9\n'
    )
    hw = hardware(str(toml))
    assert hw == Hardware("npu", {"tensor": {"float16": 2.048e12}, "vector": {"float16": 16e9}}, 64e9, clock_hz=1e9)
    js = tmp_path / "npu.json"
    js.write_text(json.dumps(hw.to_dict()))
    assert Hardware.from_file(js) == hw
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "bandwidth": 1e9, "peak": {"vector": {"float32": 1e9}}, "tdp": 3}))
    with pytest.raises(ValueError, match="unknown hardware keys"):
        Hardware.from_file(bad)
    bad.write_text(json.dumps({"name": "x", "bandwidth": -1, "peak": {"vector": {"float32": 1e9}}}))
    with pytest.raises(ValueError, match="bandwidth"):
        Hardware.from_file(bad)
    with pytest.raises(FileNotFoundError):
        hardware(str(tmp_path / "missing.toml"))


# ----- charts --------------------------------------------------------------------------------
def test_charts_write_png_and_svg(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from opcount.roofline.plot import roofline_chart, time_chart

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 10))
    report = roofline(model, torch.randn(1, 3, 8, 8), "h100-sxm", dtype="float16")
    png = tmp_path / "roofline.png"
    roofline_chart(report, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "modules.svg"
    time_chart(report, svg)
    assert b"<svg" in svg.read_bytes()[:2000]
    roofline_chart(report, tmp_path / "ops.png", by="operator")
    with pytest.raises(ValueError):
        roofline_chart(report, by="nothing")


def test_command_line_hardware_and_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from opcount.cli import main

    factory = tmp_path / "tiny.py"
    factory.write_text(
        "import torch\nfrom torch import nn\n\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), torch.randn(1, 3, 16, 16)\n"
    )
    device = tmp_path / "toy.json"
    device.write_text(json.dumps(TOY.to_dict()))
    png, out = tmp_path / "chart.png", tmp_path / "table.txt"
    status = main([f"{factory}:build", "--hardware", str(device), "--plot", str(png), "-o", str(out), "-q"])
    assert status == 0
    text = out.read_text()
    assert "time" in text and "bound" in text and "toy (float32)" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "chart.time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([f"{factory}:build", "--plot", str(png), "-q"]) == 2  # a chart needs hardware
