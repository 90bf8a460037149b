"""Path equivalence: every path that produces a reported number predicts what the serving path predicts.

The serving path (`predict_stepwise`: the queries of a step predicted from the state at
the step's start, then the updates) is causal by construction once
`current_label_flip` has shown that ``predict`` ignores the query's response.
A path that agrees with it within rounding is then causal too; a path that
reads a step mate's response, the next event, or the future of a window,
disagrees at the very position it leaks into. Compared with it, on the
gate's probe histories (long, stepped and clocked: `probe_data`):

- ``forward_carried``: each learner alone, its history cut at step starts
  about every ``path_chunk`` positions, ``forward`` run window by window with
  the state carried (the contract's ``forward(histories, state)``);
- ``predict_histories``: the trainer's evaluation path (validation, test,
  ``evaluate``) with ``chunk = path_chunk``, all learners in one batch: its
  windows may begin inside a step of some learner, and the positions of such
  a step must still be predicted from the state at the step's start;
- ``windows_train``: ``forward_windows`` in training mode (dropout 0), the
  loss path, at the positions it puts in the loss, against ``forward`` in the
  same mode;
- ``engine``: the engine's batched serving path (micro-batches, waves,
  stacked states: `ktstream.serving.runner.ModelRunner` in a `Processor` and
  `Engine` over a `MemorySource`), every probe event published as JSON, in
  four micro-batches (their boundaries cut steps of some learners).

``forward`` itself against serving is `serving_equivalence`. Driving the engine
puts the gate above it in the package layers (pyproject.toml's import-linter
contracts); the engine never imports the gate.
"""

from __future__ import annotations

import json
from typing import Callable

import torch

from ktstream.core import Record
from ktstream.data.histories import Histories, LearnerHistory
from ktstream.data.vocab import Vocabulary
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.engine.records import MemorySink, MemorySource
from ktstream.engine.replay import replay_order
from ktstream.engine.state_cache import StateCache
from ktstream.leakage.config import GateConfig
from ktstream.leakage.probe import batch_of, forward_probs, in_mode, max_diff
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving.runner import ModelRunner
from ktstream.training.trainer import forward_windows, predict_histories

PATHS = ("forward_carried", "predict_histories", "windows_train", "engine")
RULE = "max |p_path - p_serving| over every path <= bound"


@torch.no_grad()
def forward_carried(model: KTModel, h: LearnerHistory, chunk: int) -> torch.Tensor:
    """(T, K): ``forward`` over windows cut at step starts about every ``chunk`` positions, state carried."""
    model.eval()
    hist, T = batch_of([h]), len(h)
    cuts = [0]
    for c in range(chunk, T, chunk):
        s = int(h.step_start[c])  # back to where c's step begins: a step is never cut
        if s > cuts[-1]:
            cuts.append(s)
    cuts.append(T)
    out, state = [], None
    for a, b in zip(cuts, cuts[1:]):
        log_probs, state = model(hist.window(a, b), state)
        out.append(log_probs.exp()[0])
    return torch.cat(out)


