"""The HTML report in a real headless browser (Chromium): it fits a 1280 px window without horizontal scroll.

The page is rendered the way a reader opens it (a local file, images decoded), with the comparison
table of several runs with long labels, every figure and a leakage-gate table. A copy of the page
with a small script records, after load, how wide the document is and where each table ends; a
screenshot checks the window the browser drew. Skips, saying how to install one, where no Chromium
is installed (.ci/install-browser installs Debian's).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from ktstream.reports import ReportInputs, build_report, recompute
from tests.reports.report_runs import binary_run  # noqa: F401  (pytest fixture)

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless browser: apt-get install chromium "
                                                          "(what .ci/install-browser runs)")
WIDTH = 1280

PROBE = """<script>
window.addEventListener("load", () => {
  const doc = document.documentElement, tables = [...document.querySelectorAll("table")];
  document.body.dataset.scrollWidth = doc.scrollWidth;
  document.body.dataset.scrollHeight = doc.scrollHeight;
  document.body.dataset.clientWidth = doc.clientWidth;
  document.body.dataset.tableRight = Math.max(0, ...tables.map(t => t.getBoundingClientRect().right));
  document.body.dataset.tableOverflow = Math.max(0, ...tables.map(t => t.parentElement.scrollWidth
                                                                     - t.parentElement.clientWidth));
  document.body.dataset.images = [...document.images].filter(i => i.complete && i.naturalWidth > 0).length;
});
</script>"""


def chromium(*args: str, timeout: float = 120) -> str:
    out = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--virtual-time-budget=5000", *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def wide_report(run) -> str:
    """Three runs with the long labels real comparisons have, every figure, and a gate table."""
    r = run["result"]
    results = [dict(r, dataset="assist2009_skillbuilder_raw_2skills", protocol="prequential_time", minutes=12.3456),
               dict(r, dataset="dkvmn_assist2009_updated", protocol="benchmark", random_labels=True, minutes=0.65),
               dict(r, dataset="cognitive_tutor_algebra_subset", protocol="benchmark", minutes=104.5)]
    labels = ["dkt / assist2009_skillbuilder_raw_2skills fold 1, rows as given", "dkt coin-flip labels",
              "dkt / cognitive_tutor_algebra_subset"]
    gate = {"model": "dkt", "passed": True, "checks": [
        {"name": "future_perturbation", "status": "pass", "figure": 0.0, "bound": 1e-6,
         "rule": "max |delta p| over every position before the perturbed one",
         "detail": "checked 1,024 positions of 64 learners; " + "a long detail " * 20}]}
    model, items, concepts = run["model"], run["items"], run["concepts"]
    return build_report(ReportInputs(results, labels, recompute(model, items, concepts, run["test"]),
                                     (model, items, concepts), run["test"], [gate],
                                     concept_names={c: f"Skill named {c} in the data set's own file"
                                                    for c in concepts.to_json()}))


@needs_browser
def test_the_report_fits_a_1280_px_window(binary_run, tmp_path):
    html = wide_report(binary_run)
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")

    dom = chromium(f"--window-size={WIDTH},900", "--dump-dom", probe.as_uri())
    got = {k: int(float(v)) for k, v in re.findall(r'data-([a-z-]+)="([0-9.]+)"', dom)}
    assert got.get("images", 0) >= 4, f"the figures did not load: {got}"
    assert got["scroll-width"] <= WIDTH, f"the page scrolls sideways: {got['scroll-width']} px wide at {WIDTH} px"
    assert got["table-right"] <= got["client-width"], f"a table ends at {got['table-right']} px"
    assert got["table-overflow"] == 0, "a table is wider than its box"

    height = min(got["scroll-height"], 16_000)
    shot = tmp_path / "report.png"
    chromium(f"--window-size={WIDTH},{height}", f"--screenshot={shot}", page.as_uri())
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (WIDTH, height), "the screenshot is the whole page at 1280 px"
    import io

    import matplotlib.image as mpimg

    pixels = mpimg.imread(io.BytesIO(png), format="png")
    assert pixels[..., :3].std() > 0.05, "the browser drew a blank page"


def test_minutes_print_alike_in_results_md_and_the_html(binary_run):
    """Minutes are stored rounded to hundredths; both the text table and the HTML show them so."""
    from ktstream.reports.report import comparison_row
    from ktstream.scoring.binary import format_table

    row = comparison_row("x", dict(binary_run["result"], minutes=0.65))
    assert row["minutes"] == "0.65"
    text = format_table([{"minutes": 0.65, "cpu_minutes": 1.5, "auc": 0.65}], ["minutes", "cpu_minutes", "auc"])
    assert text.splitlines()[-1] == "| 0.65 | 1.50 | 0.6500 |"


def test_concepts_are_labelled_with_the_data_sets_names(binary_run):
    from ktstream.reports import trajectories

    model, items, concepts = binary_run["model"], binary_run["items"], binary_run["concepts"]
    names = {c: f"name-of-{c}" for c in concepts.to_json()}
    labels = trajectories.concept_label("7", {"7": "name-of-7"}), trajectories.concept_label("7", {})
    assert labels == ("name-of-7 (7)", "concept 7")
    html = build_report(ReportInputs([binary_run["result"]], model=(model, items, concepts),
                                     records=binary_run["test"], concept_names=names))
    assert "names from the data set" in html


def test_the_browser_install_step_is_part_of_the_test_command():
    """CI runs .ci/run, which must run the README's test command; both install the browser first."""
    root = Path(__file__).resolve().parents[2]
    command = "bash .ci/install-browser && pip install -e '.[test]' && python -m pytest -q"
    assert command in (root / ".ci" / "run").read_text() and command in (root / "README.md").read_text()
    assert "apt-get install" in (root / ".ci" / "install-browser").read_text()


def test_reliability_bins_use_wilson_intervals_and_hide_sparse_bins():
    import numpy as np

    from ktstream.reports.figures import wilson_interval

    low, high = wilson_interval(np.array([0, 3, 500]), np.array([3, 3, 1000]))
    assert low[0] == 0 and 0.4 < high[0] < 0.6, "0 of 3 is not certainly 0"
    assert 0.4 < low[1] < 0.5 and high[1] == 1, "3 of 3 is not certainly 1 (the normal approximation says 1 +/- 0)"
    assert abs(low[2] - 0.469) < 0.001 and abs(high[2] - 0.531) < 0.001


def test_ktstream_report_reads_the_concept_names_beside_the_data_set(tmp_path, monkeypatch):
    from ktstream.cli.report import _concept_names

    (tmp_path / "toyset").mkdir()
    (tmp_path / "toyset" / "toy_sname_sid").write_text("Circumference\t31\nRounding\t38\n", encoding="utf-8")
    monkeypatch.setenv("KTSTREAM_DATA", str(tmp_path))
    assert _concept_names({"dataset": "toyset"}) == {"31": "Circumference", "38": "Rounding"}
    assert _concept_names({"dataset": "elsewhere"}) == {} and _concept_names({}) == {}
