"""Random labels: trained on coin flips, a model that reads only the past scores AUC 0.5 on new coin flips.

Every response is replaced by a fair draw (same learners, items, concepts,
times, order); a fresh copy of the model (same class and configuration) is
trained with the ordinary trainer, selected on the relabelled validation split,
and scored once on the relabelled test split. Labels drawn independently of
everything a causal model can see leave its test AUC at 0.5 up to sampling
noise, whose standard deviation under the null is the Mann-Whitney
``sqrt((n1 + n0 + 1) / (12 n1 n0))``; the bound is ``z`` times that, floored at
``min_bound``. A model that reads the current response, or data in which one
answer is copied into later rows, lands far outside it.

One draw per *interaction*: rows that `expansion.interaction_groups` finds to be
one expanded multi-concept question share their draw, as they share their
real response. That is how expanded data leaks, and what pyKT's 0.64 shows.

>>> round(null_bound(5000, 5000, z=3.29, floor=0.0), 4)
0.019
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import numpy as np
import torch

from ktstream.data.histories import LearnerHistory, build_vocabularies, encode
from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.expansion import interaction_groups, repeated_rows
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.scoring.binary import auc, null_auc_bound
from ktstream.training.trainer import TrainConfig, fit, predict_histories, resolve_device, score


def null_bound(n_pos: int, n_neg: int, z: float, floor: float) -> float:
    """Half-width of the interval around 0.5 that a no-signal AUC stays in (false alarms ~ P(|N(0,1)| > z))."""
    return null_auc_bound(n_pos, n_neg, z=z, floor=floor)


def coin_flip_labels(records: Sequence[dict], seed: int) -> list[dict]:
    """The same events with responses replaced by fair coin flips (the random-label check).

    One flip per original interaction: rows that repeat one multi-concept interaction
    (``interaction_groups``: consecutive rows of one item with one response and
    new concepts) share it, as the row expansion copies the response; flipping each row on its
    own would hide exactly the leak the check is for.
    """
    items, concepts = build_vocabularies(records)  # only to group the rows
    flips: dict[str, int] = {}
    for h in coin_flip_histories(encode(records, items, concepts), seed):
        flips.update(zip(h.event_ids, h.responses.tolist()))
    return [{**r, "response": flips[r["event_id"]]} for r in records]


def coin_flip_histories(histories: Sequence[LearnerHistory], seed: int | np.random.Generator) -> list[LearnerHistory]:
    """`coin_flip_labels` on encoded histories (learner id order, vocabularies of all the events): the same
    draws, without a record per event (a generator given as ``seed`` goes on from where it is)."""
    rng = np.random.default_rng(seed)
    out = []
    for h in histories:
        draws = rng.integers(0, 2, size=len(h))
        out.append(dataclasses.replace(h, responses=draws[interaction_groups(h)].astype(h.responses.dtype)))
    return out


def coin_flips_per_pass(seed: int):
    """`coin_flip_histories` for histories read again from their source on every pass, a table of learners
    at a time (``parquet_log.LogHistories``): each pass draws from a fresh generator seeded alike, going on
    from table to table, so every pass sees the flips that the same histories held would get."""
    def per_pass():
        rng = np.random.default_rng(seed)
        return lambda histories: coin_flip_histories(histories, rng)
    return per_pass


def _relabelled(h: LearnerHistory, n_categories: int, rng: np.random.Generator) -> LearnerHistory:
    draws = rng.integers(0, n_categories, size=len(h))
    new = copy.copy(h)
    new.responses = np.where(h.responses >= 0, draws[interaction_groups(h)], h.responses).astype(np.int64)
    return new


def with_random_labels(histories: Sequence[LearnerHistory], n_categories: int,
                       rng: np.random.Generator) -> list[LearnerHistory]:
    """Copies with every response a uniform draw over the K categories, one draw per interaction."""
    return [_relabelled(h, n_categories, rng) for h in histories]


def streamed_random_labels(train, n_categories: int, rng: np.random.Generator):
    """`with_random_labels` on a training split streamed from the archive (``ArchiveTrainingData``): every
    pass draws from ``rng``'s present state, so each epoch sees the same labels, and one pass here leaves
    ``rng`` where `with_random_labels` would (the validation and test draws come next)."""
    state = copy.deepcopy(rng.bit_generator.state)

    def per_pass():
        again = np.random.Generator(type(rng.bit_generator)())
        again.bit_generator.state = state
        return lambda h: _relabelled(h, n_categories, again)

    for h in train:
        rng.integers(0, n_categories, size=len(h))
    return train.mapped(per_pass)


def binary_view(y: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y >= K/2, P(y >= K/2)): the binary score AUC is taken on (K = 2: correct, P(correct))."""
    cut = (probs.shape[1] + 1) // 2
    return (y >= cut).astype(np.int64), probs[:, cut:].sum(1)


