"""Evaluation protocols. Both keep the test data out of every choice.

benchmark
    A dataset's own split files: vocabularies from the training split only,
    early stopping on the validation split, the test split predicted once.
prequential_time
    One timestamped stream cut by event time: train on events before C1,
    select on [C1, C0) (predicted with the learner's earlier history as context),
    then pass every learner's whole stream through the serving path and score
    events at or after C0, each predicted before it is learned from.

The serving pass (``serve_prequential``) predicts only what is scored: a learner's
events before the step of its first scored event are applied without being
predicted (a recurrent model's state after them comes from its training path, which
by invariant 2 is the serving state within 1e-5; a windowed model applies them with
``update``), and from that step on every event is predicted from the state at its
step's start and then applied, all learners of a batch at once.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch

from ktstream.data.histories import Histories, LearnerHistory, before, build_vocabularies, collate, encode
from ktstream.data.vocab import Vocabulary
from ktstream.exceptions import LeakageError
from ktstream.models import create
from ktstream.models.base import KTModel, State, where_state
from ktstream.scoring.binary import summarize
from ktstream.training.trainer import FitResult, TrainConfig, fit, predict_histories, refit as refit_model, score


def n_categories_of(records: Sequence[dict]) -> int:
    return max(2, 1 + max(r["response"] for r in records if r.get("response") is not None))


def _metrics(histories: Sequence[LearnerHistory], probs, scored=None) -> dict:
    y, p, pos = score(histories, probs, scored)
    if p.shape[1] == 2:
        return summarize(y, p[:, 1], pos)
    # ordinal: binary figures on P(Y >= 1) keep the table comparable; ordinal metrics live elsewhere
    return {**summarize((y >= 1).astype(np.int64), 1.0 - p[:, 0], pos), "n_categories": int(p.shape[1])}


def _result(model_name: str, model, fit_result: FitResult, test: dict, counts: dict, extra: dict) -> dict[str, Any]:
    return {"model": model_name, "model_config": model.config(), "fit": fit_result.__dict__,
            "test": test, "counts": counts, **extra}


def benchmark(model_name: str, train_recs: Sequence[dict], valid_recs: Sequence[dict], test_recs: Sequence[dict],
              cfg: TrainConfig | None = None, model_kwargs: dict | None = None,
              artifacts: dict | None = None, refit: bool = False) -> dict[str, Any]:
    """Train, select on valid, test once. With ``refit``, a fresh model is then
    trained on train + valid for the epochs and learning rates selected on valid,
    and that model is the one tested. ``artifacts``, when given, receives the
    tested model and its vocabularies (to save a checkpoint)."""
    cfg = cfg or TrainConfig()
    items, concepts = build_vocabularies(train_recs)
    train, valid, test = (encode(r, items, concepts) for r in (train_recs, valid_recs, test_recs))
    overlap = {h.learner_id for h in test} & {h.learner_id for h in train + valid}
    if overlap:
        raise LeakageError(f"{len(overlap)} test learners also appear in train/valid, e.g. {sorted(overlap)[:3]}")
    def build():
        torch.manual_seed(cfg.seed)
        return create(model_name, n_items=len(items), n_concepts=len(concepts),
                      n_categories=n_categories_of(train_recs), **(model_kwargs or {}))

    model = build()
    fit_result = fit(model, train, valid, cfg)
    if refit:
        model = refit_model(build(), list(train) + list(valid), fit_result, cfg)
    if artifacts is not None:
        artifacts.update(model=model, items=items, concepts=concepts)
    started = time.time()
    test_metrics = _metrics(test, predict_histories(model, test, cfg.eval_batch_size, next(model.parameters()).device))
    counts = {"train_learners": len(train), "valid_learners": len(valid), "test_learners": len(test),
              "train_interactions": len(train_recs), "test_interactions": len(test_recs),
              "items": len(items) - 2, "concepts": len(concepts) - 2}
    return _result(model_name, model, fit_result, test_metrics, counts,
                   {"protocol": "benchmark", "refit_on_train_and_valid": refit,
                    "test_seconds": round(time.time() - started, 1)})


def prequential_time(model_name: str, records: Sequence[dict], select_from_ms: int, test_from_ms: int,
                     cfg: TrainConfig | None = None, model_kwargs: dict | None = None,
                     serving_batch: int = 256, artifacts: dict | None = None) -> dict[str, Any]:
    """Train before ``select_from_ms``, select on [select_from_ms, test_from_ms), test after; ``artifacts``,
    when given, receives the tested model and its vocabularies (to save a checkpoint), and the encoded
    histories with the served predictions and the scored positions (``histories``, ``probs``, ``scored``)."""
    if any(r.get("event_time") is None for r in records):
        raise ValueError("the time-ordered protocol needs an event_time on every event; "
                         "use the benchmark protocol for order-only datasets")
    items, concepts = build_vocabularies(r for r in records if r["event_time"] < select_from_ms)
    return prequential_histories(model_name, encode(records, items, concepts), items, concepts, select_from_ms,
                                 test_from_ms, cfg, model_kwargs, serving_batch, artifacts)


def prequential_histories(model_name: str, everything: Sequence[LearnerHistory], items: Vocabulary,
                          concepts: Vocabulary, select_from_ms: int, test_from_ms: int,
                          cfg: TrainConfig | None = None, model_kwargs: dict | None = None,
                          serving_batch: int = 256, artifacts: dict | None = None) -> dict[str, Any]:
    """`prequential_time` on every learner's whole history (event-time order, every event dated), encoded
    with the vocabularies of the events before ``select_from_ms``: the training and selection windows
    are the histories' prefixes before C1 and C0."""
    return prequential_split(model_name, before(everything, select_from_ms), everything, len(everything), items,
                             concepts, select_from_ms, test_from_ms, cfg, model_kwargs, serving_batch, artifacts)


