"""Hardware figures outside physical ranges are refused, naming the file, the field and the value
(a denormal bandwidth made every roofline time infinite, which a JSON export cannot hold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opcount.errors import OpcountValueError
from opcount.hardware.lookup import PRESETS, Hardware, hardware

PEAK = {"tensor": {"float16": 100e12}, "vector": {"float32": 10e12}}


def _write(tmp_path: Path, **changes: object) -> Path:
    data: dict[str, object] = {"name": "npu", "bandwidth": 1e12, "peak": PEAK, **changes}
    path = tmp_path / "npu.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "changes, field, value",
    [
        ({"bandwidth": 1e-320}, "bandwidth", "1e-320"),
        ({"bandwidth": 5e5}, "bandwidth", "500000.0"),  # 0.5 MB/s, below 1 MB/s
        ({"bandwidth": 2e15}, "bandwidth", "2000000000000000.0"),  # 2 PB/s
        ({"peak": {"tensor": {"float16": 1e-320}}}, "peak['tensor']['float16']", "1e-320"),
        ({"peak": {"vector": {"float32": 1e19}}}, "peak['vector']['float32']", "1e+19"),
        ({"clock_hz": 1e-300}, "clock_hz", "1e-300"),
        ({"buffer_bytes": 1e300}, "buffer_bytes", "1e+300"),
    ],
)
def test_a_file_with_figures_out_of_range_is_refused(tmp_path: Path, changes: dict, field: str, value: str) -> None:
    path = _write(tmp_path, **changes)
    with pytest.raises(OpcountValueError) as e:
        hardware(str(path))
    message = str(e.value)
    assert str(path) in message and field in message and value in message


def test_the_edges_of_the_ranges_are_accepted() -> None:
    low = Hardware("low", {"vector": {"float32": 1e6}}, bandwidth=1e6, clock_hz=1e3, buffer_bytes=1)
    high = Hardware("high", {"vector": {"float32": 1e18}}, bandwidth=1e15, clock_hz=1e11, buffer_bytes=1e15)
    assert low.ridge("vector", "float32") == 1.0
    assert high.ridge("vector", "float32") == 1e3


def test_every_preset_is_within_the_ranges() -> None:
    for name, preset in PRESETS.items():
        assert Hardware.from_dict(preset.to_dict()) == preset, name