def random_label_auc(model: KTModel, train, valid, test, cfg: GateConfig, relabel: bool = True) -> dict:
    """Train a fresh copy of ``model`` on random labels; its test AUC, the null bound, and counts.

    ``relabel=False``: the splits already carry random labels (drawn by the caller).
    """
    rng = np.random.default_rng(cfg.seed + 1)
    K = model.n_categories
    train_r, valid_r, test_r = train, valid, test
    if relabel:
        streamed = hasattr(train, "mapped")
        train_r = streamed_random_labels(train, K, rng) if streamed else with_random_labels(train, K, rng)
        valid_r, test_r = with_random_labels(valid, K, rng), with_random_labels(test, K, rng)
    torch.manual_seed(cfg.seed)
    fresh = type(model)(**model.config())
    tc = TrainConfig(epochs=cfg.random_label_epochs, batch_size=cfg.random_label_batch_size,
                     batch_tokens=cfg.random_label_batch_tokens, lr=cfg.random_label_lr, patience=cfg.random_label_patience or cfg.random_label_epochs,
                     chunk=cfg.random_label_chunk,
                     seed=cfg.seed, device=cfg.device, progress=False)
    result = fit(fresh, train_r, valid_r, tc)
    probs = predict_histories(fresh, test_r, tc.eval_batch_size, resolve_device(cfg.device))
    y, p, _ = score(test_r, probs)
    yb, pb = binary_view(y, p)
    n1, n0 = int(yb.sum()), int(len(yb) - yb.sum())
    repeats, rows = repeated_rows(test)
    return {"auc": auc(yb, pb), "bound": null_bound(n1, n0, cfg.z, cfg.min_bound), "n_pos": n1, "n_neg": n0,
            "se_null": null_bound(n1, n0, 1.0, 0.0), "best_epoch": result.best_epoch,
            "best_valid": result.best_valid, "epochs_run": len(result.history),
            "test_repeated_share": repeats / max(rows, 1)}


def random_labels_check(model: KTModel, data: GateData, cfg: GateConfig) -> CheckResult:
    if not (data.train and data.valid and data.test):
        return CheckResult.not_applicable("random_labels", "needs train, valid and test splits")
    r = random_label_auc(model, data.train, data.valid, data.test, cfg)
    dev = abs(r["auc"] - 0.5)
    detail = (f"fresh {model.name} trained {r['epochs_run']} epochs on coin flips; test n={r['n_pos'] + r['n_neg']}, "
              f"bound = max({cfg.min_bound}, {cfg.z} x {r['se_null']:.4f})")
    if dev > r["bound"]:
        detail = (f"AUC {r['auc']:.4f} on random labels: predictions carry the labels (reads the current "
                  f"response, or copied rows: {100 * r['test_repeated_share']:.1f}% of test rows repeat); " + detail)
    extras = {k: v for k, v in r.items() if k not in ("auc", "bound")}
    return CheckResult.judge("random_labels", r["auc"], r["bound"], dev <= r["bound"], "|AUC - 0.5| <= bound",
                             detail, **extras)
