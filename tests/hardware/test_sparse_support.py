"""Sparse support as a field of Hardware: declared by presets and by TOML/JSON hardware files,
read by the sparsity roofline. Times worked by hand as in test_sparsity.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from opcount.hardware.lookup import PRESETS, Hardware, hardware
from opcount.sparsity import SPARSE_SUPPORT, SparseSupport, sparsity_roofline

# Round numbers: 100 GFLOP/s tensor, 10 GFLOP/s vector, 10 GB/s (1 byte = 0.1 ns).
TOY_TOML = """\
name = "toy-npu"
bandwidth = 10e9
[peak.tensor]
float32 = 100e9
[peak.vector]
float32 = 10e9
"""


def _toy_file(tmp_path: Path, sparse: str = "") -> Hardware:
    path = tmp_path / "toy.toml"
    path.write_text(TOY_TOML + sparse)
    return hardware(str(path))


def _weight_layer(hw: Hardware, sparsity: str):  # type: ignore[no-untyped-def]
    # x [2, 8] -> W [4, 8] -> [2, 4]: N = 2; x 64 B and out 32 B stay, W is 128 B dense (float32).
    model = nn.Sequential(nn.Linear(8, 4, bias=False), nn.ReLU())
    (w,) = sparsity_roofline(model, (torch.randn(2, 8),), hw, sparsity).weights
    return w


def test_a_toml_file_declares_two_four_and_the_roofline_runs_it_on_the_tensor_unit(tmp_path: Path) -> None:
    hw = _toy_file(tmp_path, '[sparse]\nnm = ["2:4"]\n')
    assert hw.sparse == SparseSupport(nm=((2, 4),))
    # 2:4: 16 values (64 B) + 16 x 2 bits (4 B) = 68 B; 64 + 68 + 32 = 164 B -> 16.4 ns.
    w = _weight_layer(hw, "2:4")
    assert (w.format.name, w.format.bytes, w.sparse.layer.unit) == ("2:4", 68, "tensor")
    assert w.sparse.time == pytest.approx(16.4e-9)


def test_a_file_without_the_key_has_no_sparse_support(tmp_path: Path) -> None:
    hw = _toy_file(tmp_path)
    assert hw.sparse == SparseSupport()
    # 2:4 without support is CSR of 16 non-zeros: 64 B values + (16 + 4 + 1) x 4 B indices = 148 B.
    w = _weight_layer(hw, "2:4")
    assert (w.format.name, w.format.bytes, w.sparse.layer.unit) == ("csr", 148, "vector")
    assert w.sparse.time == pytest.approx((64 + 148 + 32) / 10e9)


def test_declared_precisions_and_smallest_block_are_honoured(tmp_path: Path) -> None:
    hw = _toy_file(tmp_path, '[sparse]\nnm = ["2:4"]\nnm_precisions = ["float16"]\nmin_block = 8\n')
    assert hw.sparse == SparseSupport(nm=((2, 4),), nm_precisions=frozenset({"float16"}), min_block=8)
    assert _weight_layer(hw, "2:4").format.name == "csr"  # the layer is float32: no 2:4 there
    # 4 x 4 blocks, below min_block: BSR (16 values, 64 B + 3 x 4 B indices = 76 B) on the vector unit,
    # 64 flops / 10 GFLOP/s = 6.4 ns < (64 + 76 + 32) B / 10 GB/s = 17.2 ns.
    w = _weight_layer(hw, "block4=0.5")
    assert (w.format.name, w.format.bytes, w.sparse.layer.unit) == ("bsr", 76, "vector")
    assert w.sparse.time == pytest.approx(17.2e-9)


def test_sparse_support_round_trips_through_json(tmp_path: Path) -> None:
    mi300x = PRESETS["mi300x"]
    path = tmp_path / "mi300x.json"
    path.write_text(json.dumps(mi300x.to_dict()))
    assert Hardware.from_file(path).sparse == mi300x.sparse
    assert mi300x.to_dict()["sparse"]["nm"] == ["2:4"]
    assert "sparse" not in PRESETS["t4"].to_dict()  # the default is not written out


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('nm = ["2:4"]\nspeedup = 2\n', "unknown sparse keys"),
        ('nm = "2:4"\n', "list of 'N:M' strings"),
        ('nm = ["4:2"]\n', "1 <= N <= M"),
        ('nm = ["2-4"]\n', "cannot read '2-4'"),
        ('nm_precisions = "float16"\n', "list of dtype names"),
        ("block = 1\n", "block must be true or false"),
    ],
)
def test_bad_sparse_tables_name_the_file_and_the_key(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        _toy_file(tmp_path, "[sparse]\n" + table)
    assert "toy.toml" in str(caught.value)


def test_presets_declare_what_their_vendors_publish() -> None:
    # NVIDIA: 2:4 sparse tensor cores from Ampere on (A100, A10G, L4, L40S, RTX 4090, H100, H200, B200),
    # not in fp64; AMD MI300X data sheet: 2:4 in fp16, bf16, fp8, int8; none on Turing, AMX, M2, NVDLA.
    nvidia = ("h100-sxm", "h100-pcie", "a100-sxm", "l4", "rtx-4090", "h200-sxm", "b200", "l40s", "a10g")
    for name in (*nvidia, "a100-pcie-40gb"):
        sparse = PRESETS[name].sparse
        assert sparse.nm == ((2, 4),), name
        assert sparse.fit_nm(2, 4, "tf32") == (2, 4) and sparse.fit_nm(2, 4, "float64") is None, name
    mi300x = PRESETS["mi300x"].sparse
    assert mi300x.fit_nm(2, 4, "float8_e4m3fnuz") == (2, 4) and mi300x.fit_nm(2, 4, "tf32") is None
    for name in ("t4", "xeon-8480-2s", "m2-max", "nvdla-full"):
        assert PRESETS[name].sparse == SparseSupport(), name
    assert dict(SPARSE_SUPPORT) == {name: hw.sparse for name, hw in PRESETS.items()}
