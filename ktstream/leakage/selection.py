"""Evaluation protocol, part 2: what selection read, and how often each interaction is scored.

- `selection_on_valid`: the trainer's `FitResult` must name only training and
  validation figures, its best score must be the best epoch's validation
  score, and the model handed to the gate must reproduce that score on the
  validation split. A model selected (or early-stopped) on the test split
  reproduces its score on test instead, and the check names that.
- `one_prediction_per_interaction`: in the scored splits no event id occurs
  twice (overlapping windows score an interaction twice), and expanded
  multi-concept rows (one question scored once per concept) stay within the
  data check's share.
"""

from __future__ import annotations

from collections import Counter

from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.expansion import repeated_rows
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.training.trainer import TrainConfig, validation_metric

SCORE_TOLERANCE = 1e-4  # re-scoring in other batches may round differently


def selection_on_valid(model: KTModel, data: GateData, cfg: GateConfig | None = None) -> CheckResult:
    name = "selection_on_valid"
    fr = data.fit_result
    if fr is None:
        return CheckResult.not_applicable(name, "no FitResult given (model not trained by this caller)")
    if not data.valid:
        return CheckResult(name, "fail", detail="a FitResult was given but no validation split")
    notes = []
    keys = {k for row in fr.history for k in row}
    if any("test" in k for k in keys):
        notes.append(f"training history records test figures ({sorted(k for k in keys if 'test' in k)})")
    column = f"valid_{fr.selection_metric}"
    scores = [row.get(column) for row in fr.history]
    if scores and None not in scores:
        best = max(range(len(scores)), key=lambda i: scores[i])
        if abs(scores[best] - fr.best_valid) > 1e-12 or fr.history[best].get("epoch", best + 1) != fr.best_epoch:
            notes.append(f"best epoch {fr.best_epoch} / score {fr.best_valid:.6f} is not the best {column} "
                         f"in the history (epoch {best + 1}, {scores[best]:.6f})")
    device = next(model.parameters()).device
    tc = TrainConfig(eval_batch_size=int(fr.config.get("eval_batch_size", 64)), progress=False)
    metric, valid_now = validation_metric(model, data.valid, data.valid_scored, tc, device)
    gap = abs(valid_now - fr.best_valid)
    if gap > SCORE_TOLERANCE:
        msg = f"the model scores {metric} {valid_now:.6f} on valid, but was selected at {fr.best_valid:.6f}"
        if data.test:
            _, test_now = validation_metric(model, data.test, data.test_scored, tc, device)
            if abs(test_now - fr.best_valid) <= SCORE_TOLERANCE:
                msg += f"; its test score {test_now:.6f} matches: selected on the test split"
        notes.append(msg)
    ok = not notes
    return CheckResult.judge(name, gap, SCORE_TOLERANCE, ok, "|valid score now - selected score| <= bound "
                             "(and no test figures in selection)", "; ".join(notes) or
                             f"selected epoch {fr.best_epoch} on valid {metric} {fr.best_valid:.4f}, reproduced",
                             metric=metric, valid_now=valid_now, best_valid=fr.best_valid)


def one_prediction_per_interaction(data: GateData, cfg: GateConfig) -> CheckResult:
    name = "one_prediction_per_interaction"
    scored = {k: data.scored(k) for k in ("valid", "test") if data.scored(k)}
    if not scored:
        return CheckResult.not_applicable(name, "no scored split given")
    rows = sum(len(h) for hs in scored.values() for h in hs)
    ids = Counter(e for hs in scored.values() for h in hs for e in h.event_ids if e)
    duplicates = sum(c - 1 for c in ids.values() if c > 1)
    repeats = sum(repeated_rows(hs)[0] for hs in scored.values())
    share = (duplicates + repeats) / rows if rows else 0.0
    notes = []
    if duplicates:
        notes.append(f"{duplicates} predictions score an event id already scored "
                     f"(e.g. {next(e for e, c in ids.items() if c > 1)!r})")
    if repeats:
        notes.append(f"{repeats} expanded multi-concept rows scored as interactions of their own")
    if not ids:
        notes.append("no event ids: duplicates not checkable")
    ok = duplicates == 0 and share <= cfg.max_repeated_share
    return CheckResult.judge(name, share, cfg.max_repeated_share, ok,
                             "no duplicate event id; extra predictions / scored rows <= bound",
                             "; ".join(notes) or f"{rows} scored rows in {', '.join(scored)}, one per interaction",
                             duplicate_event_ids=duplicates, expanded_rows=repeats)
