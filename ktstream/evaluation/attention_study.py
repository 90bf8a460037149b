"""Recurrent against attention families, the way a careful study compares them (``ktstream study``).

Per data set, family and seed (`study_run`): the ordinary trainer (early stopping on valid), then on the
test learners

- test AUC and AUC by history length (`scoring.binary.summarize`);
- with a ground truth (`ktstream.data.simulate_prerequisite`): AUC on the dependent events and the share of
  them whose top-k attention (head average, and the best single head) contains the true position, by
  distance d;
- attention entropy (nats) and sparsity per head, over every prediction with a history among each test
  learner's first 400 (``described_steps``): the weights on the visible past renormalised to sum 1;
  sparsity is Hoyer's (sqrt(n) - L1/L2) / (sqrt(n) - 1), 0 uniform, 1 one-hot;
- head ablation: test AUC with one head zeroed in every attention layer (`head_ablation.masked_head`)
  minus test AUC;
- attention heatmaps of the first test learners (`stepwise.attention_map`);
- seconds per training epoch, parameters, and the training's peak memory and its growth above the memory
  in use before it (`peak_memory`: CUDA's peak allocation on a GPU, the run's own peak RSS on Linux).

`summarize_study` gives mean and standard deviation over seeds and a paired t-test over seeds for every
(recurrent, attention) pair of families on test AUC and on dependent-event AUC, and one for recurrence
against attention as families (per seed, the mean over each side's families).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Sequence

import numpy as np
import torch

from ktstream.data.histories import LearnerHistory, build_vocabularies, collate, encode
from ktstream.evaluation.head_ablation import head_count, masked_head
from ktstream.evaluation.peak_memory import peak_memory
from ktstream.evaluation.protocols import n_categories_of
from ktstream.models import create
from ktstream.models.base import where_state
from ktstream.models.stepwise import attention_map
from ktstream.scoring.binary import auc, summarize
from ktstream.training.trainer import TrainConfig, fit, predict_histories, score

#: families whose prediction runs through a recurrent state (the rest attend over a window)
RECURRENT = ("dkt", "atkt", "dkvmn")
#: distance buckets of the alignment table
BUCKETS = ((1, 1), (2, 5), (6, 20), (21, 50), (51, 100), (101, 200))


def bucket_of(d: int) -> str:
    """The label of the distance bucket ``d`` falls in.

    >>> bucket_of(1), bucket_of(7), bucket_of(200)
    ('1', '6-20', '101-200')
    """
    for lo, hi in BUCKETS:
        if lo <= d <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
    return f">{BUCKETS[-1][1]}"


def hoyer(w: np.ndarray) -> float:
    """Hoyer sparsity of non-negative weights: 0 uniform, 1 one-hot (NaN for fewer than 2).

    >>> hoyer(np.array([1.0, 0, 0, 0])), round(hoyer(np.ones(4)), 6)
    (1.0, 0.0)
    """
    n = len(w)
    l2 = float(np.sqrt((w ** 2).sum()))
    if n < 2 or l2 == 0:
        return float("nan")
    return (math.sqrt(n) - float(w.sum()) / l2) / (math.sqrt(n) - 1)


@torch.inference_mode()
def described_steps(model, histories: Sequence[LearnerHistory], batch: int = 64, steps: int = 400):
    """Per learner, per position of its first ``steps``: (head weights (H, W), slot positions (W,)) from
    ``predict(describe=True)`` on the serving path (None where the model describes no attention). Every
    event is its own step here."""
    out = []
    for g in range(0, len(histories), batch):
        part = [h.slice(0, steps) for h in histories[g: g + batch]]
        h = collate(part)
        B, T = h.shape
        state = model.init_state(B)
        at_step_start = state
        rows: list[list] = [[] for _ in part]
        for t in range(T):
            query = h.at(t)
            at_step_start = where_state(h.step_start[:, t] == t, state, at_step_start)
            _, info = model.predict(at_step_start, query, describe=True)
            heads = info.get("attention_heads")
            if heads is None and "attention" in info:
                heads = info["attention"].unsqueeze(1)
            for i in range(B):
                if t < len(part[i]):
                    rows[i].append(None if heads is None else (heads[i].float().numpy(),
                                                               info["attention_positions"][i].numpy()))
            valid = h.mask[:, t] & (h.responses[:, t] >= 0)
            if bool(valid.any()):
                state = where_state(valid, model.update(state, query), state)
        out += rows
    return out


def _test_auc(model, test, positions: bool = False):
    y, p, pos = score(test, predict_histories(model, test, 64, "cpu"))
    yb, pb = (y >= 1).astype(np.int64), 1.0 - p[:, 0]
    return summarize(yb, pb, pos) if positions else auc(yb, pb)


def study_run(family: str, kwargs: dict, train: Sequence[dict], valid: Sequence[dict], test: Sequence[dict],
              cfg: TrainConfig, truth: dict[str, tuple[int, int]] | None = None, topk: int = 3,
              heatmaps: int = 2, heat_len: int = 60) -> dict[str, Any]:
    """One family, one seed: the figures of the module docstring (JSON-ready)."""
    items, concepts = build_vocabularies(train)
    tr, va, te = (encode(r, items, concepts) for r in (train, valid, test))
    torch.manual_seed(cfg.seed)
    model = create(family, n_items=len(items), n_concepts=len(concepts), n_categories=n_categories_of(train),
                   **kwargs)
    cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    with peak_memory(cuda) as memory:
        fitted = fit(model, tr, va, cfg)
    model.cpu().eval()
    summary = _test_auc(model, te, positions=True)
    out: dict[str, Any] = {
        "family": family, "seed": cfg.seed, "kind": "recurrent" if family in RECURRENT else "attention",
        "test_auc": summary["auc"], "auc_by_history_length": summary["auc_by_history_length"],
        "seconds_per_epoch": fitted.seconds / max(len(fitted.history), 1), "epochs": len(fitted.history),
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak_memory_bytes": memory["peak_bytes"], "memory_growth_bytes": memory["growth_bytes"],
        "memory_kind": memory["kind"]}
    steps = described_steps(model, te)
    out.update(_alignment(model, te, steps, truth, topk))
    out.update(_heads(steps))
    out["head_ablation"] = _ablation(model, te, summary["auc"])
    out["heatmaps"] = _heatmaps(model, te, truth, heatmaps, heat_len) if steps and steps[0] and steps[0][-1] else []
    return out


def _alignment(model, te, steps, truth, topk: int) -> dict[str, Any]:
    """Dependent-event AUC and top-k hits by distance bucket (empty without a ground truth)."""
    if not truth:
        return {}
    per: dict[str, dict[str, list]] = {}
    for h, probs, rows in zip(te, predict_histories(model, te, 64, "cpu"), steps):
        for t, eid in enumerate(h.event_ids):
            if eid not in truth:
                continue
            pos, d = truth[eid]
            b = per.setdefault(bucket_of(d), {"y": [], "p": [], "avg": [], "best": []})
            b["y"].append(int(h.responses[t] >= 1))
            b["p"].append(float(1.0 - probs[t, 0]))
            if t < len(rows) and rows[t] is not None:
                heads, slots = rows[t]
                hits = [pos in slots[np.argsort(-w)[:topk]] for w in heads]
                avg = heads.mean(0)
                b["avg"].append(pos in slots[np.argsort(-avg)[:topk]])
                b["best"].append(hits)
    table = {}
    order = [bucket_of(lo) for lo, _ in BUCKETS] + [f">{BUCKETS[-1][1]}"]
    for label, b in sorted(per.items(), key=lambda kv: order.index(kv[0])):
        best = np.array(b["best"]) if b["best"] else None
        table[label] = {"n": len(b["y"]), "auc": auc(np.array(b["y"]), np.array(b["p"])),
                        "topk_avg": float(np.mean(b["avg"])) if b["avg"] else None,
                        "topk_best_head": float(best.mean(0).max()) if best is not None else None}
    ys = [v for b in per.values() for v in b["y"]]
    ps = [v for b in per.values() for v in b["p"]]
    return {"dependent_auc": auc(np.array(ys), np.array(ps)), "by_distance": table, "topk": topk}


def _heads(steps) -> dict[str, Any]:
    """Entropy (nats) and Hoyer sparsity per head over every prediction with at least 2 visible keys."""
    ent: dict[int, list] = {}
    sparse: dict[int, list] = {}
    for rows in steps:
        for row in rows:
            if row is None:
                continue
            heads, slots = row
            seen = slots >= 0
            if seen.sum() < 2:
                continue
            for k, w in enumerate(heads):
                v = w[seen]
                s = v.sum()
                if s <= 0:
                    continue
                q = v / s
                ent.setdefault(k, []).append(float(-(q[q > 0] * np.log(q[q > 0])).sum()))
                sparse.setdefault(k, []).append(hoyer(q))
    if not ent:
        return {"heads": []}
    return {"heads": [{"head": k, "entropy": float(np.mean(ent[k])), "sparsity": float(np.nanmean(sparse[k]))}
                      for k in sorted(ent)]}


def _ablation(model, te, base: float) -> list[dict]:
    out = []
    for h in range(head_count(model)):
        with masked_head(model, h):
            a = _test_auc(model, te)
        out.append({"head": h, "auc": a, "delta_auc": a - base})
    return out


def _heatmaps(model, te, truth, n: int, length: int) -> list[dict]:
    out = []
    for h in list(te)[:n]:
        heat, _ = attention_map(model, collate([h.slice(0, length)]))
        marks = [(t, truth[e][0]) for t, e in enumerate(h.event_ids) if truth and e in truth and t < length]
        out.append({"learner": h.learner_id, "heat": heat[:length, : length + 1].round(4).tolist(), "truth": marks})
    return out


# -- over seeds ------------------------------------------------------------------------------------------

def paired_t(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Paired t-test of a - b over seeds: mean difference, t, two-sided p (NaN below 2 pairs or no spread)."""
    from scipy import stats

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(d) < 2 or np.allclose(d, d[0]):
        return {"mean_diff": float(d.mean()) if len(d) else float("nan"), "t": float("nan"), "p": float("nan"),
                "n": int(len(d))}
    t, p = stats.ttest_rel(a, b)
    return {"mean_diff": float(d.mean()), "t": float(t), "p": float(p), "n": int(len(d))}


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return float("nan"), None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def summarize_study(runs: list[dict]) -> dict[str, Any]:
    """Per family: mean and sd over seeds of AUC, dependent AUC, seconds per epoch, memory; paired tests."""
    fams = list(dict.fromkeys(r["family"] for r in runs))
    rows = []
    for f in fams:
        rs = sorted((r for r in runs if r["family"] == f), key=lambda r: r["seed"])
        row = {"family": f, "kind": rs[0]["kind"], "seeds": len(rs)}
        for key in ("test_auc", "dependent_auc", "seconds_per_epoch", "peak_memory_bytes", "memory_growth_bytes"):
            row[key], row[f"{key}_sd"] = _mean_sd([r.get(key) for r in rs])
        row["parameters"] = rs[0]["parameters"]
        rows.append(row)
    tests = []
    for a in [f for f in fams if f in RECURRENT]:
        for b in [f for f in fams if f not in RECURRENT]:
            ra = {r["seed"]: r for r in runs if r["family"] == a}
            rb = {r["seed"]: r for r in runs if r["family"] == b}
            seeds = sorted(set(ra) & set(rb))
            for key in ("test_auc", "dependent_auc"):
                if all(ra[s].get(key) is not None and rb[s].get(key) is not None for s in seeds):
                    tests.append({"a": a, "b": b, "metric": key,
                                  **paired_t([ra[s][key] for s in seeds], [rb[s][key] for s in seeds])})
    tests += _pooled_tests(runs, fams)
    return {"families": rows, "paired_tests": tests}


