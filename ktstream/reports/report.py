"""One evaluation (or several) as one self-contained HTML page.

Inputs, each optional but the first:

- ``results``: the results.json of one or more ``ktstream evaluate`` runs; the
  first is the report's subject, all of them fill the comparison table and the
  AUC-by-history-length figure;
- ``predictions``: the subject's per-prediction data (`Predictions`), for the
  reliability diagram, AUC over event time and the ordinal metrics;
- ``model`` + ``records``: the subject's model (with its vocabularies) and the
  test events, for mastery trajectories and attention heatmaps;
- ``gates``: leakage-gate reports (``GateReport.to_dict()`` JSON).

A section whose input is missing says what to pass to get it, rather than vanish.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ktstream.reports import figures, trajectories
from ktstream.reports.html import Raw, escape, figure, page, paragraph, section, table
from ktstream.reports.predictions import Predictions
from ktstream.scoring.ordinal import ordinal_report

MASTERY_CAPTION = ("Concept mastery as the model sees it, for the learners with the longest histories. After each "
                   "interaction the model is asked, without changing its state, for its P(correct) on up to 10 items "
                   "of each concept the learner practised most; a line is the mean over those items (ordinal models: "
                   "expected score / (K-1)). Dots are the learner's own attempts at that concept, placed after the "
                   "attempt was applied: filled when correct, hollow when not. The dotted line, where present, is "
                   "the IRT ability theta (right axis).")
COMPARE = ["label", "dataset", "protocol", "model", "labels", "n", "auc", "accuracy", "log_loss", "rmse", "brier",
           "best_epoch", "minutes"]


@dataclass
class ReportInputs:
    results: Sequence[dict[str, Any]]
    labels: Sequence[str] = ()
    predictions: Predictions | None = None
    model: Any = None  # (KTModel, items Vocabulary, concepts Vocabulary)
    records: Sequence[dict] | None = None
    gates: Sequence[dict[str, Any]] = field(default_factory=list)
    title: str | None = None
    concept_names: dict[str, str] = field(default_factory=dict)  # concept id -> the data set's name for it


def comparison_row(label: str, r: dict[str, Any]) -> dict[str, Any]:
    t = r.get("test", {})
    return {"label": label, "dataset": r.get("dataset"), "protocol": r.get("protocol"), "model": r.get("model"),
            "labels": "coin flips" if r.get("random_labels") else "real", "n": t.get("n"), "auc": t.get("auc"),
            "accuracy": t.get("accuracy"), "log_loss": t.get("log_loss"), "rmse": t.get("rmse"),
            "brier": t.get("brier"), "best_epoch": r.get("fit", {}).get("best_epoch"),
            "minutes": None if r.get("minutes") is None else f"{r['minutes']:.2f}"}  # stored to hundredths


def _comparison(inp: ReportInputs, labels: list[str]) -> str:
    rows = [comparison_row(lab, r) for lab, r in zip(labels, inp.results)]
    notes = ("benchmark: the dataset's own split files; prequential_time: trained before C1, selected on [C1, C0), "
             "tested after C0, each test event predicted before it was learned from. Figures from different "
             "datasets or protocols are not comparable. AUC on 'coin flips' labels must be near 0.5.")
    warnings = [paragraph(f"Warning, {lab}: {r['repeated_answers']['warning']}", "note")
                for lab, r in zip(labels, inp.results) if (r.get("repeated_answers") or {}).get("warning")]
    return section("Model comparison", *warnings, table(rows, COMPARE), paragraph(notes, "meta"),
                   anchor="comparison")


def _by_length(inp: ReportInputs, labels: list[str]) -> str:
    series = [(lab, r.get("test", {}).get("auc_by_history_length")) for lab, r in zip(labels, inp.results)]
    png = figures.auc_by_length(series)
    if png is None:
        return section("AUC by history length", paragraph("The results carry no auc_by_history_length.", "note"))
    caption = ("Test AUC of predictions at each position of a learner's history. Early positions have little "
               "history, so AUC there is normally lower; a model much better on the first interactions than on "
               "long histories is suspect (the short-history check of the leakage gate).")
    parts = [figure(png, "AUC by history length", caption)]
    fit = inp.results[0].get("fit", {})
    curve = figures.training_curve(fit.get("history", []), f"{labels[0]}: training (best epoch {fit.get('best_epoch')})")
    if curve:
        parts.append(figure(curve, "training curve", "Training loss and the validation metric per epoch; the "
                            "weights of the best validation epoch were kept (the test split played no part)."))
    return section("AUC by history length and training", *parts, anchor="history-length")


def _calibration(inp: ReportInputs, label: str) -> str:
    p = inp.predictions
    if p is None or len(p) == 0:
        return section("Calibration and AUC over time", paragraph(
            "No per-prediction data: pass --checkpoint (DIR/ckpt of ktstream evaluate -o DIR) and --events (the test "
            "events), or --predictions predictions.parquet, to get the reliability diagram and AUC over time.", "note"))
    parts = [figure(figures.reliability(p.p_correct, p.correct, title=f"{label}: reliability"),
                    "reliability diagram", "Each point: predictions in one P(correct) bin; its height is the share "
                    "that was correct, with its 95% Wilson interval. Points on the diagonal mean the probabilities "
                    "can be taken at face value; below it the model is over-confident, above it under-confident. "
                    "Bins with fewer than 30 predictions are not drawn (grey in the count panel below, which "
                    "shows how many predictions each bin holds); the calibration error counts every bin.")]
    over_time = figures.auc_over_time(p.times, p.p_correct, p.correct) if p.has_times else None
    parts.append(figure(over_time, "AUC over event time", "Test AUC per slice of event time with a 95% interval; "
                        "a downward slope means the model ages (the fine-tuning cycle exists for that).")
                 if over_time else paragraph("AUC over event time: the test events carry no event times "
                                             "(order-only data set) or too few predictions.", "meta"))
    if p.n_categories > 2:
        rep = ordinal_report(p.probs, p.responses)
        rows = [{"metric": k, "value": v if not isinstance(v, list) else ", ".join(f"{a:.4f}" for a in v)}
                for k, v in rep.items() if k != "calibration"]
        parts += [table(rows, ["metric", "value"]),
                  table(rep["calibration"], ["category", "mean_predicted", "observed", "ece"]),
                  figure(figures.category_calibration(p.probs, p.responses), "per-category calibration",
                         "Ordinal model: predicted P(Y = k) against the observed share of category k, per k. "
                         "QWK weighs disagreements by squared distance on the scale.")]
    return section("Calibration and AUC over time", *parts, anchor="calibration")


def _model_figures(inp: ReportInputs) -> str:
    if inp.model is None or not inp.records:
        return section("Learners: mastery and attention", paragraph(
            "No model and events given: pass --checkpoint and --events for per-learner figures.", "note"))
    model, items, concepts = inp.model
    parts = []
    mastery = trajectories.mastery_figure(model, items, concepts, inp.records, concept_names=inp.concept_names)
    if mastery:
        named = (" Concepts carry their names from the data set (id in brackets)." if inp.concept_names else
                 " The data set ships no concept names: concepts are shown by id.")
        parts.append(figure(mastery, "mastery trajectories", MASTERY_CAPTION + named))
    heat = trajectories.attention_figure(model, items, concepts, inp.records)
    parts.append(figure(heat, "attention heatmaps", "Row t: the weights behind the prediction for interaction t "
                        "over the interactions before it (causal: nothing right of the diagonal).") if heat else
                 paragraph(f"{model.name} has no attention weights to show.", "meta"))
    return section("Learners: mastery and attention", *parts, anchor="learners")


def _gates(inp: ReportInputs) -> str:
    if not inp.gates:
        return section("Leakage gate", paragraph("No gate report given (ktstream check-leakage ... -o FILE, "
                                                 "then --gate FILE).", "note"))
    parts = []
    for g in inp.gates:
        verdict = Raw('<span class="pass">PASSED</span>' if g.get("passed") else '<span class="fail">FAILED</span>')
        rows = [{**c, "status": Raw(f'<span class="{ {"pass": "pass", "fail": "fail"}.get(c["status"], "na")}">'
                                    f'{escape(c["status"].upper())}</span>')} for c in g.get("checks", [])]
        parts.append(f"<h3>{escape(g.get('model', '?'))}: {verdict}</h3>")
        parts.append(table(rows, ["name", "status", "figure", "bound", "rule", "detail"]))
        parts += [paragraph(f"{k}: {v}", "meta") for k, v in g.get("labels", {}).items()]
    return section("Leakage gate", *parts, anchor="gate")


def build_report(inp: ReportInputs) -> str:
    assert inp.results, "a report needs at least one results.json"
    labels = list(inp.labels) or [f"{r.get('model')} / {r.get('dataset')}" for r in inp.results]
    subject = inp.results[0]
    title = inp.title or f"ktstream evaluation: {subject.get('model')} on {subject.get('dataset')}"
    counts = ", ".join(f"{k} {v:,}" for k, v in subject.get("counts", {}).items() if isinstance(v, int))
    subtitle = f"generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; subject {labels[0]}: {counts}"
    return page(title, subtitle, [_comparison(inp, labels), _by_length(inp, labels), _calibration(inp, labels[0]),
                                  _model_figures(inp), _gates(inp)])
