"""``train-quick``: a model fitted at start-up on simulated learners, for a first run with no data.

It simulates a learner population (ktstream.data.simulate), builds the
vocabularies from it, fits the configured family with the project trainer
(``fit``: early stopping on a held-out fifth of the learners) for a few epochs,
and returns it with version ``quick-<family>-<seed>``. It exists so that
``ktstream demo`` and a first ``ktstream serve`` need no data and no checkpoint;
real deployments point ``model.checkpoint`` at a directory written by
``save_checkpoint``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ktstream.data.histories import build_vocabularies, encode
from ktstream.data.simulate import simulate
from ktstream.models import create
from ktstream.models.checkpoint import ServingModel
from ktstream.training.trainer import TrainConfig, fit

log = logging.getLogger(__name__)


def train_quick(family: str = "dkt", n_learners: int = 300, epochs: int = 4, config: dict[str, Any] | None = None,
                seed: int = 0) -> ServingModel:
    """Fit ``family`` on ``n_learners`` simulated learners (seconds, on one CPU thread)."""
    records = simulate(n_learners=n_learners, seed=seed, id_prefix="train-")
    items, concepts = build_vocabularies(records)
    histories = encode(records, items, concepts)
    cut = max(1, int(0.8 * len(histories)))
    torch.manual_seed(seed)
    model = create(family, n_items=len(items), n_concepts=len(concepts), n_categories=2, **(config or {}))
    result = fit(model, histories[:cut], histories[cut:],
                 TrainConfig(epochs=epochs, patience=2, seed=seed, device="cpu", progress=False))
    log.info("train-quick %s: validation AUC %.3f after %d epochs", family, result.best_valid, result.best_epoch)
    return ServingModel(model.eval(), items, concepts, f"quick-{family}-{seed}", result.best_valid)