def _pooled_tests(runs: list[dict], fams: list[str]) -> list[dict]:
    """Recurrence against attention as families: per seed, the mean over the recurrent families minus the
    mean over the attention families, paired over the seeds every family ran (only where a side has more
    than one family; with one each it is the pairwise test above)."""
    rec, att = [f for f in fams if f in RECURRENT], [f for f in fams if f not in RECURRENT]
    if not rec or not att or len(rec) + len(att) < 3:
        return []
    by = {(r["family"], r["seed"]): r for r in runs}
    seeds = sorted(set.intersection(*({s for f2, s in by if f2 == f} for f in fams)))
    out = []
    for key in ("test_auc", "dependent_auc"):
        if not all(by[f, s].get(key) is not None for f in fams for s in seeds):
            continue
        a = [statistics.fmean(by[f, s][key] for f in rec) for s in seeds]
        b = [statistics.fmean(by[f, s][key] for f in att) for s in seeds]
        out.append({"a": f"recurrent ({', '.join(rec)})", "b": f"attention ({', '.join(att)})", "metric": key,
                    **paired_t(a, b)})
    return out


def study(families: Sequence[str], kwargs: dict[str, dict], splits_of_seed, seeds: Sequence[int],
          train_cfg: dict, truth_of_seed=None, topk: int = 3, log=print) -> dict[str, Any]:
    """Every family over every seed; ``splits_of_seed(seed)`` -> (train, valid, test) records."""
    runs = []
    for s in seeds:
        train, valid, test = splits_of_seed(s)
        truth = truth_of_seed(s) if truth_of_seed else None
        for f in families:
            started = time.time()
            r = study_run(f, kwargs.get(f, {}), train, valid, test, TrainConfig(seed=s, progress=False, **train_cfg),
                          truth, topk)
            log(f"{f} seed {s}: AUC {r['test_auc']:.4f} ({time.time() - started:.0f} s)")
            runs.append(r)
    return {"runs": runs, **summarize_study(runs)}
