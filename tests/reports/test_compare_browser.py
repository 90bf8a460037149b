"""The comparison table of `ktstream compare` and the study page fit a 1280 px Chromium window without
horizontal scroll (the same probe as the evaluation report's test)."""

from __future__ import annotations

import re

from ktstream.cli.compare import COLUMNS
from ktstream.reports.comparison import comparison_page
from ktstream.scoring.binary import LENGTH_LABELS
from tests.reports.test_report_browser import PROBE, WIDTH, chromium, needs_browser


def wide_rows() -> list[dict]:
    rows = []
    for ds, proto in (("assist2009_akt_pid:as-given", "benchmark"), ("cognitive_tutor_algebra_subset", "prequential"),
                      ("dkvmn_statics2011", "benchmark")):
        for model in ("dkt", "simplekt", "akt"):
            rows.append({"dataset": ds, "protocol": proto, "rows": "as given", "model": model, "seeds": 3,
                         "test_auc": 0.812345, "test_auc_sd": 0.0123, "auc_first5": 0.701234, "accuracy": 0.7712,
                         "log_loss": 0.4821, "random_label_auc": 0.5012, "random_label_bound": 0.0213,
                         "cpu_minutes": 104.55, "serve_us_per_event": 1234.5678, "state_bytes_per_learner": 1638400})
    return rows


@needs_browser
def test_the_comparison_table_fits_a_1280_px_window(tmp_path):
    plan = {"written": "2026-11-26T13:00:00Z", "budget": {"epochs": 30, "patience": 4, "seeds": 3},
            "selection": "learning rate by best validation score at seed 0; no test data read"}
    labels = LENGTH_LABELS
    lengths = [{"dataset": r["dataset"], "model": r["model"], **{label: 0.812345 for label in labels},
                **{f"n {label}": 1234567 for label in labels}} for r in wide_rows()]
    html = comparison_page(wide_rows(), COLUMNS, plan, (lengths, ["dataset", "model", *labels,
                                                                   *(f"n {label}" for label in labels)]))
    assert html.count("<table>") == 2
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = chromium(f"--window-size={WIDTH},900", "--dump-dom", probe.as_uri())
    got = {k: int(float(v)) for k, v in re.findall(r'data-([a-z-]+)="([0-9.]+)"', dom)}
    assert got["scroll-width"] <= WIDTH, f"the page scrolls sideways: {got['scroll-width']} px wide at {WIDTH} px"
    assert got["table-right"] <= got["client-width"], f"a table ends at {got['table-right']} px"
    assert got["table-overflow"] == 0, "the comparison table is wider than its box"
