"""The documented API is the real one: the attribute spellings docs/roofline.md uses, and the
installed package holds no documentation generator (it would write into site-packages/docs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opcount.hardware.lookup import Hardware
from opcount.roofline import Layer, speed_of_light

PACKAGE = Path(__file__).resolve().parents[2] / "opcount"


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


def test_references_are_cited_by_name() -> None:
    """chainer-computational-cost, fvcore, the AMAIX paper, the Sparsity Roofline paper and MXNet's
    custom-operator profiling are cited by name, never by an internal file number."""
    root = PACKAGE.parent
    files = [
        root / "README.md",
        *(p for d in ("opcount", "docs", "tests", "scripts", "benchmarks") for p in (root / d).rglob("*")),
    ]
    numbered = re.compile(r"seed[ _-]?0\d\d", re.IGNORECASE)  # capitalised too
    offenders = [
        f"{p.relative_to(root)}:{n}"
        for p in files
        if p.is_file() and p.suffix in {".py", ".md", ".txt", ".toml", ".sh"}
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if numbered.search(line)
    ]
    assert not offenders, f"cite the reference by name: {offenders}"