def prequential_split(model_name: str, train, later: Sequence[LearnerHistory], learners: int, items: Vocabulary,
                      concepts: Vocabulary, select_from_ms: int, test_from_ms: int,
                      cfg: TrainConfig | None = None, model_kwargs: dict | None = None,
                      serving_batch: int = 256, artifacts: dict | None = None) -> dict[str, Any]:
    """`prequential_histories` with the training window given apart, as a large log streams it: ``train``
    is each learner's events before C1, a list or a re-iterable `BatchSource` (``parquet_log.LogTrainingData``:
    read again on every epoch); ``later`` the whole histories of at least every learner with an event at or
    after C1, the only ones selection and test score; ``learners`` how many learners the whole log holds."""
    cfg = cfg or TrainConfig()
    if not select_from_ms < test_from_ms:
        raise ValueError("select_from must be earlier than test_from")
    before_test = before(later, test_from_ms)
    valid = [(h, s) for h in before_test if (s := h.times * 1000.0 >= select_from_ms).any()]
    if not valid:
        raise ValueError(f"no events in the selection window [{select_from_ms}, {test_from_ms}) ms")
    top, train_events = 1, 0
    for h in train:  # one pass (a streamed window is read again on each epoch anyway)
        top, train_events = max(top, int(h.responses.max())), train_events + len(h)
    if train_events == 0:
        raise ValueError(f"no events before select_from ({select_from_ms} ms) to train on")
    torch.manual_seed(cfg.seed)
    model = create(model_name, n_items=len(items), n_concepts=len(concepts), n_categories=top + 1,
                   **(model_kwargs or {}))
    fit_result = fit(model, train, [h for h, _ in valid], cfg, valid_scored=[s for _, s in valid])
    model.cpu().eval()
    if artifacts is not None:
        artifacts.update(model=model, items=items, concepts=concepts)
    test_scored = [h.times * 1000.0 >= test_from_ms for h in later]
    probs = serve_prequential(model, later, test_scored, serving_batch)
    if artifacts is not None:
        artifacts.update(histories=later, probs=probs, scored=test_scored)
    counts = {"learners": learners, "train_interactions": train_events,
              "test_interactions": int(sum(s.sum() for s in test_scored)),
              "items": len(items) - 2, "concepts": len(concepts) - 2,
              "select_from_ms": select_from_ms, "test_from_ms": test_from_ms}
    return _result(model_name, model, fit_result, _metrics(later, probs, test_scored), counts,
                   {"protocol": "prequential_time"})


