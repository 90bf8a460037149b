"""Shared tools of the model checks: a private copy of the model, sampled learners, forward modes.

Three ways to run the training path, because a leak may live in either mode:

``eval``
    ``model.eval()``: what evaluation and serving-equivalent scoring use.
``train``
    ``model.train()`` with dropout active, the RNG seeded identically before
    each of the two runs being compared. Both runs see the same batch shape,
    so they draw the same dropout masks, and any difference comes from the
    perturbation. This is the real training forward (batch statistics and all).
``train_nodrop``
    ``model.train()`` with every ``nn.Dropout`` module, RNN and
    ``nn.MultiheadAttention`` dropout set to 0, for comparisons across batch
    shapes, where seeded masks cannot line up. A model that stays random after
    that (dropout drawn outside those modules) cannot be checked in training
    mode across batches, and the check says so.

Buffers (e.g. batch-norm running statistics) changed by a training-mode run
are restored afterwards, so the runs do not disturb one another.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator, Sequence

import torch
from torch import nn

from ktstream.data.histories import Histories, LearnerHistory, collate
from ktstream.models.base import KTModel

MODES = ("eval", "train", "train_nodrop")


def private_copy(model: KTModel, precision: str) -> KTModel:
    """A CPU copy in float64 (``"fp64"``) or float32, so the gate never touches the caller's model."""
    m = copy.deepcopy(model).cpu()
    return m.double() if precision == "fp64" else m.float()


def probe_length(model: KTModel, max_length: int) -> int:
    """History length for the checks: ``max_length``, raised to cross the model's window three times
    (`probe_data.probe_histories` continues shorter learners with others to reach it)."""
    field_ = model.receptive_field()
    return max(max_length, 3 * field_ + 5) if field_ else max_length


@contextlib.contextmanager
def no_dropout(model: nn.Module) -> Iterator[None]:
    """Temporarily set the probability of every dropout the model declares as a module to 0."""
    saved: list[tuple[nn.Module, str, float]] = []
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            saved.append((m, "p", m.p))
        elif isinstance(m, (nn.RNNBase, nn.MultiheadAttention)):
            saved.append((m, "dropout", m.dropout))
    try:
        for m, attr, _ in saved:
            setattr(m, attr, 0.0)
        yield
    finally:
        for m, attr, value in saved:
            setattr(m, attr, value)


@contextlib.contextmanager
def in_mode(model: KTModel, mode: str, seed: int = 0) -> Iterator[None]:
    """Run the block in one of `MODES` with the RNG seeded; mode, RNG and buffers restored afterwards."""
    assert mode in MODES, f"mode must be one of {MODES}, got {mode!r}"
    was_training = model.training
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    try:
        model.train(mode != "eval")
        with torch.random.fork_rng(devices=[]), (no_dropout(model) if mode == "train_nodrop"
                                                 else contextlib.nullcontext()):
            torch.manual_seed(seed)
            yield
    finally:
        model.train(was_training)
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])


@torch.no_grad()
def forward_probs(model: KTModel, hist: Histories, mode: str, seed: int = 0) -> torch.Tensor:
    """Training-path probabilities (B, T, K) in one of `MODES`; see the module docstring."""
    with in_mode(model, mode, seed):
        log_probs, _ = model(hist)
    return log_probs.exp()


def is_deterministic(model: KTModel, hist: Histories, mode: str) -> bool:
    """Whether two runs with different seeds agree (dropout left outside modules breaks this)."""
    return torch.equal(forward_probs(model, hist, mode, seed=1), forward_probs(model, hist, mode, seed=2))


def batch_of(learners: Sequence[LearnerHistory]) -> Histories:
    return collate(list(learners))


def max_diff(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> tuple[float, tuple[int, int] | None]:
    """Largest |a - b| over positions ``keep`` (B, T), and where it is (row, position)."""
    if not bool(keep.any()):
        return 0.0, None
    d = (a - b).abs().amax(-1).masked_fill(~keep, 0.0)  # (B, T)
    d = torch.nan_to_num(d, nan=float("inf"))
    flat = int(d.argmax())
    return float(d.max()), divmod(flat, d.shape[1])
