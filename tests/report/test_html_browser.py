"""The HTML report in a real browser: headless chromium loads the page with a test script appended,
which records script errors, clicks a module of the tree and the headers of the operator table,
and writes what it saw into the page; ``--dump-dom`` hands the page back.

Chromium is Debian's ``chromium`` package (``apt-get install chromium``); .ci/run installs it. Where
no chromium is found the test is skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from opcount import FlopCountAnalysis
from opcount import report as R
from opcount.memory import MemoryTrafficAnalysis
from opcount.roofline import roofline
from tests.fixtures.report_models import tiny

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

# Before the page's own script: every error and console.error from then on is kept.
CAPTURE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
var __consoleError = console.error;
console.error = function () { window.__errors.push(Array.from(arguments).join(" ")); __consoleError.apply(console, arguments); };
</script>"""

# After the page's script: clicks as a user would, and what each click changed.
ACTIONS = """<script>
(function () {
  var seen = {};
  function names() {
    return Array.from(document.querySelectorAll("#operators tbody tr")).map(function (r) { return r.cells[0].getAttribute("data-v"); });
  }
  // a folded <details> skips its content's rendering (content-visibility), which only checkVisibility sees
  function visible(el) { return el.checkVisibility(); }
  try {
    var node = document.querySelector('#tree details[data-module="stem"]');
    var child = node.querySelector('[data-module="stem.0"]');
    seen.treeRows = document.querySelectorAll("#tree .row").length;
    seen.before = [node.open, visible(child)];
    node.querySelector("summary").click();
    seen.afterClick = [node.open, visible(child)];
    node.querySelector("summary").click();
    seen.afterSecondClick = [node.open, visible(child)];
    document.querySelector('button[data-tree="expand"]').click();
    seen.expandAll = Array.from(document.querySelectorAll("#tree details")).every(function (d) { return d.open; });
    var header = function (key) { return document.querySelector('#operators th[data-key="' + key + '"]'); };
    seen.initial = names();
    header("operator").click();
    seen.byName = [names(), header("operator").getAttribute("aria-sort")];
    header("flops").click();
    seen.byFlops = [names(), header("flops").getAttribute("aria-sort")];
    header("flops").click();
    seen.byFlopsReversed = [names(), header("flops").getAttribute("aria-sort")];
    seen.charts = document.querySelectorAll("#charts svg").length;
  } catch (e) {
    window.__errors.push("test script: " + e.message);
  }
  seen.errors = window.__errors;
  var out = document.createElement("pre");
  out.id = "browser-test";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
})();
</script>"""


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = f"no chromium to render the HTML report in (looked for {', '.join(BROWSERS)}; apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + ": CI must install it (.ci/run)")
    pytest.skip(message)


def _render(page: str, tmp_path: Path) -> dict[str, Any]:
    """What the test script saw in ``page``, loaded in headless chromium."""
    instrumented = page.replace("<head>", "<head>\n" + CAPTURE, 1).replace("</body>", ACTIONS + "\n</body>", 1)
    path = tmp_path / "report.html"
    path.write_text(instrumented, encoding="utf-8")
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"]
    done = subprocess.run(
        [*command, f"--user-data-dir={tmp_path / 'profile'}", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="browser-test">(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium exited {done.returncode} without the test's result; stderr: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def page() -> tuple[str, FlopCountAnalysis]:
    model, x = tiny()
    memory = MemoryTrafficAnalysis(model, x)
    rl = roofline(memory, hardware="h100-sxm", dtype="float32")
    flops = FlopCountAnalysis(model, x)
    return R.html_report(flops, rl, memory=memory), flops


def test_the_page_renders_folds_and_sorts_in_chromium(page: tuple[str, FlopCountAnalysis], tmp_path: Path) -> None:
    text, flops = page
    seen = _render(text, tmp_path)
    assert seen["errors"] == []
    assert seen["charts"] == (2 if "<svg" in text else 0)  # inline, or the note that matplotlib is missing
    # Tiny: the model, stem and its 3 layers, pool, blocks and its 2 linears, unused, and the header row
    assert seen["treeRows"] == 1 + 1 + 3 + 1 + 1 + 2 + 1 + 1
    # a module starts folded below the first level; a click on it shows its children, another hides them
    assert seen["before"] == [False, False]
    assert seen["afterClick"] == [True, True]
    assert seen["afterSecondClick"] == [False, False]
    assert seen["expandAll"] is True
    ops = flops.by_operator()
    assert sorted(seen["initial"]) == sorted(ops)
    assert seen["byName"] == [sorted(ops), "ascending"]
    heaviest = sorted(ops, key=lambda op: -ops[op])
    assert [ops[op] for op in seen["byFlops"][0]] == [ops[op] for op in heaviest]
    assert seen["byFlops"][1] == "descending"
    assert [ops[op] for op in seen["byFlopsReversed"][0]] == [ops[op] for op in heaviest[::-1]]
    assert seen["byFlopsReversed"][1] == "ascending"


def test_a_script_error_is_seen(page: tuple[str, FlopCountAnalysis], tmp_path: Path) -> None:
    # The harness itself: an error thrown by the page must reach the result, or the test above proves nothing.
    broken = page[0].replace("</main>", "</main><script>undefinedFunction();</script>", 1)
    seen = _render(broken, tmp_path)
    assert any("undefinedFunction" in e for e in seen["errors"])
