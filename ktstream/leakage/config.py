"""What the gate is given: the data (`GateData`) and its settings (`GateConfig`).

The defaults are meant for a candidate model on a few hundred real learners:
the model checks (perturbation, batch, serving, attention) read a handful of
sampled learners and need no training; only the random-label check trains, a
fresh copy of the model for a few epochs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ktstream.data.histories import LearnerHistory
from ktstream.training.trainer import TrainConfig

#: Every check the gate knows, in the order it runs them.
ALL_CHECKS = ("future_perturbation", "current_label_flip", "batch_independence", "serving_equivalence",
              "path_equivalence", "attention_masking", "random_labels", "short_history", "split_disjoint",
              "windowed_after_split", "vocab_from_train", "selection_on_valid", "one_prediction_per_interaction", "repeated_rows")


@dataclass
class GateConfig:
    """Settings of a gate run.

    Tolerances: in ``precision="fp64"`` the model is checked as a float64 copy
    and perturbations must leave earlier predictions bit-for-bit equal; in
    ``"fp32"`` within ``fp32_atol``. Comparisons across different batch shapes
    (batch independence, serving vs training path) change the summation order
    inside matrix kernels, so they allow rounding: ``batch_atol`` in fp64,
    ``fp32_atol`` / ``fp32_serving_atol`` in fp32.
    """

    seed: int = 0
    checks: Sequence[str] = ALL_CHECKS
    precision: str = "fp64"  # fp64 | fp32
    fp32_atol: float = 1e-6
    fp32_serving_atol: float = 1e-5  # the contract's train/serve tolerance
    batch_atol: float = 1e-9  # fp64, across batch shapes
    fp64_serving_atol: float = 1e-6  # fp64: serving caches may keep float32 copies (attention KV caches)
    # model checks
    n_learners: int = 8  # sampled learners (random, seeded) for the model checks
    n_positions: int = 4  # perturbation positions per learner: first, last, and random ones
    # probe length: histories continued (by other learners) or cut to this, raised to cross a windowed
    # model's receptive field three times; steps and clocks synthesised when the data has none (probe_data)
    max_length: int = 200
    path_chunk: int = 16  # window of the trainer's paths in path_equivalence (small: many window boundaries)
    # random labels
    z: float = 3.29  # two-sided 0.001 false-alarm rate per check
    min_bound: float = 0.02  # floor of the random-label AUC bound
    random_label_epochs: int = 2
    random_label_batch_tokens: int = TrainConfig.batch_tokens  # positions per batch (0: by learners)
    random_label_batch_size: int = 32  # learners per batch when random_label_batch_tokens is 0
    random_label_lr: float = 3e-3
    random_label_chunk: int = 200
    random_label_patience: int | None = None  # early-stopping patience (None: all epochs run)
    device: str = "auto"  # where the random-label training runs (auto: GPU when present)
    # short-history anomaly (1-based positions in a learner's history)
    short_positions: tuple[int, int] = (2, 10)
    long_after: int = 50  # long = positions > long_after
    short_margin: float = 0.05
    min_scored: int = 200  # fewer interactions in either group: not applicable
    # data check
    max_repeated_share: float = 0.01

    def __post_init__(self) -> None:
        if self.precision not in ("fp64", "fp32"):
            raise ValueError(f"precision must be 'fp64' or 'fp32', got {self.precision!r}")
        unknown = set(self.checks) - set(ALL_CHECKS)
        if unknown:
            raise ValueError(f"unknown checks {sorted(unknown)}; valid: {', '.join(ALL_CHECKS)}")

    @property
    def exact_atol(self) -> float:
        """Tolerance where the same batch is run twice with a perturbation."""
        return 0.0 if self.precision == "fp64" else self.fp32_atol

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass
class GateData:
    """The splits a model was (or will be) trained, selected and scored on.

    Parameters
    ----------
    train, valid, test
        Encoded learner histories (vocabularies built from ``train`` only).
        The model checks sample learners from ``test`` (else ``valid``, else
        ``train``); the random-label check needs all three. ``train`` may be
        a stream that reads the histories again on each pass (a fine-tuning
        cycle's window in the archive, ``ArchiveTrainingData``): the checks
        then read it pass by pass and never hold it.
    split
        ``"learner"``: each learner lies in one split (benchmark protocol);
        ``"time"``: splits are consecutive time windows, a learner may span
        them (prequential protocol).
    fit_result
        The trainer's `FitResult` for the model under test, if it was trained
        here: the gate checks that selection read the validation split.
    n_items, n_concepts
        Vocabulary sizes, when known (checked against the training ids).
    valid_scored, test_scored
        Per learner, a boolean array of the positions that are scored (the
        rest is context, as in the time-ordered protocol, whose validation
        histories carry the training window before the scored one). None:
        every position is scored.
    """

    train: list[LearnerHistory] = field(default_factory=list)  # or a re-iterable stream (above)
    valid: list[LearnerHistory] = field(default_factory=list)
    test: list[LearnerHistory] = field(default_factory=list)
    split: str = "learner"
    fit_result: Any = None
    n_items: int | None = None
    n_concepts: int | None = None
    valid_scored: list[np.ndarray] | None = None
    test_scored: list[np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.split not in ("learner", "time"):
            raise ValueError(f"split must be 'learner' or 'time', got {self.split!r}")

    @property
    def probe(self) -> list[LearnerHistory]:
        """The histories the model checks sample from."""
        return self.test or self.valid or self.train

    def splits(self) -> dict[str, list[LearnerHistory]]:
        return {k: v for k, v in (("train", self.train), ("valid", self.valid), ("test", self.test)) if v}

    def scored(self, split: str) -> list[LearnerHistory]:
        """The split's histories cut down to their scored positions (learners with none dropped)."""
        masks = {"valid": self.valid_scored, "test": self.test_scored}.get(split)
        histories = self.splits().get(split, [])
        if masks is None:
            return histories
        out = []
        for h, m in zip(histories, masks):
            idx = np.flatnonzero(m)
            if len(idx):
                out.append(LearnerHistory(h.learner_id, h.items[idx], h.concepts[idx], h.responses[idx],
                                          h.times[idx], np.arange(len(idx)), [h.event_ids[i] for i in idx]))
        return out
