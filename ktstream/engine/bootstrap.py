"""Getting a model to serve: a checkpoint directory, or ``train-quick`` on simulated learners.

``train-quick`` simulates a learner population (ktstream.data.simulate, world
seed 0), builds the vocabularies from it, fits the configured family with the
project trainer (ktstream.training.trainer.fit: early stopping on a held-out
fifth of the learners) for a few epochs, and returns it with version
``quick-<family>-<seed>``. It exists so that ``ktstream demo`` and a first
``ktstream serve`` need no data and no checkpoint; real deployments point
``model.checkpoint`` at a directory written by ``save_checkpoint``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ktstream.config import ModelSettings
from ktstream.data.histories import build_vocabularies, encode
from ktstream.data.simulate import simulate
from ktstream.data.vocab import Vocabulary
from ktstream.exceptions import ConfigError
from ktstream.models import KTModel, create
from ktstream.models.checkpoint import load_checkpoint, save_checkpoint

log = logging.getLogger(__name__)


@dataclass
class ServingModel:
    model: KTModel
    items: Vocabulary
    concepts: Vocabulary
    version: str
    valid_auc: float | None = None

    def save(self, directory: str | Path) -> Path:
        return save_checkpoint(directory, self.model, self.items, self.concepts, self.version)


def train_quick(family: str = "dkt", n_learners: int = 300, epochs: int = 4, config: dict[str, Any] | None = None,
                seed: int = 0) -> ServingModel:
    """Fit ``family`` on ``n_learners`` simulated learners (seconds, on one CPU thread)."""
    from ktstream.training.trainer import TrainConfig, fit

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


def load_model(cfg: ModelSettings) -> ServingModel:
    """The model the configuration names: the registry's newest loadable version, else the checkpoint /
    train-quick. A version that cannot be loaded is skipped with an error in the log (the engine's
    registry watcher then tries it once more and counts the failure in
    ``ktstream_model_load_failures_total``), so a bad promotion never makes a restart crash-loop."""
    if cfg.registry is not None:
        if (found := _newest_loadable(cfg.registry)) is not None:
            return found
        log.info("model registry %s has no loadable version: serving %s until one is promoted", cfg.registry,
                 cfg.checkpoint)
    if cfg.checkpoint == "train-quick":
        return train_quick(cfg.family, cfg.quick_learners, cfg.quick_epochs, cfg.config)
    model, items, concepts, version = load_checkpoint(cfg.checkpoint)
    if model.name != cfg.family:
        raise ConfigError(f"checkpoint {cfg.checkpoint} holds a {model.name!r} model; the config says {cfg.family!r}")
    return ServingModel(model, items, concepts, version)


def _newest_loadable(root: str) -> ServingModel | None:
    from ktstream.finetune.exceptions import RegistryError
    from ktstream.finetune.registry import ModelRegistry

    registry = ModelRegistry(root, read_only=True)
    names = registry.versions()
    for name in reversed(names):
        try:
            v = registry.get(name)
        except RegistryError as exc:
            log.error("model version %s cannot be loaded, falling back to an older one: %s", name, exc)
            continue
        if name != names[-1]:
            log.error("serving model version %s, not the registry's latest %s (it cannot be loaded)", name,
                      names[-1])
        return ServingModel(v.model, v.items, v.concepts, v.version)
    return None
