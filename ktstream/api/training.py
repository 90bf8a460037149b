"""Train, evaluate and predict in one call each.

``train`` builds the vocabularies from the training events only (invariant 5), fits a model family
with the project trainer (Adam, early stopping on the validation events: ktstream.training.trainer)
and returns a ``Trained``. ``evaluate`` scores every event that has a response by its *prequential*
prediction (made from the learner's earlier events and the event's question only, invariant 1) and
returns an ``Evaluation``; ``predict`` returns those predictions. Both run the training path's batched
forward, which gives the serving path's numbers (invariant 2). Events are anything
``ktstream.api.events.to_records`` reads, or a ``Dataset`` (``train`` reads its train and valid parts,
``evaluate`` and ``predict`` its test part).

>>> import ktstream, torch
>>> torch.set_num_threads(1)
>>> events = ktstream.simulate(n_learners=40, mean_length=20, seed=0)
>>> data = ktstream.Dataset.of(events).split_by_learner(test=0.25, seed=0)
>>> trained = train("dkt", data, epochs=1, model_args={"dim": 8, "hidden": 8}, progress=False)
>>> result = evaluate(trained.model, trained.vocab, data.test)
>>> result.metrics["n"] == sum(1 for r in data.test if "response" in r), 0.0 <= result.auc <= 1.0
(True, True)
>>> len(predict(trained.model, trained.vocab, data.test).p_correct) == len(data.test)
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np
import torch

from ktstream.api.bundle import Trained, Vocab, check_pair
from ktstream.api.events import frame, to_records
from ktstream.data.histories import LearnerHistory, encode, encode_learner, group_by_learner
from ktstream.evaluation.protocols import n_categories_of
from ktstream.models import create
from ktstream.models.base import KTModel
from ktstream.scoring.binary import summarize
from ktstream.training.trainer import TrainConfig, fit, predict_histories, score

#: ``train``'s keyword options: the trainer's settings.
TRAIN_OPTIONS = tuple(f.name for f in fields(TrainConfig))
#: Share of the training learners held out for early stopping when no validation events are given.
HELD_OUT = 0.1


def train(family: str, events: Any, valid: Any = None, *, model_args: dict[str, Any] | None = None,
          threads: int | None = None, version: str | None = None, **options: Any) -> Trained:
    """Fit model family ``family`` on ``events``; select the epoch on ``valid``.

    Parameters
    ----------
    family
        A name of ``ktstream.models.names()``.
    events
        Training events, or a ``Dataset`` with splits (its train and valid parts).
    valid
        Validation events (early stopping only). None: a Dataset's valid part, else a tenth of the
        training learners (by a hash of their ids).
    model_args
        Constructor arguments of the family, e.g. ``{"hidden": 64}``.
    threads
        Torch CPU threads (``torch.set_num_threads``, for the whole process).
    version
        The label ``save`` stores (default: the family's name).
    **options
        Trainer settings (``TRAIN_OPTIONS``: epochs, lr, batch_tokens, patience, seed, device, progress, ...).
    """
    unknown = sorted(set(options) - set(TRAIN_OPTIONS))
    if unknown:
        raise ValueError(f"unknown training option(s) {unknown}; valid: {', '.join(TRAIN_OPTIONS)}")
    if threads:
        torch.set_num_threads(threads)
    train_recs, valid_recs = _train_valid(events, valid)
    vocab = Vocab.build(train_recs)  # the training window only
    cfg = TrainConfig(**options)
    torch.manual_seed(cfg.seed)
    model = create(family, n_items=len(vocab.items), n_concepts=len(vocab.concepts),
                   n_categories=n_categories_of(train_recs), **(model_args or {}))
    result = fit(model, encode(train_recs, vocab.items, vocab.concepts),
                 encode(valid_recs, vocab.items, vocab.concepts), cfg)
    return Trained(model.eval(), vocab, version or family, result)


def _train_valid(events: Any, valid: Any) -> tuple[list[dict], list[dict]]:
    if _is_dataset(events):
        if events.train is None:
            raise ValueError(f"{events.name} has no train/valid/test splits; split it first "
                             f"(Dataset.split_by_learner) or pass the training events themselves")
        events, valid = events.train, valid if valid is not None else events.valid
    train_recs = to_records(events)
    if valid is not None:
        return train_recs, to_records(valid)
    learners = sorted({r["learner_id"] for r in train_recs}, key=_hash)
    if len(learners) < 2:
        raise ValueError("training needs validation events, or at least two learners to hold one out")
    held = set(learners[: max(1, round(HELD_OUT * len(learners)))])
    return [r for r in train_recs if r["learner_id"] not in held], [r for r in train_recs if r["learner_id"] in held]


def _hash(learner_id: str) -> str:
    return hashlib.sha1(learner_id.encode()).hexdigest()


def _is_dataset(x: Any) -> bool:
    from ktstream.api.datasets import Dataset

    return isinstance(x, Dataset)


def _test_events(events: Any) -> list[dict]:
    if _is_dataset(events):
        if events.test is None:
            raise ValueError(f"{events.name} has no test split; split it first or pass the events themselves")
        events = events.test
    return to_records(events)


@dataclass(frozen=True)
class Predictions:
    """The prequential prediction of every event, learners by id, each learner's events in its order.

    ``probs`` (N, K) holds each response category's probability; ``position`` is the 1-based index of
    the event in its learner's history; ``response`` is -1 for a prediction request.
    """

    learner_id: list[str]
    event_id: list[str]
    item_id: list[str]
    position: np.ndarray
    response: np.ndarray
    probs: np.ndarray

    @property
    def p_correct(self) -> np.ndarray:
        """P(response = 1) for a binary model; P(response >= 1) for an ordinal one."""
        return 1.0 - self.probs[:, 0]

    def __len__(self) -> int:
        return len(self.event_id)

    def to_frame(self):
        """A pandas DataFrame: one row per event; ``p_correct``, and ``p0``.. ``p{K-1}`` for an ordinal model."""
        columns: dict[str, Any] = {"learner_id": self.learner_id, "event_id": self.event_id, "item_id": self.item_id,
                                   "position": self.position, "response": self.response, "p_correct": self.p_correct}
        if self.probs.shape[1] > 2:
            columns.update({f"p{k}": self.probs[:, k] for k in range(self.probs.shape[1])})
        return frame(columns)


@dataclass(frozen=True)
class Evaluation:
    """Scores of the prequential predictions of the events with a response.

    ``metrics``: n, share_correct, auc, accuracy, log_loss, rmse, brier (on P(correct); an ordinal model
    is scored on P(response >= 1)); ``by_history_length``: n and AUC per bin of position in the history.
    """

    metrics: dict[str, float]
    by_history_length: dict[str, dict[str, float]]
    predictions: Predictions

    @property
    def auc(self) -> float:
        return self.metrics["auc"]

    @property
    def accuracy(self) -> float:
        return self.metrics["accuracy"]

    @property
    def log_loss(self) -> float:
        return self.metrics["log_loss"]

    def to_frame(self):
        """The metrics as a one-row pandas DataFrame."""
        return frame({k: [v] for k, v in self.metrics.items()})

    def __repr__(self) -> str:
        m = self.metrics
        return (f"Evaluation(n={m['n']}, auc={m['auc']:.4f}, accuracy={m['accuracy']:.4f}, "
                f"log_loss={m['log_loss']:.4f}, rmse={m['rmse']:.4f})")


def predict(model: KTModel, vocab: Vocab, events: Any) -> Predictions:
    """Every event's prequential prediction (see ``Predictions``)."""
    check_pair(model, vocab)
    histories, item_ids = _encode(_test_events(events), vocab)
    return _predictions(histories, item_ids, _probs(model, histories))


def evaluate(model: KTModel, vocab: Vocab, events: Any, since: int | None = None) -> Evaluation:
    """Score the prequential predictions of ``events``. With ``since`` (epoch milliseconds) only events at or
    after it are scored; every earlier event is still read as the learner's history (a time-ordered test)."""
    check_pair(model, vocab)
    histories, item_ids = _encode(_test_events(events), vocab)
    probs = _probs(model, histories)
    scored = None if since is None else [h.times * 1000.0 >= since for h in histories]
    y, p, positions = score(histories, probs, scored)
    binary = (y >= 1).astype(np.int64) if p.shape[1] > 2 else y
    summary = summarize(binary, 1.0 - p[:, 0], positions)
    by_length = summary.pop("auc_by_history_length")
    return Evaluation(summary, by_length, _predictions(histories, item_ids, probs))


def _encode(records: list[dict], vocab: Vocab) -> tuple[list[LearnerHistory], list[str]]:
    """Histories as ``encode`` gives them, and the item id of each of their events in the same order."""
    grouped = group_by_learner(records)
    order = sorted(grouped)
    histories = [encode_learner(lid, grouped[lid], vocab.items, vocab.concepts) for lid in order]
    return histories, [r["item_id"] for lid in order for r in grouped[lid]]


def _probs(model: KTModel, histories: Sequence[LearnerHistory]) -> list[np.ndarray]:
    if not histories:
        raise ValueError("no events to predict")
    return predict_histories(model, histories)


def _predictions(histories: Sequence[LearnerHistory], item_ids: list[str], probs: list[np.ndarray]) -> Predictions:
    return Predictions([h.learner_id for h in histories for _ in range(len(h))],
                       [e for h in histories for e in h.event_ids], item_ids,
                       np.concatenate([np.arange(1, len(h) + 1) for h in histories]),
                       np.concatenate([h.responses for h in histories]), np.concatenate(probs))
