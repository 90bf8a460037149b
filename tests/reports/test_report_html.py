"""`ktstream report` on real (tiny) evaluation runs: one HTML file, every plot a non-empty PNG."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
import torch

from ktstream.cli.main import main
from ktstream.data.histories import collate, encode
from ktstream.models.stepwise import predict_stepwise
from ktstream.reports import Predictions, ReportInputs, build_report, recompute
from tests.reports.report_runs import attention_run, binary_run, ordinal_run  # noqa: F401  (pytest fixtures)

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]*)">')


def images(html: str) -> dict[str, np.ndarray]:
    """alt text -> decoded RGBA pixels of every embedded image."""
    import matplotlib.image as mpimg

    out = {}
    for data, alt in IMG.findall(html):
        raw = base64.b64decode(data)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n", f"{alt} is not a PNG"
        out[alt] = mpimg.imread(io.BytesIO(raw), format="png")
    return out


def assert_drawn(pixels: np.ndarray, alt: str) -> None:
    h, w = pixels.shape[:2]
    assert h >= 200 and w >= 300, f"{alt}: {w}x{h} px is too small to read"
    rgb = pixels[..., :3].reshape(-1, 3)
    assert rgb.std(0).max() > 0.05, f"{alt} is blank"
    colourful = (rgb.max(1) - rgb.min(1)) > 0.2  # lines, markers, bars: not only black/grey/white
    assert colourful.mean() > 0.002, f"{alt} draws no data"


def run_cli(run, tmp_path, *extra) -> str:
    out = tmp_path / "report.html"
    assert main(["report", str(run["folder"] / "results.json"), "-o", str(out), "--checkpoint",
                 str(run["folder"] / "ckpt"), "--events", str(run["folder"] / "test.jsonl"), *extra]) == 0
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "http://" not in html and "https://" not in html  # self-contained
    return html


def test_report_of_a_binary_run_has_every_plot(binary_run, tmp_path):
    saved = tmp_path / "predictions.parquet"
    html = run_cli(binary_run, tmp_path, "--save-predictions", str(saved))
    imgs = images(html)
    assert {"AUC by history length", "training curve", "reliability diagram", "AUC over event time",
            "mastery trajectories"} <= set(imgs), sorted(imgs)
    for alt, px in imgs.items():
        assert_drawn(px, alt)
    auc = binary_run["result"]["test"]["auc"]
    assert f"{auc:.4f}" in html, "the comparison table shows the run's test AUC"
    assert "has no attention weights" in html  # DKT: said, not silently missing
    assert len(Predictions.load(saved)) == binary_run["result"]["test"]["n"]


def test_predictions_are_the_served_predictions(binary_run):
    """Recomputed rows equal the serving path's predictions for the same events, learner by learner."""
    model, items, concepts, test = binary_run["model"], binary_run["items"], binary_run["concepts"], binary_run["test"]
    p = recompute(model, items, concepts, test)
    assert len(p) == binary_run["result"]["test"]["n"]
    histories = encode(test, items, concepts)
    served, _ = predict_stepwise(model.eval(), collate(histories))
    for b, h in enumerate(histories[:5]):
        rows = p.learner_ids == h.learner_id
        np.testing.assert_allclose(p.probs[rows], served[b, : len(h)].numpy(), atol=1e-5)
        mine = sorted((r for r in test if r["learner_id"] == h.learner_id), key=lambda r: r["event_time"])
        assert list(p.item_ids[rows]) == [r["item_id"] for r in mine]
        assert list(p.responses[rows]) == [r["response"] for r in mine]
    assert np.allclose(p.probs.sum(1), 1.0, atol=1e-5)


def test_attention_model_gets_heatmaps(attention_run, tmp_path):
    html = run_cli(attention_run, tmp_path)
    imgs = images(html)
    assert "attention heatmaps" in imgs
    assert_drawn(imgs["attention heatmaps"], "attention heatmaps")


