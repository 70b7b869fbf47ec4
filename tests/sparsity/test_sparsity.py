"""Sparsity Roofline (Shinn et al.): formats and bytes, FLOPs, times and speedups worked by hand,
pattern detection, pruning copies, report columns and charts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.utils.prune
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from opcount import FlopCountAnalysis
from opcount.hardware.lookup import Hardware
from opcount.report import module_table
from opcount.sparsity import (
    DENSE,
    SparseSupport,
    Sparsity,
    bsr_format,
    csr_format,
    detect_sparsity,
    gemm_view,
    nm_format,
    parse_sparsity_args,
    prunable_weights,
    prune,
    sparsity_roofline,
    storage,
)
from opcount.sparsity.plot import SparsityResult, sparsity_roofline_chart, speedup_chart

# Round numbers: 100 GFLOP/s tensor, 10 GFLOP/s vector, 10 GB/s (1 byte = 0.1 ns).
TOY = Hardware("toy", {"tensor": {"float32": 100e9}, "vector": {"float32": 10e9}}, bandwidth=10e9)
TOY_24 = SparseSupport(nm=((2, 4),))


# ----- the paper's example ---------------------------------------------------------------------
def test_paper_example_3072x768_weight_with_1_23m_nonzeros_costs_15_4_gflops() -> None:
    # The Sparsity Roofline paper, table 1: W 3072 x 768, N = 6272, 1.23M non-zeros: 2 x 1.23M x 6272 = 15.4 GFLOPs.
    layer = nn.Linear(768, 3072, bias=False)
    keep = torch.zeros(3072 * 768, dtype=torch.bool)
    keep[torch.randperm(keep.numel())[:1_230_000]] = True
    with torch.no_grad():
        layer.weight.mul_(keep.reshape(3072, 768))
    report = sparsity_roofline(layer, (torch.zeros(1, 6272, 768),), "a100-sxm", dtype="float16")
    (w,) = report.weights
    assert (w.rows, w.cols, w.n, w.nnz) == (3072, 768, 6272, 1_230_000)
    assert w.sparsity.pattern == "unstructured" and w.format.name == "csr"
    assert w.sparse_flops == 2 * 1_230_000 * 6272 == 15_429_120_000
    assert w.dense_flops == 2 * 3072 * 768 * 6272
    # The same count in the 1-flop-per-multiply-add convention.
    assert w.sparse_flops / w.flops_per_mac == 1_230_000 * 6272


# ----- formats and their bytes ---------------------------------------------------------------------
def test_csr_bytes_of_a_small_matrix_by_hand() -> None:
    # [[1 0 0 2]      values  [1 2 3]       3 x 4 bytes = 12
    #  [0 0 3 0]      columns [0 3 2]       3 x 4 bytes
    #  [0 0 0 0]]     row ptr [0 2 3 3]     4 x 4 bytes -> index 28 bytes
    w = torch.tensor([[1.0, 0, 0, 2], [0, 0, 3, 0], [0, 0, 0, 0]])
    fmt = csr_format(3, 4, int(torch.count_nonzero(w)))
    assert (fmt.values, fmt.value_bytes, fmt.index_bytes, fmt.bytes) == (3, 12, 28, 40)
    # float16 values and int16 indices halve both parts.
    half = csr_format(3, 4, 3, value_size=2, index_size=2)
    assert (half.value_bytes, half.index_bytes) == (6, 14)


def test_bsr_bytes_by_hand() -> None:
    # 4 x 8 with 2 x 2 blocks: a 2 x 4 grid; blocks (0, 0), (0, 1) and (1, 3) kept.
    # values 3 x 4 = 12 (48 B); block columns [0 1 3] and block-row pointers [0 2 3]: 6 x 4 = 24 B.
    w = torch.zeros(4, 8)
    w[0:2, 0:4] = 1.0
    w[2:4, 6:8] = 2.0
    fmt = bsr_format(4, 8, 2, 3)
    assert (fmt.values, fmt.value_bytes, fmt.index_bytes) == (12, 48, 24)
    assert detect_sparsity(w) == Sparsity.block(2, 1 - 3 / 8)
    assert storage(detect_sparsity(w), 4, 8) == fmt
    # Edges: 5 x 5 in 2 x 2 blocks is a 3 x 3 grid; a kept edge block is stored whole (4 values).
    edge = bsr_format(5, 5, 2, 1)
    assert (edge.values, edge.index_bytes) == (4, (1 + 3 + 1) * 4)


@pytest.mark.parametrize(("n", "m", "bits"), [(1, 2, 1), (2, 4, 2), (1, 4, 2), (2, 8, 3), (2, 16, 4)])
def test_nm_index_bits_per_nonzero(n: int, m: int, bits: int) -> None:
    # ceil(log2 M) bits per kept value: 2:4 -> 2 bits.
    fmt = nm_format(16, 64, n, m, value_size=2)
    values = 16 * 64 * n // m
    assert fmt.values == values
    assert fmt.value_bytes == 2 * values
    assert fmt.index_bytes == math.ceil(values * bits / 8)


def test_nm_partial_last_group_keeps_at_most_its_size() -> None:
    # 10 columns in groups of 4: two full groups (2 + 2) and one of 2 columns (min(2, 2) = 2).
    assert nm_format(3, 10, 2, 4).values == 3 * 6
    assert nm_format(3, 9, 2, 4).values == 3 * 5


# ----- times and speedups by hand on TOY ---------------------------------------------------------------
def _toy_linear() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 4, bias=False), nn.ReLU())


def _toy(sparsity: object, support: SparseSupport | None = TOY_24):  # type: ignore[no-untyped-def]
    # x [2, 8] -> W [4, 8] -> [2, 4]: N = 2. Dense: 2 x 32 x 2 = 128 flops (tensor, 1.28 ns);
    # bytes x 64 + W 128 + out 32 = 224 -> 22.4 ns (memory bound). ReLU: 32 + 32 B -> 6.4 ns.
    return sparsity_roofline(_toy_linear(), (torch.randn(2, 8),), TOY, sparsity, support=support)


def test_dense_layer_speedup_is_exactly_one() -> None:
    report = _toy("measured")
    (w,) = report.weights
    assert w.sparsity == DENSE and w.format.name == "dense"
    assert w.dense.time == pytest.approx(22.4e-9)
    assert w.speedup == 1.0 and report.speedup == 1.0
    assert report.sparse_time == report.dense_time


def test_unstructured_by_hand_halves_flops_but_runs_slower() -> None:
    # 50%: 16 values (64 B) + (16 + 4 + 1) indices (84 B) = 148 B; with x and out 244 B -> 24.4 ns;
    # 64 flops on the vector unit: 6.4 ns. Slower than dense (22.4 ns), as the Sparsity Roofline paper warns.
    (w,) = _toy("unstructured=0.5").weights
    assert (w.nnz, w.format.name, w.format.bytes) == (16, "csr", 148)
    assert w.sparse.layer.unit == "vector" and w.dense.layer.unit == "tensor"
    assert w.sparse_flops == 64 and w.dense_flops == 128
    assert w.sparse.compute_time == pytest.approx(6.4e-9)
    assert w.sparse.time == pytest.approx(24.4e-9)
    assert w.speedup == pytest.approx(22.4 / 24.4)


def test_two_four_by_hand_and_the_model_speedup() -> None:
    # 2:4: 16 values (64 B) + 16 x 2 bits (4 B) = 68 B; 64 + 68 + 32 = 164 B -> 16.4 ns on the tensor unit.
    report = _toy("2:4")
    (w,) = report.weights
    assert (w.format.name, w.format.bytes, w.sparse.layer.unit) == ("2:4", 68, "tensor")
    assert w.sparse.time == pytest.approx(16.4e-9)
    assert w.speedup == pytest.approx(22.4 / 16.4)
    # The model: the ReLU keeps its 6.4 ns; (22.4 + 6.4) / (16.4 + 6.4).
    assert report.dense_time == pytest.approx(28.8e-9)
    assert report.speedup == pytest.approx(28.8 / 22.8)
    assert report.module_speedup("1") == 1.0


def test_block_by_hand_runs_on_the_tensor_unit() -> None:
    # 4 x 8 in 4 x 4 blocks: 2 blocks, 50% keeps 1: 16 values (64 B) + (1 + 1 + 1) x 4 B = 76 B.
    (w,) = _toy("block4=0.5").weights
    assert (w.format.name, w.format.values, w.format.bytes, w.sparse.layer.unit) == ("bsr", 16, 76, "tensor")
    assert w.sparse.time == pytest.approx((64 + 76 + 32) / 10e9)


def test_nm_without_support_runs_as_csr_and_1_4_runs_as_2_4() -> None:
    (w,) = _toy("2:4", support=SparseSupport()).weights
    assert (w.format.name, w.sparse.layer.unit) == ("csr", "vector")
    (w,) = _toy("1:4").weights
    assert w.sparsity == Sparsity.nm(1, 4)
    assert (w.format.name, w.format.values, w.nnz) == ("2:4", 16, 8)  # 2 stored per 4, one of them a zero


def test_dense_if_faster_keeps_slower_sparse_layers_dense() -> None:
    report = sparsity_roofline(_toy_linear(), (torch.randn(2, 8),), TOY, "unstructured=0.5", dense_if_faster=True)
    (w,) = report.weights
    assert w.format.name == "dense" and w.speedup == 1.0


def test_index_dtype_changes_index_bytes() -> None:
    report = sparsity_roofline(_toy_linear(), (torch.randn(2, 8),), TOY, "unstructured=0.5", index_dtype="int16")
    assert report.weights[0].format.index_bytes == 21 * 2
    with pytest.raises(ValueError, match="index_dtype"):
        sparsity_roofline(_toy_linear(), (torch.randn(2, 8),), TOY, "2:4", index_dtype="float32")


# ----- which layers, and what N is --------------------------------------------------------------
class _Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.proj = nn.Parameter(torch.randn(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.conv(x))  # [2, 8, 5, 5] -> [2, 4, 10, 10]
        return y.permute(0, 2, 3, 1) @ self.proj  # x @ W with W a parameter [4, 6]


def test_weight_layers_and_their_n() -> None:
    report = sparsity_roofline(_Mixed(), (torch.randn(2, 4, 5, 5),), TOY)
    got = {w.weight: (w.rows, w.cols, w.n) for w in report.weights}
    assert got == {
        "conv.weight": (8, 4 * 9, 2 * 5 * 5),  # batch x output pixels
        "up.weight": (4 * 2 * 2, 8, 2 * 5 * 5),  # col2im: (K kh kw) x C, applied to every input pixel
        "proj": (6, 4, 2 * 10 * 10),
    }
    flops = FlopCountAnalysis(_Mixed(), (torch.randn(2, 4, 5, 5),), flops_per_mac=2)
    # rows x cols x N x 2 is the layer's dense count.
    assert sum(w.dense_flops for w in report.weights) == flops.by_operator()["conv"] + flops.by_operator()["matmul"]


def test_declared_by_name_and_glob_and_unknown_names_fail() -> None:
    spec = {"conv": "2:4", "up.*": "block2=0.5", "pro?": "unstructured=0.25"}
    report = sparsity_roofline(_Mixed(), (torch.randn(2, 4, 5, 5),), TOY, spec, support=TOY_24)
    got = {w.weight: (w.sparsity.label, w.source) for w in report.weights}
    assert got == {
        "conv.weight": ("2:4", "declared"),
        "up.weight": ("block 2 50%", "declared"),
        "proj": ("unstructured 25%", "declared"),
    }
    with pytest.raises(ValueError, match="'nothing'"):
        sparsity_roofline(_Mixed(), (torch.randn(2, 4, 5, 5),), TOY, {"nothing": "2:4"})


def test_parse_and_cli_arguments() -> None:
    assert Sparsity.parse("2:4") == Sparsity.nm(2, 4)
    assert Sparsity.parse("unstructured=90%") == Sparsity.unstructured(0.9)
    assert Sparsity.parse("block16=0.875") == Sparsity.block(16, 0.875)
    assert Sparsity.parse("dense") is DENSE
    assert Sparsity.nm(2, 4).level == 0.5
    for bad in ("3:2", "unstructured=1.5", "block=0.5", "block1=0.5", "sparse"):
        with pytest.raises(ValueError):
            Sparsity.parse(bad)
    with pytest.raises(ValueError):
        SparseSupport(nm=((4, 2),))
    assert parse_sparsity_args(["2:4"]) == Sparsity.nm(2, 4)
    assert parse_sparsity_args(["2:4", "dense@conv1"]) == {"conv1": DENSE, "*": Sparsity.nm(2, 4)}
    assert parse_sparsity_args([]) == "measured"


# ----- measured patterns ----------------------------------------------------------------------
def test_detects_constructed_patterns() -> None:
    w = torch.randn(32, 64) + 3  # no zeros
    assert detect_sparsity(w) == DENSE
    two_four = w.clone().reshape(32, 16, 4)
    two_four[..., 2:] = 0  # [a b 0 0]: not 1:2
    assert detect_sparsity(two_four.reshape(32, 64)) == Sparsity.nm(2, 4)
    one_four = w.clone().reshape(32, 16, 4)
    one_four[..., 1:] = 0
    assert detect_sparsity(one_four.reshape(32, 64)) == Sparsity.nm(1, 4)
    blocks = w.clone()
    blocks[:8, :] = 0
    blocks[8:, :16] = 0  # 8 x 8 blocks: 4 x 8 grid, 3 x 6 kept (rows 8.., columns 16..)
    assert detect_sparsity(blocks) == Sparsity.block(8, 1 - 18 / 32)
    random = w * (torch.rand(32, 64) > 0.9)  # ~90% zeros at random: not N:M, not blocks
    found = detect_sparsity(random)
    assert found.pattern == "unstructured"
    assert found.level == pytest.approx(1 - int(torch.count_nonzero(random)) / random.numel())


def test_conv_groups_run_along_input_channels() -> None:
    # 2:4 along C of a [K, C, kh, kw] conv weight: the GEMM view orders the reduction (kh, kw, C).
    w = torch.randn(8, 16, 3, 3) + 3
    w.view(8, 4, 4, 3, 3)[:, :, 2:] = 0
    assert detect_sparsity(gemm_view(w, "conv")) == Sparsity.nm(2, 4)
    assert detect_sparsity(w.reshape(8, -1)).pattern != "nm"  # (C, kh, kw) order would hide it


def test_measured_model_and_torch_prune_hooks() -> None:
    model = _toy_linear()
    torch.nn.utils.prune.l1_unstructured(model[0], "weight", amount=0.5)  # weight made by a pre-hook
    report = sparsity_roofline(model, (torch.randn(2, 8),), TOY)
    (w,) = report.weights
    assert (w.weight, w.source, w.nnz, w.format.name) == ("0.weight", "measured", 16, "csr")


# ----- pruning a copy ---------------------------------------------------------------------------
def _small_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(4, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 8)
    )


def test_prune_leaves_the_original_untouched_and_hits_the_level() -> None:
    model = _small_net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weights = prunable_weights(model)
    total = sum(p.numel() for p, _ in weights.values())

    pruned = prune(model, "unstructured=0.75")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    zeros = sum(int((p == 0).sum()) for p, _ in prunable_weights(pruned).values())
    assert zeros == round(0.75 * total)
    assert torch.equal(pruned[0].bias, model[0].bias)  # biases are not pruned

    per_layer = prune(model, "unstructured=0.5", scope="layer")
    for p, _ in prunable_weights(per_layer).values():
        assert int((p == 0).sum()) == round(0.5 * p.numel())

    nm = prune(model, "2:4")
    for name, (p, view) in prunable_weights(nm).items():
        groups = (gemm_view(p, view) != 0).reshape(p.shape[0], -1, 4).sum(-1)
        assert bool((groups == 2).all()), name

    block = prune(model, "block4=0.5", scope="layer", include=["3"])
    assert detect_sparsity(block[3].weight) == Sparsity.block(4, 0.5)
    assert torch.equal(block[0].weight, model[0].weight)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_pruned_copy_measures_as_its_pattern() -> None:
    model = _small_net()
    x = torch.randn(2, 4, 6, 6)
    pruned = prune(model, "2:4")
    report = sparsity_roofline(model, (x,), TOY, weights=pruned, support=TOY_24)  # one trace, the copy's weights
    assert {(w.sparsity.label, w.format.name) for w in report.weights} == {("2:4", "2:4")}
    assert report.level == pytest.approx(0.5)
    assert report.speedup > 1.0 and report.flop_speedup > report.speedup


# ----- report, columns, charts ---------------------------------------------------------------------
def test_tables_columns_and_charts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, x = _toy_linear(), torch.randn(2, 8)
    report = _toy("2:4")
    assert "2:4" in report.table() and "speedup" in report.table(by="module")
    assert report.rows()[0]["format"] == "2:4"
    flops = FlopCountAnalysis(model, (x,))
    text = module_table(
        flops, columns=["flops", "sparse_flops", "sparse_time", "speedup", "sparsity"], extra={"sparsity": report}
    )
    assert "#sparse MACs" in text and "1.37x" in text and "50.0%" in text

    points = [
        report.point(accuracy=70.0, label="2:4"),
        _toy("unstructured=0.5").point(accuracy=72.0),
        SparsityResult("unstructured", 1.5, 65.0, 0.9),
    ]
    sparsity_roofline_chart(points, tmp_path / "roof.png", dense_accuracy=75.0, note="illustrative")
    speedup_chart(points, tmp_path / "speedup.png")
    assert (tmp_path / "roof.png").stat().st_size > 1000 and (tmp_path / "speedup.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no accuracy"):
        sparsity_roofline_chart([report.point()])


# ----- cross-checks ---------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.floats(0.0, 1.0), st.sampled_from([1, 2, 4]), st.integers(0, 99))
def test_csr_and_bsr_sizes_match_torch(rows: int, cols: int, keep: float, b: int, seed: int) -> None:
    # torch's own sparse layouts hold the same number of values and indices as our formulas.
    g = torch.Generator().manual_seed(seed)
    rows, cols = rows * b, cols * b
    mask = torch.rand(rows // b, cols // b, generator=g) < keep
    w = mask.repeat_interleave(b, 0).repeat_interleave(b, 1) * (torch.rand(rows, cols, generator=g) + 1)
    csr = w.to_sparse_csr()
    fmt = csr_format(rows, cols, int(torch.count_nonzero(w)), value_size=1, index_size=1)
    assert fmt.value_bytes == csr.values().numel()
    assert fmt.index_bytes == csr.col_indices().numel() + csr.crow_indices().numel()
    bsr = w.to_sparse_bsr((b, b))
    fmt = bsr_format(rows, cols, b, int(mask.sum()), value_size=1, index_size=1)
    assert fmt.value_bytes == bsr.values().numel()
    assert fmt.index_bytes == bsr.col_indices().numel() + bsr.crow_indices().numel()


def test_prune_writes_masks_back_through_every_gemm_view() -> None:
    model = nn.Sequential(nn.Conv2d(8, 8, 3), nn.ConvTranspose2d(8, 4, 2), nn.Conv1d(8, 4, 1, groups=2))
    pruned = prune(model, "2:4")
    for name, (p, view) in prunable_weights(pruned).items():
        assert detect_sparsity(gemm_view(p, view)) == Sparsity.nm(2, 4), name
        assert p.shape == dict(model.named_parameters())[name].shape


def test_cli_sparsity_option(capsys: pytest.CaptureFixture[str]) -> None:
    from opcount.cli import main

    assert (
        main(
            [
                "tests.fixtures.report_models:tiny",
                "--hardware",
                "h100-sxm",
                "--roofline-dtype",
                "float16",
                "--sparsity",
                "2:4",
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "#sparse MACs" in out and "speedup" in out and "2:4:" in out
    assert main(["tests.fixtures.report_models:tiny", "--sparsity", "2:4"]) == 2
    assert main(["tests.fixtures.report_models:tiny", "--hardware", "h100", "--sparsity", "2:5:x"]) == 2
    assert "--sparsity: cannot read sparsity" in capsys.readouterr().err


def test_weights_from_a_state_dict_must_match_the_trace() -> None:
    model = _toy_linear()
    state = {"0.weight": torch.zeros(4, 8)}
    (w,) = sparsity_roofline(model, (torch.randn(2, 8),), TOY, weights=state).weights
    assert (w.nnz, w.sparsity) == (0, Sparsity.unstructured(1.0))
    with pytest.raises(ValueError, match="traced model uses"):
        sparsity_roofline(model, (torch.randn(2, 8),), TOY, weights={"0.weight": torch.zeros(8, 4)})


def test_command_plot_with_sparsity_draws_the_sparse_case(tmp_path, monkeypatch) -> None:
    # --sparsity ... --plot drew the dense charts only: the sparse roofline is drawn beside them.
    pytest.importorskip("matplotlib")
    from opcount.cli import main
    from opcount.roofline import plot

    drawn = []
    real = plot.save_charts

    def recorded(report, path, **options):
        drawn.append((report, Path(path).name, options.get("subject", "")))
        return real(report, path, **options)

    monkeypatch.setattr(plot, "save_charts", recorded)
    out = tmp_path / "tiny.png"
    argv = [
        "tests.fixtures.report_models:tiny",
        "--hardware",
        "h100-sxm",
        "--sparsity",
        "2:4",
        "--roofline-dtype",
        "float16",
    ]
    assert main([*argv, "--plot", str(out), "-q"]) == 0
    (dense, dense_name, _), (sparse, sparse_name, subject) = drawn
    assert (dense_name, sparse_name) == ("tiny.png", "tiny.sparse.png")
    assert "2:4" in subject and "sparse" in subject
    assert sparse.total_time < dense.total_time  # the charts show the sparse weights' times
    for name in ("tiny.png", "tiny.time.png", "tiny.sparse.png", "tiny.sparse.time.png"):
        assert (tmp_path / name).stat().st_size > 0
