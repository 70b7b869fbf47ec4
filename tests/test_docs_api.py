"""The documented API is the real one: the attribute spellings docs/roofline.md uses, and the
installed package holds no documentation generator (it would write into site-packages/docs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opcount.hardware import Hardware
from opcount.roofline import Layer, speed_of_light

PACKAGE = Path(__file__).resolve().parent.parent / "opcount"


def test_layer_time_reads_its_layers_figures() -> None:
    """docs/roofline.md lists ``flops``, ``ifmap_bytes``, ``weight_bytes``, ``ofmap_bytes``, ``unit``
    and ``precision`` among a LayerTime's attributes: they are its Layer's."""
    toy = Hardware("toy", {"tensor": {"float16": 100e9}, "vector": {"float16": 10e9}}, bandwidth=10e9)
    layer = Layer(
        "fc", flops=2e9, ifmap_bytes=3.0, weight_bytes=5.0, ofmap_bytes=7.0, unit="tensor", precision="float16"
    )
    (timed,) = speed_of_light([layer], toy).layers
    assert (timed.flops, timed.ifmap_bytes, timed.weight_bytes, timed.ofmap_bytes) == (2e9, 3.0, 5.0, 7.0)
    assert (timed.unit, timed.precision) == ("tensor", "float16")
    assert timed.compute_time == pytest.approx(2e9 / 100e9)  # the tensor peak of float16
    with pytest.raises(AttributeError):
        timed.flops = 1.0  # type: ignore[misc]  # read-only: the Layer is the one source


def test_no_module_of_the_package_writes_the_docs_folder() -> None:
    offenders = [p.name for p in PACKAGE.rglob("*.py") if '/ "docs"' in p.read_text(encoding="utf-8")]
    assert not offenders, f"documentation generators belong in scripts/, not the package: {offenders}"