def test_ordinal_model_gets_qwk_and_category_calibration(ordinal_run, tmp_path):
    html = run_cli(ordinal_run, tmp_path)
    assert "<td>qwk</td>" in html and "<td>threshold_auc</td>" in html
    imgs = images(html)
    assert_drawn(imgs["per-category calibration"], "per-category calibration")
    assert "theta" in html or "mastery trajectories" in imgs


def test_comparison_and_gate_sections(binary_run, attention_run, tmp_path):
    from ktstream.leakage import CheckResult, GateReport

    gate = GateReport("dkt", [CheckResult.judge("future_perturbation", 0.0, 1e-6, True, "max |dp| <= bound"),
                              CheckResult.judge("random_labels", 0.71, 0.55, False, "auc <= bound"),
                              CheckResult.not_applicable("attention_masking", "model has no attention_maps")])
    path = tmp_path / "gate.json"
    path.write_text(gate.to_json())
    out = tmp_path / "cmp.html"
    assert main(["report", str(binary_run["folder"] / "results.json"), str(attention_run["folder"] / "results.json"),
                 "--label", "dkt", "--label", "sakt", "--gate", str(path), "-o", str(out)]) == 0
    html = out.read_text()
    rows = re.findall(r"<tr><td>(dkt|sakt)</td>", html)
    assert rows == ["dkt", "sakt"]
    assert '<span class="fail">FAILED</span>' in html and '<span class="fail">FAIL</span>' in html
    assert '<span class="na">N/A</span>' in html
    assert "No per-prediction data" in html, "without predictions the report says what to pass"
    assert_drawn(images(html)["AUC by history length"], "AUC by history length")


def test_predictions_parquet_round_trip(binary_run, tmp_path):
    p = recompute(binary_run["model"], binary_run["items"], binary_run["concepts"], binary_run["test"])
    q = Predictions.load(p.save(tmp_path / "p.parquet"))
    for name in ("learner_ids", "positions", "times", "item_ids", "responses", "probs"):
        np.testing.assert_array_equal(getattr(p, name), getattr(q, name))


def test_report_needs_a_result():
    with pytest.raises(AssertionError, match="at least one results.json"):
        build_report(ReportInputs([]))


def test_prequential_report_scores_the_test_window_only(tmp_path):
    from ktstream.data.eventlog import write_events
    from ktstream.data.simulate import simulate
    from ktstream.evaluation.protocols import prequential_time
    from ktstream.models import family
    from ktstream.models.checkpoint import save_checkpoint
    from ktstream.training.trainer import TrainConfig

    torch.set_num_threads(1)
    records = simulate(n_learners=40, mean_length=20, seed=2)
    times = np.array([r["event_time"] for r in records])
    c1, c0 = (int(np.quantile(times, q)) for q in (0.6, 0.8))
    result = prequential_time("dkt", records, c1, c0, TrainConfig(epochs=1, progress=False),
                              dict(family("dkt").tiny_config))
    result.update(dataset="simulated-stream")
    (tmp_path / "results.json").write_text(json.dumps(result, default=float))
    # prequential_time keeps its model internal (no ``artifacts`` as benchmark has): a model with the
    # protocol's vocabularies stands in; the test is about which rows the report scores.
    from ktstream.data.histories import build_vocabularies
    from ktstream.models import create

    items, concepts = build_vocabularies([r for r in records if r["event_time"] < c1])
    torch.manual_seed(0)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), **family("dkt").tiny_config)
    save_checkpoint(tmp_path / "ckpt", model, items, concepts, "v")
    write_events(records, tmp_path / "all.jsonl")
    saved = tmp_path / "p.parquet"
    assert main(["report", str(tmp_path / "results.json"), "--checkpoint", str(tmp_path / "ckpt"), "--events",
                 str(tmp_path / "all.jsonl"), "--save-predictions", str(saved), "-o", str(tmp_path / "r.html")]) == 0
    p = Predictions.load(saved)
    assert len(p) == result["counts"]["test_interactions"]
    assert (p.times * 1000.0 >= c0).all()
