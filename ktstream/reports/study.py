"""The attention study (``ktstream study``) as one HTML page: one part per data set, each with the same
sections (families over seeds and paired tests, alignment by distance, AUC by history length, heads:
entropy, sparsity and ablation, heatmaps, cost)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ktstream.reports.figures import plt, to_png
from ktstream.reports.html import figure, page, paragraph, section, table

SECTIONS = ("families", "alignment", "history-length", "heads", "heatmaps", "cost")


def _families(part: dict) -> str:
    cols = ["family", "kind", "seeds", "test_auc", "test_auc_sd", "dependent_auc", "dependent_auc_sd"]
    tests = table(part["paired_tests"], ["a", "b", "metric", "n", "mean_diff", "t", "p"]) if part["paired_tests"] \
        else paragraph("No recurrent/attention pair to test.", "meta")
    return section(f"{part['name']}: families over seeds", table(part["families"], cols), tests,
                   paragraph("Mean and standard deviation over seeds; paired t-test over seeds of a - b (same seed: "
                             "same learners and initialisation seed). dependent AUC: only on events whose answer "
                             "depends on an earlier one (synthetic data).", "meta"), anchor=f"{part['key']}-families")


def _alignment(part: dict) -> str:
    rows = []
    for r in part["runs"]:
        for bucket, v in (r.get("by_distance") or {}).items():
            rows.append({"family": r["family"], "seed": r["seed"], "distance": bucket, **v})
    if not rows:
        return section(f"{part['name']}: attention alignment by distance",
                       paragraph("No ground truth on this data set (real data): see the synthetic part.", "note"),
                       anchor=f"{part['key']}-alignment")
    k = part["runs"][0].get("topk", 3)
    return section(f"{part['name']}: AUC and top-{k} attention alignment by distance",
                   table(rows, ["family", "seed", "distance", "n", "auc", "topk_avg", "topk_best_head"]),
                   paragraph(f"Per distance d between a dependent event and its prerequisite: AUC on those events; "
                             f"topk avg: share whose head-averaged top-{k} attention holds the true position; topk "
                             f"best head: the same for the best single head. '-': the family has no attention "
                             f"(DKT).", "meta"), anchor=f"{part['key']}-alignment")


def _by_length(part: dict) -> str:
    rows = []
    for r in part["runs"]:
        for length, v in (r.get("auc_by_history_length") or {}).items():
            rows.append({"family": r["family"], "seed": r["seed"], "history_length": length, **v})
    return section(f"{part['name']}: AUC by history length", table(rows, ["family", "seed", "history_length", "n",
                                                                          "auc"]),
                   anchor=f"{part['key']}-history-length")


def _heads(part: dict) -> str:
    rows = []
    for r in part["runs"]:
        abl = {a["head"]: a for a in r.get("head_ablation", [])}
        for h in r.get("heads", []):
            rows.append({"family": r["family"], "seed": r["seed"], "head": h["head"], "entropy": h["entropy"],
                         "sparsity": h["sparsity"], "auc_head_masked": abl.get(h["head"], {}).get("auc"),
                         "delta_auc": abl.get(h["head"], {}).get("delta_auc")})
    body = table(rows, ["family", "seed", "head", "entropy", "sparsity", "auc_head_masked", "delta_auc"]) if rows \
        else paragraph("No family here describes attention.", "note")
    return section(f"{part['name']}: heads (entropy, sparsity, ablation)", body,
                   paragraph("Entropy (nats) and Hoyer sparsity (0 uniform, 1 one-hot) of each head's weights on the "
                             "visible past, mean over predictions. Ablation: test AUC with the head zeroed in every "
                             "attention layer at inference (a hook on the output projection), and its change.", "meta"),
                   anchor=f"{part['key']}-heads")


def heatmap_png(maps: list[dict], title: str) -> bytes:
    fig, axes = plt.subplots(1, len(maps), figsize=(4.2 * len(maps), 3.8), squeeze=False)
    for ax, m in zip(axes[0], maps):
        heat = np.asarray(m["heat"])
        ax.imshow(heat, aspect="auto", cmap="viridis", vmin=0)
        for t, p in m.get("truth", []):
            ax.plot(1 + p, t, "r+", markersize=5)
        ax.set_title(f"{title}: {m['learner']}", fontsize=8)
        ax.set_xlabel("key (column 0: no history)", fontsize=7)
        ax.set_ylabel("prediction t", fontsize=7)
    return to_png(fig)


def _heatmaps(part: dict) -> str:
    parts = []
    for r in part["runs"]:
        if r["seed"] == part["runs"][0]["seed"] and r.get("heatmaps"):
            parts.append(figure(heatmap_png(r["heatmaps"], r["family"]), f"{r['family']} heatmaps",
                                f"{r['family']}, seed {r['seed']}: row t, the attention behind the prediction for t "
                                f"(head average); red +: the true prerequisite position."))
    return section(f"{part['name']}: heatmaps", *(parts or [paragraph("No attention to draw.", "note")]),
                   anchor=f"{part['key']}-heatmaps")


def _cost(part: dict) -> str:
    return section(f"{part['name']}: training time and memory",
                   table(part["families"], ["family", "parameters", "seconds_per_epoch", "seconds_per_epoch_sd",
                                            "peak_memory_bytes", "memory_growth_bytes"]),
                   paragraph(f"Memory: {part['runs'][0].get('memory_kind')}, during training; growth: above the "
                             f"memory in use when training began (the configuration's own need).", "meta"),
                   anchor=f"{part['key']}-cost")


def study_page(parts: list[dict[str, Any]], meta: str) -> str:
    """``parts``: per data set, ``attention_study.study``'s result with ``name`` and ``key`` added."""
    sections = []
    for part in parts:
        sections += [_families(part), _alignment(part), _by_length(part), _heads(part), _heatmaps(part), _cost(part)]
    subtitle = f"generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {meta}"
    return page("ktstream attention study: recurrent vs attention", subtitle, sections)
