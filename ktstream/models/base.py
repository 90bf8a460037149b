"""The knowledge-tracing model contract: two paths over the same parameters.

Training path
    ``forward(histories, state=None) -> (log_probs, final_state)``.
    ``log_probs[b, t]`` (B, T, K) is the *prequential* prediction for position t:
    a function of the learner's interactions at positions < ``step_start[b, t]``
    (plus ``state``, the learner's state before position 0) and of t's query part
    (item, concepts, time) only. Never of t's response, of anything later, or of
    another row of the batch. Padded positions (mask False) must not change the
    final state. ``final_state`` is the serving state after the last valid
    position (models that cannot carry state return None and declare a
    ``receptive_field``).

Serving path (batched over learners, B = learners in the wave)
    ``init_state(B)``: state of a learner with no history (dict of tensors, leading dim B).
    ``predict(state, query) -> probs`` (B, K): never mutates ``state``. With
    ``describe=True`` it returns ``(probs, extras)``: per-learner outputs that explain the
    prediction (ability, mastery, attention; leading dim B), ``{}`` for a model with none.
    ``update(state, interaction) -> new_state``: applies one interaction per
    learner; returns a new dict and leaves the input untouched, so a caller can
    stage changes and drop them (the commit protocol relies on this).

Invariant 2 (train/serve equivalence): feeding a history through ``predict``
then ``update`` one interaction at a time (all queries of a step predicted
before the step's updates) gives ``forward``'s outputs within 1e-5 in fp32.

How many learners' states are held and batched for serving is the serving layer's
business (ktstream.serving); a family only names the kind of state it keeps
(``state_kind``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, NamedTuple

import torch
from torch import nn

from ktstream.data.histories import Histories, Interactions

State = dict[str, torch.Tensor]
Described = tuple[torch.Tensor, dict[str, torch.Tensor]]


class KTModel(nn.Module):
    """Base class of every model family; see the module docstring for the contract."""

    name: ClassVar[str] = "base"
    #: True when ``forward`` accepts and returns the serving state (recurrent models):
    #: long histories are then trained in chunks with the state carried over.
    carries_state: ClassVar[bool] = True
    #: Small constructor arguments (besides vocab sizes) for fast contract tests.
    tiny_config: ClassVar[dict[str, Any]] = {}
    #: The kind of state ``init_state`` returns, which picks how the serving layer holds it
    #: (ktstream.serving.layouts): "dense", tensors of one shape per learner; "windowed", the
    #: key/value windows of ktstream.models.kvcache.
    state_kind: ClassVar[str] = "dense"

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2):
        super().__init__()
        if n_categories < 2:
            raise ValueError(f"n_categories must be >= 2, got {n_categories}")
        self.n_items = n_items
        self.n_concepts = n_concepts
        self.n_categories = n_categories

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State | None]:
        """Prequential log-probabilities (B, T, K) of every position, and the state after the last."""
        raise NotImplementedError

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        """The state of ``batch_size`` learners with no history (leading dim B)."""
        raise NotImplementedError

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """Probabilities (B, K) of each response category for one query per learner, from ``state``
        (never mutated). ``describe``: also the per-learner extras, ``(probs, extras)``; with
        ``max_values``, extras of more numbers per learner may be left out."""
        raise NotImplementedError

    def update(self, state: State, interaction: Interactions) -> State:
        """A new state after one interaction per learner; ``state`` is left as it was."""
        raise NotImplementedError

    def training_loss(self, batch: Histories, base_loss: Callable[[Histories], tuple[torch.Tensor, int]]
                      ) -> tuple[torch.Tensor, int]:
        """The summed training loss of ``batch`` and the number of positions it scores.

        ``base_loss(batch)`` is the trainer's negative log-likelihood of the prequential predictions
        (chunked, step-aware). A family whose objective adds terms (adversarial, contrastive, a bias
        branch) overrides this and adds them; the serving path and ``forward`` stay what they are.
        """
        return base_loss(batch)

    def receptive_field(self) -> int | None:
        """Positions of history a prediction can depend on (None: unbounded, recurrent)."""
        return None

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-serialisable, so the registry can rebuild the model."""
        raise NotImplementedError


class StepFlags(NamedTuple):
    """What a training loop over positions needs to know of each step, read with one device sync: ``starts``
    and ``applied`` (B, T), and per position whether every row starts a step, any row is applied and every
    row is (where a select over rows picks everything, it can be skipped)."""

    starts: torch.Tensor
    applied: torch.Tensor
    all_start: list[bool]
    any_applied: list[bool]
    all_applied: list[bool]

    @classmethod
    def of(cls, histories: Histories) -> "StepFlags":
        T = histories.shape[1]
        starts = histories.step_start == torch.arange(T, device=histories.step_start.device)
        applied = histories.applied  # a prediction request writes nothing, as in serving
        return cls(starts, applied, *(x.tolist() for x in (starts.all(0), applied.any(0), applied.all(0))))


def select_state(state: State, rows: torch.Tensor) -> State:
    return {k: v[rows] for k, v in state.items()}


def where_state(cond: torch.Tensor, new: State, old: State) -> State:
    """Row-wise choice: rows where ``cond`` (B,) is True take ``new``."""
    out = {}
    for k, v in new.items():
        c = cond.view(-1, *([1] * (v.dim() - 1)))
        out[k] = torch.where(c, v, old[k])
    return out


def gather_steps(per_prefix: torch.Tensor, step_start: torch.Tensor) -> torch.Tensor:
    """Pick, for each position t, the row computed after ``step_start[b, t]`` interactions.

    per_prefix: (B, T+1, ...) where index i holds the value after i interactions.
    Returns (B, T, ...).
    """
    B, T = step_start.shape
    idx = step_start.view(B, T, *([1] * (per_prefix.dim() - 2))).expand(B, T, *per_prefix.shape[2:])
    return per_prefix.gather(1, idx)