# -- the serving pass ---------------------------------------------------------------------------------------

@torch.inference_mode()
def serve_prequential(model: KTModel, histories: Sequence[LearnerHistory], scored: Sequence[np.ndarray],
                      batch: int = 256, chunk: int = 200) -> list[np.ndarray]:
    """Serving-path probabilities (T, K) per learner at its ``scored`` positions (NaN elsewhere before the
    first scored step), as the engine makes them: each event predicted from the learner's state at the start
    of its step, built from the learner's earlier events only, then applied.

    Per learner, ``cut`` is the start of the step of its first scored position: events before it are only
    applied (a model that ``carries_state`` runs them through ``forward`` in windows of ``chunk`` positions
    and keeps the final state; another applies them with ``update``), events from it on are served. Learners
    are batched ``batch`` at a time, longest served part first."""
    model.eval()
    K = model.n_categories
    out = [np.full((len(h), K), np.nan, dtype=np.float32) for h in histories]
    cuts = {}
    for i, (h, s) in enumerate(zip(histories, scored)):
        first = np.flatnonzero(s)
        if len(first):
            cuts[i] = int(h.step_start[first[0]])
    order = sorted(cuts, key=lambda i: len(histories[i]) - cuts[i], reverse=True)
    for g in range(0, len(order), batch):
        idx = order[g: g + batch]
        before = [histories[i].slice(0, cuts[i]) for i in idx]
        state = _applied_state(model, before, chunk)
        served = _serve(model, collate([histories[i].slice(cuts[i], len(histories[i])) for i in idx]), state)
        for row, i in enumerate(idx):
            out[i][cuts[i]:] = served[row, : len(histories[i]) - cuts[i]].numpy()
    return out


def _applied_state(model: KTModel, before: list[LearnerHistory], chunk: int) -> State:
    """The serving state of each learner after applying every interaction of ``before`` (rows may be empty)."""
    state = model.init_state(len(before))
    if max(len(h) for h in before) == 0:
        return state
    hist = collate(before)
    if model.carries_state:
        for start in range(0, hist.shape[1], chunk):  # padded positions leave a row's state as it is
            _, state = model(hist.window(start, start + chunk), state)
        return state
    applied = hist.applied
    every, some = applied.all(0).tolist(), applied.any(0).tolist()
    for t in range(hist.shape[1]):
        if every[t]:
            state = model.update(state, hist.at(t))
        elif some[t]:
            state = where_state(applied[:, t], model.update(state, hist.at(t)), state)
    return state


def _serve(model: KTModel, hist: Histories, state: State) -> torch.Tensor:
    """(B, T, K) predict-then-apply over ``hist`` from ``state``, queries of a step from its start state."""
    B, T = hist.shape
    out = torch.empty(B, T, model.n_categories)
    starts = (hist.step_start == torch.arange(T)) | ~hist.mask  # padding: nothing to keep
    applied = hist.applied
    all_start, every, some = starts.all(0).tolist(), applied.all(0).tolist(), applied.any(0).tolist()
    at_start = state
    for t in range(T):
        at_start = state if all_start[t] else where_state(starts[:, t], state, at_start)
        query = hist.at(t)
        out[:, t] = model.predict(at_start, query)
        if every[t]:
            state = model.update(state, query)
        elif some[t]:
            state = where_state(applied[:, t], model.update(state, query), state)
    return out
