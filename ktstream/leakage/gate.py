"""The leakage gate: every check on one model and its data, one report.

Training calls it after fitting and promotion calls it on every candidate
(DESIGN.md, "Leakage gate"); ``ktstream check-leakage`` runs it from the shell.
The caller's model is never modified: the model checks run on a private CPU
copy (float64 by default), the protocol checks on a private copy as given, and
the random-label check trains a fresh model of the same class and config.

Example (an untrained DKT on random histories; the data-hungry checks are left out):

>>> import numpy as np
>>> from ktstream.data.histories import LearnerHistory
>>> from ktstream.models import create
>>> rng = np.random.default_rng(0)
>>> def learner(i, n): return LearnerHistory(f"u{i}", rng.integers(2, 20, n), rng.integers(2, 8, (n, 1)),
...     rng.integers(0, 2, n), np.full(n, np.nan), np.arange(n), [f"u{i}-{j}" for j in range(n)])
>>> model = create("dkt", n_items=20, n_concepts=8, dim=8, hidden=8)
>>> report = run_gate(model, [learner(i, 30) for i in range(4)],
...                   GateConfig(checks=("future_perturbation", "current_label_flip", "attention_masking")))
>>> [(c.name, c.status) for c in report.checks]
[('future_perturbation', 'pass'), ('current_label_flip', 'pass'), ('attention_masking', 'n/a')]
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Callable, Sequence

import numpy as np

from ktstream.data.histories import LearnerHistory
from ktstream.leakage.attention import attention_masking
from ktstream.leakage.batch import batch_independence
from ktstream.leakage.causality import current_label_flip, future_perturbation
from ktstream.leakage.config import ALL_CHECKS, GateConfig, GateData
from ktstream.leakage.equivalence import serving_equivalence
from ktstream.leakage.expansion import Chained, data_label, repeated_rows, repeated_rows_check
from ktstream.leakage.paths import path_equivalence
from ktstream.leakage.probe import private_copy, probe_length
from ktstream.leakage.probe_data import probe_histories
from ktstream.leakage.protocol import split_disjoint, vocab_from_train, windowed_after_split
from ktstream.leakage.random_labels import random_labels_check
from ktstream.leakage.report import CheckResult, GateReport
from ktstream.leakage.selection import one_prediction_per_interaction, selection_on_valid
from ktstream.leakage.short_history import short_history_check
from ktstream.models.base import KTModel

log = logging.getLogger(__name__)
MODEL_CHECKS = ("future_perturbation", "current_label_flip", "batch_independence", "serving_equivalence",
                "path_equivalence", "attention_masking")


def run_gate(model: KTModel, data: GateData | Sequence[LearnerHistory], config: GateConfig | None = None
             ) -> GateReport:
    """Run the configured checks; a check that raises is reported as failed (the gate fails closed).

    ``data`` is a `GateData`, or plain histories (then only the checks that
    need no splits can run; the others report "not applicable").
    """
    cfg = config or GateConfig()
    if not isinstance(data, GateData):
        data = GateData(test=list(data))
    started = time.time()
    cache: dict[str, object] = {}
    runners = _runners(model, data, cfg, cache)
    checks = []
    for i, name in enumerate(ALL_CHECKS):
        if name not in cfg.checks:
            continue
        t0 = time.time()
        try:
            result = runners[name](np.random.default_rng([cfg.seed, i]))
        except Exception as exc:  # noqa: BLE001 - any error is a failed check, reported with its cause
            log.exception("leakage check %s raised", name)
            result = CheckResult(name, "fail", detail=f"check raised {type(exc).__name__}: {exc}")
        result.extras["seconds"] = round(time.time() - t0, 2)
        log.info("leakage check %-31s %s %s", name, result.status, result.detail)
        checks.append(result)
    counted = next((c for c in checks if c.name == "repeated_rows" and "label" in c.extras), None)
    if counted is not None:  # the check counted the same rows: no second pass over the data
        labels = {"data": counted.extras["label"]}
    else:
        repeats, rows = repeated_rows(Chained(*data.splits().values()))
        labels = {"data": data_label(repeats / rows)} if rows else {}
    if "probe_notes" in cache:
        labels["probe"] = ", ".join(f"{k} {v}" for k, v in cache["probe_notes"].items())
    return GateReport(model.name, checks, labels, cfg.as_dict(), time.time() - started)


def _runners(model: KTModel, data: GateData, cfg: GateConfig, cache: dict[str, object]
             ) -> dict[str, Callable[[np.random.Generator], CheckResult]]:
    """One callable per check; the model copies and probe histories are made once, into ``cache``, when
    first needed."""

    def probe():
        if "probe" not in cache:
            if not data.probe:
                raise ValueError("the model checks need at least one learner history")
            cache["probe"] = private_copy(model, cfg.precision)
            length = probe_length(model, cfg.max_length)
            cache["learners"], cache["probe_notes"] = probe_histories(data.probe, cfg.n_learners, length, cfg.seed)
        return cache["probe"], cache["learners"]

    def given():
        if "given" not in cache:
            cache["given"] = copy.deepcopy(model)
        return cache["given"]

    return {
        "future_perturbation": lambda rng: future_perturbation(*probe(), cfg, rng),
        "current_label_flip": lambda rng: current_label_flip(*probe(), cfg, rng),
        "batch_independence": lambda rng: batch_independence(*probe(), cfg, rng),
        "serving_equivalence": lambda rng: serving_equivalence(*probe(), cfg),
        "path_equivalence": lambda rng: path_equivalence(*probe(), cfg),
        "attention_masking": lambda rng: attention_masking(*probe(), cfg),
        "random_labels": lambda rng: random_labels_check(model, data, cfg),
        "short_history": lambda rng: short_history_check(given(), data, cfg),
        "split_disjoint": lambda rng: split_disjoint(data, cfg),
        "windowed_after_split": lambda rng: windowed_after_split(data, cfg),
        "vocab_from_train": lambda rng: vocab_from_train(data, cfg),
        "selection_on_valid": lambda rng: selection_on_valid(given(), data, cfg),
        "one_prediction_per_interaction": lambda rng: one_prediction_per_interaction(data, cfg),
        "repeated_rows": lambda rng: repeated_rows_check(data, cfg),
    }
