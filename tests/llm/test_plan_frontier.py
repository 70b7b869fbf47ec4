"""The throughput-interactivity frontier and the energy figures: the Pareto set worked by hand on six points, the
CSV monotone on it, the JSON, the charts, the interactive page in headless chromium (one point a configuration,
a hover showing its layout), energy by hand, and ``opcount plan --frontier`` end to end on a small Llama."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from opcount.llm.plan import frontier
from opcount.llm.plan.energy import joules_per_token, tokens_per_s_per_mw
from opcount.llm.plan.points import Point
from tests.fixtures.command import error_line, run
from tests.report.test_html_browser import CAPTURE, _browser


def point(hardware: str, user: float, device: float, layout: str = "tp1", meets: bool = True) -> Point:
    return Point(
        hardware=hardware, layout=layout, devices=1, concurrency=8, rate=None, tokens_per_s_per_device=device,
        tokens_per_s_per_user=user, ttft_p50_s=0.1, ttft_p90_s=0.2, tpot_p50_s=1 / user, tpot_p90_s=1.1 / user,
        cost_per_m_tokens=1.0, joules_per_token=0.5, meets_slo=meets, binds="memory", precision="bfloat16",
    )  # fmt: skip


# a: (per user, per device). On h100: A (10, 900) and B (20, 800) and D (40, 300) are each best somewhere;
# C (20, 700) is beaten by B (as fast per user, more per device); E (15, 600) by B. On b200: F alone.
SIX = [
    point("h100", 10, 900, "A"), point("h100", 20, 800, "B"), point("h100", 20, 700, "C"),
    point("h100", 40, 300, "D"), point("h100", 15, 600, "E"), point("b200", 5, 100, "F"),
]  # fmt: skip


def test_the_pareto_set_by_hand() -> None:
    assert [p.layout for p in frontier.pareto(SIX)] == ["F", "A", "B", "D"]  # by device type, then per user


def test_the_csv_marks_the_pareto_set_and_falls_along_it(tmp_path: Path) -> None:
    path = frontier.write(SIX, tmp_path / "f.csv")
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert [r["layout"] for r in rows if r["pareto"] == "True"] == ["F", "A", "B", "D"]
    assert len(rows) == 6 and rows[0].keys() == set(frontier.COLUMNS)
    for hw in ("h100", "b200"):
        front = [r for r in rows if r["hardware"] == hw and r["pareto"] == "True"]
        users = [float(r["tokens_per_s_per_user"]) for r in front]
        devices = [float(r["tokens_per_s_per_device"]) for r in front]
        assert users == sorted(users) and devices == sorted(devices, reverse=True)
        assert len(set(users)) == len(users) and len(set(devices)) == len(devices)
    assert float(rows[0]["tokens_per_s_per_mw"]) == pytest.approx(1e6 / 0.5)


def test_the_json_holds_every_point(tmp_path: Path) -> None:
    data = json.loads(frontier.write(SIX, tmp_path / "f.json", slo_tpot_s=0.05).read_text(encoding="utf-8"))
    assert data["slo_tpot_s"] == 0.05 and len(data["points"]) == 6
    assert sum(p["pareto"] for p in data["points"]) == 4


@pytest.mark.parametrize("ending", ["png", "svg"])
def test_the_chart_is_written(tmp_path: Path, ending: str) -> None:
    pytest.importorskip("matplotlib")
    path = frontier.write(SIX, tmp_path / f"f.{ending}", title="six", slo_tpot_s=0.05)
    head = path.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if ending == "png" else b"<svg" in head or b"<?xml" in head


def test_a_file_ending_opcount_does_not_write_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"\.csv, \.json, \.png, \.svg, \.html"):
        frontier.write(SIX, tmp_path / "f.txt")


def test_energy_by_hand() -> None:
    # four 700 W devices for 10 s generating 1,000 tokens: 28,000 J, 28 J a token; 1e6 / 28 tokens/s per MW
    assert joules_per_token(4 * 700, 10, 1000) == pytest.approx(28.0)
    assert tokens_per_s_per_mw(28.0) == pytest.approx(1000 / 10 / (4 * 700 / 1e6))
    assert joules_per_token(None, 10, 1000) is None and tokens_per_s_per_mw(None) is None


HOVER = """<script>
(function () {
  var seen = {points: document.querySelectorAll("circle.point").length,
              pareto: document.querySelectorAll("circle.point.pareto").length,
              slo: document.querySelectorAll("#slo").length, lines: document.querySelectorAll("polyline.frontier").length};
  try {
    var c = document.querySelector('circle.point[data-i="1"]');
    c.dispatchEvent(new MouseEvent("mouseenter"));
    seen.tip = document.getElementById("tip").textContent;
    seen.shown = document.getElementById("tip").style.display;
    c.dispatchEvent(new MouseEvent("mouseleave"));
    seen.hidden = document.getElementById("tip").style.display;
  } catch (e) { window.__errors.push("test script: " + e.message); }
  seen.errors = window.__errors;
  var out = document.createElement("pre"); out.id = "browser-test"; out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
})();
</script>"""


def test_the_page_shows_one_point_a_configuration_in_chromium(tmp_path: Path) -> None:
    import html
    import re
    import subprocess

    browser = _browser()
    text = frontier.write(SIX, tmp_path / "f.html", title="six", slo_tpot_s=0.05).read_text(encoding="utf-8")
    assert "http" not in text.replace("http-equiv", "")  # nothing fetched: no link to anywhere
    page = tmp_path / "test.html"
    page.write_text(text.replace("<head>", "<head>\n" + CAPTURE, 1).replace("</body>", HOVER + "\n</body>", 1))
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom",
         f"--user-data-dir={tmp_path / 'profile'}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r'<pre id="browser-test">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    seen = json.loads(html.unescape(found.group(1)))
    assert seen["errors"] == []
    assert seen["points"] == 6 and seen["pareto"] == 4 and seen["slo"] == 1 and seen["lines"] == 2
    second = frontier.rows(SIX)[1]  # data-i indexes the rows as the CSV orders them
    assert second["layout"] in seen["tip"] and "TPOT p50" in seen["tip"]
    assert seen["shown"] == "block" and seen["hidden"] == "none"


SMALL = [
    f"--hf-config={k}={v}"
    for k, v in {
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000,
    }.items()
]  # fmt: skip


def test_plan_writes_the_frontier_across_concurrencies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "front.csv"
    status, text, err = run(
        capsys, "plan", "llm:llama-3-8b", *SMALL, "--concurrency", "1,4,16", "--requests", "32", "--input-len",
        "128", "--output-len", "16", "--hardware", "h100-sxm", "--max-devices", "2", "--frontier", str(out),
    )  # fmt: skip
    assert status == 0, err
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    # tp1, tp2 and pp2 (copies of tp1 stop at the first: no target, every one meets) at each of 3 concurrencies
    assert sorted({int(r["concurrency"]) for r in rows}) == [1, 4, 16]
    assert len(rows) == 9 and "@16" in text
    # per user speed falls with load on one layout, per device rises
    tp1 = sorted((r for r in rows if r["layout"] == "tp1"), key=lambda r: int(r["concurrency"]))
    assert [float(r["tokens_per_s_per_user"]) for r in tp1] == sorted(
        (float(r["tokens_per_s_per_user"]) for r in tp1), reverse=True
    )
    assert [float(r["tokens_per_s_per_device"]) for r in tp1] == sorted(
        float(r["tokens_per_s_per_device"]) for r in tp1
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--concurrency", "4", "--frontier", "x.txt"], "--frontier"),
        (["--concurrency", ",".join(str(i) for i in range(1, 40))], "--concurrency"),
        (["--concurrency", "4,0"], "--concurrency"),
        (["--concurrency", "4", "--frontier", "/no/such/folder/f.csv"], "--frontier"),
    ],
)
def test_bad_frontier_flags_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    assert flag in error_line(capsys, "plan", "llm:llama-3-8b", *SMALL, *args)