@torch.no_grad()
def windows_train(model: KTModel, hist: Histories, chunk: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(probs (B, T, K), keep (B, T)) of ``forward_windows`` in training mode with dropout 0."""
    with in_mode(model, "train_nodrop", seed):
        parts = list(forward_windows(model, hist, chunk))
    return torch.cat([p.exp() for p, _, _ in parts], 1), torch.cat([k for _, k, _ in parts], 1)


ENGINE_BATCHES = 4  # micro-batches the probe events are cut into: steps get cut by micro-batch boundaries


def engine_probs(model: KTModel, learners: list[LearnerHistory]) -> tuple[torch.Tensor, int]:
    """(probs (B, T, K), dead letters): the probe histories served by the engine, in ``ENGINE_BATCHES``
    micro-batches (a step cut by a micro-batch boundary must still be predicted from its start)."""
    # ids are already encoded: vocabularies whose index of "k" is k hand them back unchanged
    items = Vocabulary([str(i) for i in range(2, model.n_items)])
    concepts = Vocabulary([str(i) for i in range(2, model.n_concepts)])
    records = []
    for b, h in enumerate(learners):
        for t in range(len(h)):
            r = {"event_id": f"{b}:{t}", "learner_id": f"probe-{b}", "item_id": str(int(h.items[t])),
                 "concept_ids": [str(int(c)) for c in h.concepts[t] if c > 0], "seq": t,
                 "step_id": f"{b}:{int(h.step_start[t])}"}
            if h.responses[t] >= 0:
                r["response"] = int(h.responses[t])
            if torch.isfinite(torch.tensor(h.times[t])):
                r["event_time"] = int(round(float(h.times[t]) * 1000))
            records.append(r)
    source = MemorySource(Record("gate.events", 0, i, r["learner_id"].encode(), json.dumps(r).encode(), 0)
                          for i, r in enumerate(replay_order(records)))
    sink = MemorySink()
    processor = Processor(ModelRunner(model.eval(), items, concepts, "gate"), StateCache(1 << 34), "gate.predictions",
                          "gate.dead", "dead-letter", max_record_bytes=1 << 16)
    engine = Engine(source, sink, processor, max_batch=len(records) // ENGINE_BATCHES + 1, poll_timeout_s=0.0)
    while source.pending:
        engine.step()
    B, T = len(learners), max(len(h) for h in learners)
    probs = torch.full((B, T, model.n_categories), float("nan"), dtype=torch.float64)
    dead = 0
    for o in sink.flushed:
        if o.topic != "gate.predictions":
            dead += 1
            continue
        msg = json.loads(o.value)
        b, t = (int(x) for x in msg["event_id"].split(":"))
        probs[b, t] = torch.tensor(msg["probs"], dtype=torch.float64)
    return probs, dead


def path_equivalence(model: KTModel, learners: list[LearnerHistory], cfg: GateConfig) -> CheckResult:
    bound = cfg.fp64_serving_atol if cfg.precision == "fp64" else cfg.fp32_serving_atol
    hist = batch_of(learners)
    B, T = hist.shape
    model.eval()
    served, _ = predict_stepwise(model, hist)
    served = served.double()
    valid = hist.mask & (hist.responses >= 0)
    chunk = cfg.path_chunk
    runs: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {
        "predict_histories": lambda: (_padded(predict_histories(model, learners, len(learners), "cpu", chunk), T),
                                      served, valid),
        "windows_train": lambda: _train_pair(model, hist, chunk, cfg.seed, valid),
        "engine": lambda: (engine_probs(model, learners)[0], served, valid),
    }
    if model.carries_state:
        runs["forward_carried"] = lambda: (_padded([forward_carried(model, h, chunk) for h in learners], T),
                                           served, valid)
    per_path, where, worst = {}, "", 0.0
    for name in PATHS:
        if name not in runs:
            per_path[name] = None  # the model carries no state: forward takes none
            continue
        got, ref, keep = runs[name]()
        diff, loc = max_diff(got.double(), ref.double(), keep)
        per_path[name] = diff
        if diff > worst:
            worst = diff
            if loc is not None:
                b, t = loc
                where = (f"{name}: learner {learners[b].learner_id!r}, position {t} (step start "
                         f"{int(hist.step_start[b, t])}) differs from serving by {diff:.3g}")
    skipped = [n for n, v in per_path.items() if v is None]
    return CheckResult.judge("path_equivalence", worst, bound, worst <= bound, RULE,
                             where if worst > bound else f"{B} learners x up to {T} positions, chunk {chunk}: "
                             + ", ".join(n for n in PATHS if n not in skipped)
                             + (f" (not applicable: {', '.join(skipped)})" if skipped else ""),
                             per_path=per_path, chunk=chunk)


def _padded(rows: list, T: int) -> torch.Tensor:
    """Per-learner (T_b, K) predictions -> (B, T, K), NaN beyond each learner's end."""
    rows = [torch.as_tensor(r, dtype=torch.float64) for r in rows]
    out = torch.full((len(rows), T, rows[0].shape[-1]), float("nan"), dtype=torch.float64)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return out


def _train_pair(model: KTModel, hist: Histories, chunk: int, seed: int, valid: torch.Tensor):
    probs, keep = windows_train(model, hist, chunk, seed)
    return probs, forward_probs(model, hist, "train_nodrop", seed), keep & valid
