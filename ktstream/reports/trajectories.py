"""Model-based figures for sample learners: concept mastery over time, and attention heatmaps.

Mastery. ``ktstream.serving.mastery.mastery_curves`` reads it off the serving
path after each of the learner's interactions: the mean predicted score
(P(correct); ordinal models: expected score / (K-1)) over the concept's items
seen in the events.
Where ``describe`` gives an IRT ability theta, it is drawn too. Dots mark the
learner's real attempts at the concept: filled correct (ordinal: upper half of
the scale), hollow not.

Attention. For attention families, ``ktstream.models.stepwise.attention_map``
steps the learner through the serving path and gives, per prediction, the weights over the cached past.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from ktstream.data.histories import collate, encode_learner, group_by_learner
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel
from ktstream.models.stepwise import attention_map
from ktstream.reports.figures import plt, to_png
from ktstream.serving.mastery import mastery_curves


def concept_label(concept: str, names: dict[str, str]) -> str:
    """A concept as a reader knows it: the data set's name for it (with the id), else "concept <id>".

    >>> concept_label("31", {"31": "Circumference"}), concept_label("31", {})
    ('Circumference (31)', 'concept 31')
    """
    name = names.get(concept)
    return f"{name} ({concept})" if name and name != concept else f"concept {concept}"


def sample_learners(records: Sequence[dict], n: int) -> list[str]:
    """The ``n`` learners with the most interactions (ties: id order), for a stable choice."""
    counts = Counter(r["learner_id"] for r in records if r.get("response") is not None)
    return [lid for lid, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def mastery_figure(model: KTModel, items: Vocabulary, concepts: Vocabulary, records: Sequence[dict],
                   learners: int = 3, per_learner: int = 4, items_per_concept: int = 10,
                   max_positions: int = 150, concept_names: dict[str, str] | None = None) -> bytes | None:
    """Curves of sample learners' first ``max_positions`` interactions (where learning shows; readable dots);
    concepts labelled with ``concept_names`` (the data set's own names) where given."""
    names = concept_names or {}
    chosen = set(sample_learners(records, learners))
    grouped = group_by_learner(r for r in records if r["learner_id"] in chosen)
    if not grouped:
        return None
    seen: dict[str, Counter] = {}
    for r in records:
        for c in r.get("concept_ids") or ():
            seen.setdefault(c, Counter())[r["item_id"]] += 1
    fig, axes = plt.subplots(len(grouped), 1, figsize=(8, 3.1 * len(grouped)), squeeze=False)
    score = "P(correct)" if model.n_categories == 2 else "expected score / (K-1)"
    for ax, lid in zip(axes[:, 0], sorted(grouped, key=lambda u: -len(grouped[u]))):
        total = len(grouped[lid])
        recs = grouped[lid][:max_positions]
        top = [c for c, _ in Counter(c for r in recs for c in r.get("concept_ids") or ()).most_common(per_learner)]
        if not top:
            ax.set_title(f"learner {lid}: no concept ids in the events")
            continue
        probes = {c: [i for i, _ in seen[c].most_common(items_per_concept)] for c in top}
        curves, theta = mastery_curves(model, items, concepts, recs, probes)
        x = np.arange(len(curves))
        for j, c in enumerate(top):
            line, = ax.plot(x, curves[:, j], lw=1.6, label=f"{concept_label(c, names)}, {len(probes[c])} items")
            hits = [(t + 1, r["response"]) for t, r in enumerate(recs) if c in (r.get("concept_ids") or ())
                    and r.get("response") is not None]
            for t, resp in hits:
                good = resp / (model.n_categories - 1) >= 0.5  # binary: correct; ordinal: upper half of the scale
                ax.plot(t, curves[t, j], "o", ms=5, color=line.get_color(), mfc=line.get_color() if good else "white")
        if theta is not None:
            tx = ax.twinx()
            tx.plot(x, theta, color="black", ls=":", lw=1, label="ability theta")
            tx.set_ylabel("theta (dotted)")
        shown = f"first {len(recs)} of {total}" if total > len(recs) else f"{total}"
        ax.set(ylim=(0, 1), ylabel=score, title=f"learner {lid}: {shown} interactions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    filled = "correct" if model.n_categories == 2 else "response in the upper half of the scale"
    axes[-1, 0].set_xlabel(f"interactions applied so far (dots: attempts at the concept; filled = {filled})")
    fig.suptitle(f"{model.name}: predicted {score} per concept, mean over the concept's items", y=1.0)
    fig.tight_layout()
    return to_png(fig)


def attention_figure(model: KTModel, items: Vocabulary, concepts: Vocabulary, records: Sequence[dict],
                     learners: int = 2, last: int = 40) -> bytes | None:
    """Heatmaps of the last ``last`` predictions of sample learners; None for models without attention."""
    chosen = set(sample_learners(records, learners))
    grouped = group_by_learner(r for r in records if r["learner_id"] in chosen)
    hists = {lid: collate([encode_learner(lid, recs, items, concepts)]) for lid, recs in grouped.items()}
    if not hists or "attention" not in model.predict(model.init_state(1), next(iter(hists.values())).at(0),
                                                     describe=True)[1]:
        return None
    fig, axes = plt.subplots(1, len(hists), figsize=(6.2 * len(hists), 5.6), squeeze=False)
    for ax, (lid, hist) in zip(axes[0], sorted(hists.items())):
        heat, _ = attention_map(model, hist)
        T = hist.shape[1]
        n, lo = min(last, T), T - min(last, T)
        shown = np.concatenate([heat[lo:, :1], heat[lo:, 1 + lo:]], 1)  # (n, 1 + n): column 0 = no history
        im = ax.imshow(shown, cmap="viridis", aspect="auto", interpolation="nearest")
        ticks = list(range(0, n, max(1, n // 8)))
        ax.set_xticks([0] + [1 + t for t in ticks[1:]], ["none"] + [str(lo + t + 1) for t in ticks[1:]])
        ax.set_yticks(ticks, [str(lo + t + 1) for t in ticks])
        ax.set(xlabel="past interaction read (column 'none': weight on no history)",
               ylabel="prediction for interaction", title=f"learner {lid}: last {n} of {T} predictions")
        fig.colorbar(im, ax=ax, fraction=0.046, label="attention (head mean, last layer)")
    fig.suptitle(f"{model.name}: what each prediction attended to (rows sum to 1 with the 'none' column)")
    fig.tight_layout()
    return to_png(fig)
