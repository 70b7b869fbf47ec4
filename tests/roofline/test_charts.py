"""Charts people can read: no two texts on the roofline chart overlap (a geometric check on the
rendered figure, in display coordinates), and time axes are written in the report's time units."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from opcount.hardware.lookup import Hardware
from opcount.roofline import Layer, RooflineReport, speed_of_light
from opcount.units import MICROSECONDS

pytest.importorskip("matplotlib")

# 100 GFLOP/s tensor, 10 GFLOP/s vector, 10 GB/s: ridge points at 10 and 1 FLOP/B.
TOY = Hardware("toy", {"tensor": {"float32": 100e9}, "vector": {"float32": 10e9}}, bandwidth=10e9)


def _crowded() -> RooflineReport:
    """Convolutions just past the tensor ridge, a few hundredths to tenths of a decade apart (as
    resnet50's are on an H100), each slower than the next, and a few memory-bound layers."""
    layers = [
        Layer(
            f"layer{i}.{j}.conv2",
            flops=(12 - i) * 1e8,
            weight_bytes=(12 - i) * 1e8 / intensity,
            unit="tensor",
            op="conv",
            owners=("", f"layer{i}", f"layer{i}.{j}", f"layer{i}.{j}.conv2"),
        )
        for i, (j, intensity) in enumerate(
            zip(range(12), (11, 11.5, 12, 13, 14, 15.5, 17, 19, 22, 25, 30, 40), strict=True)
        )
    ]
    layers += [
        Layer(f"layer{i}.relu", flops=1e6, ifmap_bytes=4e6 * (i + 1), unit="vector", op="relu", owners=("", f"l{i}"))
        for i in range(3)
    ]
    return speed_of_light(layers, TOY)


def _texts(fig):  # type: ignore[no-untyped-def]
    """(text, its box) of every text on the axes, and the leader lines (label centre -> point),
    in display pixels, as the saved file shows them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # as saving draws it
    renderer = canvas.get_renderer()
    (ax,) = fig.axes
    texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
    boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in texts]  # the text alone
    lines = []
    for t, (name, box) in zip(texts, boxes, strict=True):
        if getattr(t, "arrow_patch", None) is not None:
            x, y = ax.transData.transform(t.xy)
            lines.append((name, (float((box.x0 + box.x1) / 2), float((box.y0 + box.y1) / 2), float(x), float(y))))
    return ax, renderer, boxes, lines


@pytest.mark.parametrize("label_top", [5, 8])
def test_roofline_chart_texts_do_not_overlap(tmp_path: Path, label_top: int) -> None:
    from opcount.roofline.chart_labels import crosses
    from opcount.roofline.plot import roofline_chart

    report = _crowded()
    fig = roofline_chart(report, tmp_path / "roofline.png", label_top=label_top)
    ax, renderer, boxes, lines = _texts(fig)
    ridges = [text for text, _ in boxes if text.startswith("ridge")]
    names = [text for text, _ in boxes if text not in ridges]
    legend = ax.get_legend().get_window_extent(renderer)
    frame = ax.get_window_extent(renderer)
    for (a, box_a), (b, box_b) in combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    for text, box in boxes:
        assert not box.overlaps(legend), f"{text!r} overlaps the legend"
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, text
        for owner, line in lines:
            if owner != text:
                assert not crosses(line, tuple(box.extents), pad=0), f"the line to {owner!r} crosses {text!r}"
    assert len(names) == label_top  # every label asked for found a place
    assert names[0] == "layer0.0.conv2:conv"  # the slowest first
    assert sorted(ridges) == ["ridge 1 FLOP/B", "ridge 10 FLOP/B"]


def test_segment_crossing_a_box() -> None:
    from opcount.roofline.chart_labels import crosses

    box = (0.0, 0.0, 10.0, 10.0)
    assert crosses((-5, 5, 15, 5), box, pad=0)  # straight through
    assert crosses((5, 5, 50, 50), box, pad=0)  # starts inside
    assert not crosses((-5, 11, 15, 11), box, pad=0)  # passes above
    assert crosses((-5, 11, 15, 11), box, pad=2)  # ... within the padding
    assert not crosses((11, -5, 30, 20), box, pad=0)  # beside it, slanted
    assert not crosses((-5, 20, 5, 12), box, pad=0)  # ends short of it


def test_roofline_chart_keeps_its_layout_from_one_save_to_the_next(tmp_path: Path) -> None:
    from matplotlib.text import Text

    from opcount.roofline.plot import roofline_chart

    fig = roofline_chart(_crowded(), tmp_path / "roofline.png")
    before = [Text.get_window_extent(t, fig.canvas.get_renderer()).bounds for t in fig.axes[0].texts]
    fig.savefig(tmp_path / "roofline.svg")  # nothing is laid out again: the labels stay clear
    fig.savefig(tmp_path / "again.png", dpi=fig.dpi)
    after = [Text.get_window_extent(t, fig.canvas.get_renderer()).bounds for t in fig.axes[0].texts]
    assert before == after
    assert b"layer0.0.conv2:conv" in (tmp_path / "roofline.svg").read_bytes()


def test_time_chart_axis_in_the_unit_of_its_largest_bar() -> None:
    from opcount.roofline.plot import time_chart

    report = _crowded()
    fig = time_chart(report, top=3)
    (ax,) = fig.axes
    # layer0.0.conv2: 1.2e9 FLOP / 100e9 FLOP/s = 12 ms, compute bound: one bar of 12 (ms).
    assert ax.get_xlabel() == "speed-of-light time (ms)"
    widths = [p.get_width() for p in ax.patches]
    assert max(widths) == pytest.approx(12.0)
    # Bars in microseconds for a fast model.
    small = speed_of_light([Layer("a", flops=1e6, unit="tensor", owners=("", "a"))], TOY)  # 10 us
    (ax,) = time_chart(small).axes
    assert ax.get_xlabel() == f"speed-of-light time ({MICROSECONDS})"
    assert max(p.get_width() for p in ax.patches) == pytest.approx(10.0)


def test_time_chart_legend_covers_no_bar_and_its_title_fits() -> None:
    # The legend sat inside the axes over the bottom bars, and a long title ran past the figure's edges.
    from opcount.roofline.plot import time_chart

    hw = Hardware("a-very-long-hardware-file-name-from-a-toml", dict(TOY.peak), bandwidth=TOY.bandwidth)
    report = speed_of_light(_layers(), hw)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = time_chart(report, within="layer0")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # as saving draws it
    renderer = canvas.get_renderer()
    page = fig.bbox
    legend = fig.legends[0].get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in fig.axes[0].patches]
    assert bars and not any(legend.overlaps(bar) for bar in bars)
    title = fig._suptitle.get_window_extent(renderer)  # matplotlib keeps no public handle on it
    assert page.x0 <= title.x0 and title.x1 <= page.x1 and title.y1 <= page.y1
    assert "\n" in fig._suptitle.get_text()  # wrapped


def _layers() -> list[Layer]:
    """Memory-bound and compute-bound layers inside one long-named module."""
    long = "layer0.a_module_with_a_long_name_that_a_real_model_might_well_have"
    return [
        Layer(
            f"{long}.conv{i}",
            flops=1e8 * (i + 1),
            weight_bytes=1e6,
            unit="tensor",
            op="conv",
            owners=("", "layer0", long, f"{long}.conv{i}"),
        )
        for i in range(6)
    ] + [
        Layer(
            f"{long}.relu",
            flops=1e6,
            ifmap_bytes=4e8,
            unit="vector",
            op="relu",
            owners=("", "layer0", long, f"{long}.relu"),
        )
    ]


def test_sparsity_roofline_chart_labels_do_not_overlap(tmp_path: Path) -> None:
    from opcount.sparsity.plot import SparsityResult, sparsity_roofline_chart

    # Two patterns whose configurations nearly coincide, as 2:8 and 1:4 do on an H100.
    points = [
        SparsityResult(series, speedup, accuracy, level, label=label)
        for series, speedup, accuracy, level, label in [
            ("future N:M", 1.55, 67.0, 0.75, "2:8"),
            ("future N:M", 1.56, 67.0, 0.75, "1:4"),
            ("future N:M", 1.58, 66.8, 0.875, "2:16"),
            ("block 4", 1.30, 71.0, 0.5, ""),
            ("block 4", 1.31, 70.0, 0.5, "2:4"),
            ("block 4", 1.57, 66.9, 0.75, ""),
        ]
    ]
    fig = sparsity_roofline_chart(points, tmp_path / "sparsity.png", dense_accuracy=76.0)
    ax, renderer, boxes, _ = _texts(fig)
    assert sorted(text for text, _ in boxes) == ["1:4", "2:16", "2:4", "2:8", "50%", "75%"]
    legend = ax.get_legend().get_window_extent(renderer)
    for (a, box_a), (b, box_b) in combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    assert not any(box.overlaps(legend) for _, box in boxes)


def test_names_are_drawn_as_text() -> None:
    from matplotlib import cbook

    from opcount.roofline.chart_labels import plain

    # matplotlib draws what stands between two $ as math: a name with one $ joined a second one
    # elsewhere in the text, and \foo (no such TeX command) failed the drawing
    assert plain("price$5") == "price\\$5" and plain("$\\foo{x}$") == "\\$\\foo{x}\\$"
    assert not cbook.is_math_text(plain("$\\foo{x}$")) and not cbook.is_math_text(plain("a$b$c"))
    assert plain("a\tb\udcff") == "a\\tb\\udcff"  # no glyph for a tab; a lone surrogate no file encodes


def test_every_chart_draws_dollars_in_names(tmp_path: Path) -> None:
    from opcount.roofline.plot import roofline_chart, time_chart
    from opcount.sparsity.plot import SparsityResult, sparsity_roofline_chart, speedup_chart

    names = ["$\\foo{x}$", "price$5"]
    layers = [Layer(n, flops=1e8, weight_bytes=1e7, unit="tensor", op="conv", owners=("", n)) for n in names]
    report = speed_of_light(layers, Hardware("my$npu", {"tensor": {"float32": 100e9}}, bandwidth=10e9))
    time = time_chart(report, tmp_path / "time.png")
    assert {t.get_text() for t in time.axes[0].get_yticklabels()} == {"\\$\\foo{x}\\$", "price\\$5"}
    roofline_chart(report, tmp_path / "roofline.svg", by="module")
    points = [SparsityResult(n, 1.5, 70.0, 0.5, label=n) for n in names]
    sparsity_roofline_chart(points, tmp_path / "sparsity.png")
    speedup_chart(points, tmp_path / "speedup.png")
    assert len(list(tmp_path.iterdir())) == 4  # each drawn and written whole
