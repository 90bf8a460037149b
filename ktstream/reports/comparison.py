"""The comparison table of ``ktstream compare`` as an HTML section (and a page of its own).

The table uses `html.table` and the report's style sheet: text cells wrap and numbers stay on one line,
so the table fits a 1280 px page instead of scrolling; headers are short and the notes say what each
column means.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from ktstream.reports.html import page, paragraph, section, table

#: column -> its short header
HEADERS = {"dataset": "data set", "protocol": "protocol", "rows": "rows", "model": "model", "seeds": "seeds",
           "test_auc": "AUC", "test_auc_sd": "AUC sd", "auc_first5": "AUC first 5", "accuracy": "acc.",
           "log_loss": "log loss", "random_label_auc": "AUC coin flips", "random_label_bound": "bound",
           "cpu_minutes": "CPU min", "serve_us_per_event": "µs / event", "state_bytes_per_learner": "state B"}
NOTES = ("AUC, accuracy and log loss: test split, mean over seeds (AUC sd: standard deviation over seeds). "
         "AUC first 5: on each learner's first 5 interactions, next to AUC overall; a model much better there than "
         "overall is suspect (the short-history anomaly that exposed published leaks); under prequential '-' where "
         "no test learner starts after C0. AUC coin flips: a fresh model trained and tested on coin-flip labels "
         "(the leakage gate's random-label check); it must stay within 0.5 +/- bound. CPU min: CPU minutes of the "
         "real-label run (training and test). µs / event: the serving path, predict then update over the first 500 "
         "interactions of the 64 longest test histories batched, per learner-step (a full batch's cost per event), "
         "CPU. state B: bytes of model state per learner after them. benchmark: the data set's own splits; "
         "prequential: trained before C1, selected on [C1, C0), tested after C0.")


#: the note under the table of AUC by history length
LENGTH_NOTE = ("Test AUC by the position of the predicted interaction in its learner's history, mean over seeds; "
               "n: the bucket's test predictions. '-' where a bucket has none or one class only (under prequential "
               "the early buckets are empty when no test learner starts after C0).")


def comparison_section(rows: Sequence[dict[str, Any]], columns: Sequence[str], plan: dict | None = None,
                       by_length: tuple[Sequence[dict[str, Any]], Sequence[str]] | None = None) -> str:
    """The table, its notes and the plan's budget; with ``by_length`` (rows, columns), AUC by history length."""
    parts = [table(rows, columns, [HEADERS.get(c, c.replace("_", " ")) for c in columns]),
             paragraph(NOTES, "meta")]
    if by_length is not None:
        length_rows, length_columns = by_length
        headers = [HEADERS.get(c, c) for c in length_columns]
        parts += [table(length_rows, length_columns, headers), paragraph(LENGTH_NOTE, "meta")]
    if plan is not None:
        budget = json.dumps(plan.get("budget", {}))
        parts.append(paragraph(f"Plan written {plan.get('written')} before any test data was read; budget {budget}; "
                               f"{plan.get('selection', '')}.", "meta"))
    return section("Comparison table", *parts, anchor="comparison-table")


def comparison_page(rows: Sequence[dict[str, Any]], columns: Sequence[str], plan: dict | None = None,
                    by_length: tuple[Sequence[dict[str, Any]], Sequence[str]] | None = None) -> str:
    subtitle = f"generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(rows)} rows"
    return page("ktstream comparison", subtitle, [comparison_section(rows, columns, plan, by_length)])
