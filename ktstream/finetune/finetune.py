"""Fine-tune the serving model on a time-ordered replay: warm start, train before C, select on [C, C+H).

One code path on GPU and CPU: the device is CUDA when present (``device="auto"``),
and on CUDA each training step runs under bf16 autocast (``TrainConfig.autocast``:
parameters and optimizer state stay fp32; bf16 needs no loss scaling). The
selection metric is computed in fp32, as the model will serve.

Training histories may be cut into segments of ``segment`` positions, each
trained from the initial state: the trainer takes one optimizer step per batch
of learners, so a few long histories (EdNet's heavy users) would give one step
per epoch. Predictions for selection and promotion always use whole histories.
The leakage check runs on the exact list handed to the trainer (on each buffer of a
training window streamed from the archive, as it is read).

Deterministic: seeded (``seed``), the same data in the same order gives
bit-identical weights on CPU; on CUDA ``deterministic=True`` asks torch for
deterministic kernels while training.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import Vocabulary
from ktstream.finetune.exceptions import FinetuneError
from ktstream.finetune.windows import TimeWindows, assert_before
from ktstream.finetune.warmstart import warm_start
from ktstream.models import create
from ktstream.models.base import KTModel
from ktstream.training.precision import unsupported_reason
from ktstream.training.trainer import FitResult, TrainConfig, fit, resolve_device

log = logging.getLogger(__name__)


@dataclass
class FinetuneConfig:
    epochs: int = 3
    batch_tokens: int = TrainConfig.batch_tokens  # positions per batch (0: batch_size learners)
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: int = 2
    lr_decay: float = 0.5  # the trainer's: lr x this after an epoch that does not improve selection
    chunk: int = 200
    segment: int | None = 200  # training histories cut into pieces of this many positions (None: whole)
    seed: int = 0
    device: str = "auto"  # auto: CUDA when present
    bf16: bool = True  # bf16 autocast per training step on CUDA (ignored on CPU)
    deterministic: bool = True
    progress: bool = True

    def train_config(self, autocast: str | None = None) -> TrainConfig:
        return TrainConfig(epochs=self.epochs, batch_size=self.batch_size, batch_tokens=self.batch_tokens, lr=self.lr,
                           weight_decay=self.weight_decay, patience=self.patience, lr_decay=self.lr_decay,
                           chunk=self.chunk, seed=self.seed, device=self.device, autocast=autocast,
                           progress=self.progress)


@dataclass
class FinetuneResult:
    model: KTModel
    items: Vocabulary
    concepts: Vocabulary
    fit: FitResult
    warm_start: dict[str, Any] | None
    device: str
    autocast: str | None
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the weights go to the registry, not here)."""
        return {"family": self.model.name, "model_config": self.model.config(), "fit": asdict(self.fit),
                "warm_start": self.warm_start, "device": self.device, "autocast": self.autocast,
                "seconds": round(self.seconds, 2), "config": self.config}


def segments(histories: list[LearnerHistory], length: int | None) -> list[LearnerHistory]:
    """Each history cut into consecutive pieces of at most ``length`` positions."""
    if length is None:
        return list(histories)
    assert length > 0, f"segment length must be positive, got {length}"
    return [h.slice(s, s + length) for h in histories for s in range(0, len(h), length)]


def autocast_mode(device: torch.device, cfg: FinetuneConfig) -> str | None:
    """The trainer's per-step autocast: bf16 on CUDA when asked for and the GPU trains in it (else fp32,
    logged), none on CPU."""
    if device.type != "cuda" or not cfg.bf16:
        return None
    reason = unsupported_reason(device, torch.bfloat16)
    if reason is not None:
        log.warning("bf16 autocast cannot train here (%s): fine-tuning in fp32 (set bf16: false to silence this)",
                    reason)
        return None
    return "bf16"


@contextlib.contextmanager
def _deterministic(cfg: FinetuneConfig):
    previous = torch.are_deterministic_algorithms_enabled()
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def initial_model(data: TimeWindows, base: KTModel | None, family: str | None, model_kwargs: dict | None,
                  seed: int) -> tuple[KTModel, dict[str, Any] | None]:
    """The serving model grown to the replay's vocabularies, or a fresh ``family`` model (cold start)."""
    if base is not None:
        return warm_start(base, len(data.items), len(data.concepts))
    assert family is not None, "a cold start needs a model family"
    torch.manual_seed(seed)
    return create(family, n_items=len(data.items), n_concepts=len(data.concepts),
                  n_categories=data.n_categories, **(model_kwargs or {})), None


def fine_tune(data: TimeWindows, base: KTModel | None = None, cfg: FinetuneConfig | None = None,
              family: str | None = None, model_kwargs: dict | None = None) -> FinetuneResult:
    """Train on ``data.train`` (events < C), select on ``data.select`` scored on [C, C+H).

    ``base`` is the serving model (warm start; its vocabulary must be the head
    of ``data``'s, as `build_windows(base=...)` makes it); without one a fresh
    ``family`` model is trained. ``base`` itself is never modified.
    """
    cfg = cfg or FinetuneConfig()
    if not any(s.any() for s in data.select_scored):
        raise FinetuneError(f"no events in the selection window [{data.cutoff_ms}, "
                            f"{data.cutoff_ms + data.horizon_ms}) ms: nothing to select the epoch on")
    started = time.time()
    model, grown = initial_model(data, base, family, model_kwargs, cfg.seed)
    if hasattr(data.train, "batches"):  # streamed from the archive: each buffer is checked as it is read
        train = data.train.with_segment(cfg.segment)
    else:
        train = segments(data.train, cfg.segment)
        assert_before(train, data.cutoff_ms, "training")  # the very batches the trainer will see
    assert_before(data.select, data.cutoff_ms + data.horizon_ms, "selection")
    device = resolve_device(cfg.device)
    autocast = autocast_mode(device, cfg)
    with _deterministic(cfg):
        result = fit(model, train, data.select, cfg.train_config(autocast), valid_scored=data.select_scored)
    return FinetuneResult(model.eval(), data.items, data.concepts, result, grown, str(device), autocast,
                          time.time() - started, asdict(cfg))
