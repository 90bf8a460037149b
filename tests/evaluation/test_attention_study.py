"""`ktstream study` on a tiny configuration: every section for every family with 2 seeds; head ablation
changes predictions only inside its block; the paired test and the sparsity measure say what they should."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ktstream.cli.main import main
from ktstream.evaluation.attention_study import hoyer, paired_t
from ktstream.evaluation.head_ablation import masked_head
from ktstream.reports.study import SECTIONS


def test_study_writes_every_section_with_two_seeds(tmp_path):
    out = tmp_path / "study"
    assert main(["study", "--models", "dkt,sakt", "--model-arg", "dkt.hidden=8", "--model-arg", "sakt.dim=8",
                 "--model-arg", "sakt.heads=2", "--seeds", "2", "--learners", "20", "--length", "40",
                 "--distances", "1,5,20", "--pairs", "6", "--epochs", "1", "--patience", "1", "--threads", "1",
                 "-o", str(out)]) == 0
    (part,) = json.loads((out / "study.json").read_text())["parts"]
    assert [(r["family"], r["seed"]) for r in part["runs"]] == [("dkt", 0), ("sakt", 0), ("dkt", 1), ("sakt", 1)]
    sakt = [r for r in part["runs"] if r["family"] == "sakt"]
    for r in sakt:
        assert set(r["by_distance"]) <= {"1", "2-5", "6-20"} and r["by_distance"]
        assert all(0 <= v["topk_avg"] <= 1 for v in r["by_distance"].values())
        assert [h["head"] for h in r["heads"]] == [0, 1] and [a["head"] for a in r["head_ablation"]] == [0, 1]
        assert r["heatmaps"] and r["seconds_per_epoch"] > 0 and r["peak_memory_bytes"] > 0
        assert "1-2" in r["auc_by_history_length"]
    dkt = [r for r in part["runs"] if r["family"] == "dkt"]
    assert all(r["heads"] == [] and r["head_ablation"] == [] for r in dkt)
    assert all(v["topk_avg"] is None for r in dkt for v in r["by_distance"].values())
    fams = {f["family"]: f for f in part["families"]}
    assert fams["sakt"]["seeds"] == 2 and fams["sakt"]["test_auc_sd"] is not None
    assert {(t["a"], t["b"], t["metric"]) for t in part["paired_tests"]} == {("dkt", "sakt", "test_auc"),
                                                                             ("dkt", "sakt", "dependent_auc")}
    html = (out / "study.html").read_text()
    for s in SECTIONS:
        assert f'id="synthetic-{s}"' in html
    assert "data:image/png;base64" in html
    assert "memory growth bytes" in html  # each configuration's own training memory


def test_masked_head_changes_predictions_only_inside_the_block():
    from ktstream.data.histories import build_vocabularies, collate, encode
    from ktstream.data.simulate import simulate
    from ktstream.models import create

    recs = simulate(n_learners=4, mean_length=12, seed=0)
    items, concepts = build_vocabularies(recs)
    batch = collate(encode(recs, items, concepts))
    torch.manual_seed(0)
    model = create("sakt", n_items=len(items), n_concepts=len(concepts), dim=8, heads=2).eval()
    with torch.no_grad():
        before = model(batch)[0]
        with masked_head(model, 1):
            masked = model(batch)[0]
        after = model(batch)[0]
    assert torch.equal(before, after)
    assert not torch.allclose(before[batch.mask], masked[batch.mask])
    with pytest.raises(AssertionError):
        with masked_head(model, 2):
            pass


def test_paired_t_and_hoyer():
    r = paired_t([0.7, 0.72, 0.71], [0.6, 0.61, 0.63])
    assert r["n"] == 3 and r["mean_diff"] == pytest.approx(0.0967, abs=1e-3) and r["p"] < 0.01
    assert np.isnan(paired_t([0.7], [0.6])["p"])
    assert hoyer(np.array([0.0, 1.0, 0.0])) == pytest.approx(1.0)
    assert hoyer(np.full(5, 0.2)) == pytest.approx(0.0, abs=1e-12)


def test_pooled_test_pairs_family_means_per_seed():
    from ktstream.evaluation.attention_study import summarize_study

    auc = {("dkt", 0): 0.70, ("dkt", 1): 0.72, ("dkt", 2): 0.71, ("sakt", 0): 0.60, ("sakt", 1): 0.64,
           ("sakt", 2): 0.61, ("akt", 0): 0.62, ("akt", 1): 0.60, ("akt", 2): 0.63}
    runs = [{"family": f, "seed": s, "kind": "x", "test_auc": a, "parameters": 1} for (f, s), a in auc.items()]
    (pooled,) = [t for t in summarize_study(runs)["paired_tests"] if t["a"].startswith("recurrent")]
    assert pooled["b"] == "attention (sakt, akt)" and pooled["n"] == 3
    expected = paired_t([0.70, 0.72, 0.71], [0.61, 0.62, 0.62])
    assert pooled["mean_diff"] == pytest.approx(expected["mean_diff"]) and pooled["p"] == pytest.approx(expected["p"])
