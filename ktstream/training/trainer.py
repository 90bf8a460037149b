"""Fit a model on learner histories, select on a validation split, predict.

Long histories are cut into windows of ``chunk`` positions. Models that
``carries_state`` carry their state across windows, detached (truncated BPTT);
others see ``receptive_field()`` earlier positions as context and are scored
only on the window's own positions. A window that ends inside a learner's step
ends early for that learner, at the step's start, so the state it carries is
the state as of the step's start: the step's members are predicted from it (as
in serving) and applied in the next window.

Selection (early stopping, best epoch) reads the validation split only; the
caller scores the test split once, afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ktstream.data.histories import Histories, LearnerHistory, collate
from ktstream.malloc import tune_malloc
from ktstream.models.base import KTModel, select_state
from ktstream.scoring.binary import auc
from ktstream.training.distributed import DataParallel
from ktstream.training.precision import check_autocast

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    epochs: int = 30
    #: positions per training batch, padding included: learners of similar length are grouped until
    #: the next one would pass it, so every optimizer step sees about as many predictions (a batch of
    #: 32 learners with 3 interactions each would weigh as much as one of 32 with 1,000). 0: batch by
    #: ``batch_size`` learners instead.
    batch_tokens: int = 1600
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: int = 4
    #: multiply the learning rate by this when an epoch does not improve the validation metric
    lr_decay: float = 0.5
    chunk: int = 200
    max_grad_norm: float = 5.0
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    #: "bf16": each training step's forward and loss run under torch.autocast (parameters, gradients and
    #: optimizer state stay fp32; bf16 needs no loss scaling). Predictions, for selection too, stay fp32:
    #: they score the model as it will serve.
    autocast: str | None = None
    eval_batch_size: int = 64
    progress: bool = True
    #: keep freed tensor memory in the C heap for the next step (ktstream.malloc; process-wide): on the
    #: CPU the attention families otherwise spend about as long in page faults as in training
    malloc_tuning: bool = True


@dataclass
class FitResult:
    best_epoch: int
    best_valid: float
    selection_metric: str
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    config: dict = field(default_factory=dict)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


AUTOCAST_DTYPES = {None: None, "bf16": torch.bfloat16}


def _start(model: KTModel, cfg: TrainConfig) -> torch.device:
    """Checks made before training; moves the model to its device.

    Autocast is entered per step, never around the whole run: within one autocast context torch
    caches the low-precision copy of each weight, so a run inside one would keep training on the
    weights of its first step.
    """
    if cfg.autocast not in AUTOCAST_DTYPES:
        raise ValueError(f"autocast must be one of {list(AUTOCAST_DTYPES)}, got {cfg.autocast!r}")
    device = resolve_device(cfg.device)
    if torch.is_autocast_enabled(device.type):
        raise RuntimeError("training called inside torch.autocast: its weight-cast cache would keep the first "
                           "step's weights for the whole run; set TrainConfig.autocast instead")
    check_autocast(device, AUTOCAST_DTYPES[cfg.autocast], "TrainConfig.autocast")
    model.to(device)
    return device


def _step_precision(device: torch.device, cfg: TrainConfig):
    if cfg.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[cfg.autocast])


def _batches(histories: Sequence[LearnerHistory], batch_size: int, rng: np.random.Generator | None,
             tokens: int = 0) -> list[list[LearnerHistory]]:
    """Batches of learners of similar length (less padding); shuffled when rng is given.

    With ``tokens`` a batch grows until (learners x longest length) would pass it, otherwise it
    holds ``batch_size`` learners. A learner longer than ``tokens`` is a batch of its own.

    >>> hs = [[0] * n for n in (3, 3, 3, 3, 10, 20)]  # anything with a length
    >>> [[len(h) for h in b] for b in _batches(hs, 2, None, tokens=12)]
    [[3, 3, 3, 3], [10], [20]]
    """
    order = sorted(range(len(histories)), key=lambda i: len(histories[i]))
    if tokens > 0:
        groups, current = [], []
        for i in order:  # ascending length: the newest learner is the longest of its group
            if current and len(histories[i]) * (len(current) + 1) > tokens:
                groups.append(current)
                current = []
            current.append(i)
        groups += [current] if current else []
    else:
        groups = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        rng.shuffle(groups)
    return [[histories[i] for i in g] for g in groups]


def _windows(batch: Histories, chunk: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of each window of at most ``chunk`` positions.

    A window ends where no learner of the batch is inside a step (every row starts a step there,
    or is padding), when such a point exists in its second half: no learner's part of the window
    then ends early (``forward_windows``), and one forward predicts the whole window.
    """
    T = batch.shape[1]
    positions = torch.arange(T, device=batch.step_start.device)
    clean = ((batch.step_start == positions) | ~batch.mask).all(0).tolist()  # (T,) a cut before t splits nothing
    start = 0
    while start < T:
        stop = min(T, start + chunk)
        if stop < T:
            stop = next((c for c in range(stop, start + max(1, chunk // 2), -1) if clean[c]), stop)
        yield start, stop
        start = stop


def _step_cuts(batch: Histories, stop: int, applied_to: torch.Tensor) -> torch.Tensor:
    """(B,) where each learner's applied part of a window ending at ``stop`` ends: ``stop``, or the
    first position of the step that ``stop`` would split (never before ``applied_to``, what its
    state already holds)."""
    if stop >= batch.shape[1]:
        return torch.full_like(applied_to, stop)
    step = batch.step_start[:, stop]
    inside = batch.mask[:, stop] & (step < stop)
    return torch.where(inside, torch.maximum(step, applied_to), torch.full_like(step, stop))


def _predict_span(model: KTModel, batch: Histories, first: torch.Tensor, last: torch.Tensor, state,
                  start: int, width: int):
    """Row b fed its positions [first[b], last[b]) after ``state`` (the state as of ``first``; models
    that carry none see ``receptive_field()`` positions before as context). Returns the log-probs
    (B, width, K) at positions [start, start + width) (meaningful where first <= p < last) and the
    state after, or (None, state) when no row has a position to feed."""
    field_ = model.receptive_field()
    ctx = first if model.carries_state or field_ is None else (first - field_).clamp(min=0)
    part = batch.spans(ctx, last)
    if part.shape[1] == 0:
        return None, state
    if model.carries_state:
        log_probs, state = model(part, state)
    else:
        log_probs, _ = model(part)
    if part.shape[1] == width and bool((ctx == start).all()):
        return log_probs, state
    idx = ((start - ctx).unsqueeze(1) + torch.arange(width, device=ctx.device)).clamp(0, part.shape[1] - 1)
    return log_probs.gather(1, idx.unsqueeze(-1).expand(-1, -1, log_probs.shape[-1])), state


def forward_windows(model: KTModel, batch: Histories, chunk: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, Histories]]:
    """Yield (log_probs, loss_mask, window) for each window [start, stop) of a batch, in order.

    Every position is predicted from the state as of its step's start, as the serving path does
    (invariant 1), also where a window cuts a step: a learner whose step ``stop`` would split
    carries the state as of that step's start, the step's members before ``stop`` are predicted
    from it by a second, short forward, and the next window feeds the learner from the step's
    start on.
    """
    B, T = batch.shape
    applied_to = torch.zeros(B, dtype=torch.long, device=batch.items.device)  # positions the carried state holds
    state = None
    for start, stop in _windows(batch, chunk):
        width = stop - start
        cut = _step_cuts(batch, stop, applied_to)
        log_probs, state_after = _predict_span(model, batch, applied_to, cut, state, start, width)
        split = (cut < stop).nonzero().squeeze(1)  # learners inside a step at ``stop``
        if len(split):
            first = cut[split] if not model.carries_state else cut[split].clamp(min=start)
            mates, _ = _predict_span(model, batch.select(split), first, torch.full_like(first, stop),
                                     None if state_after is None else select_state(state_after, split),
                                     start, width)  # (S, width, K)
            positions = torch.arange(start, stop, device=cut.device)
            in_step = (positions >= cut[split].unsqueeze(1)).unsqueeze(-1)  # (S, width, 1)
            if log_probs is None:
                log_probs = mates.new_zeros(B, width, mates.shape[-1])
            log_probs = log_probs.index_put((split,), torch.where(in_step, mates, log_probs[split]))
        if model.carries_state and state_after is not None:
            state = {k: v.detach() for k, v in state_after.items()}
        applied_to = cut
        window = batch.window(start, stop)
        yield log_probs, window.applied, window


def _loss(model: KTModel, batch: Histories, chunk: int) -> tuple[torch.Tensor, int]:
    total, count = 0.0, 0
    for log_probs, keep, window in forward_windows(model, batch, chunk):
        if keep.any():
            total = total + F.nll_loss(log_probs[keep], window.responses[keep], reduction="sum")
            count += int(keep.sum())
    return total, count


#: Most positions (learners x padded length of a window) in one evaluation batch. Larger batches
#: make tensors over glibc's 32 MB mmap threshold ((B, heads, L, L) attention scores first), whose
#: pages are then faulted in afresh on every batch (ktstream.malloc): on the CPU, evaluating AKT in
#: batches of 64 learners of 200 positions spent about as long in the kernel as in the model.
EVAL_POSITIONS = 3200


def eval_batches(lengths: Sequence[int], batch_size: int, max_positions: int | None = EVAL_POSITIONS,
                 chunk: int = 4000) -> Iterator[list[int]]:
    """Indices of learners (by ``lengths``) in evaluation batches of similar length, shortest first: at
    most ``batch_size`` learners and ``max_positions`` positions per window, padding included (None: no
    bound; a learner longer than the bound goes alone).

    >>> list(eval_batches([5, 300, 10, 200, 20], batch_size=2, max_positions=300))
    [[0, 2], [4], [3], [1]]
    """
    batch: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        width = min(lengths[i], chunk)  # the batch's longest: sorted by length
        full = len(batch) == batch_size or (max_positions is not None and (len(batch) + 1) * width > max_positions)
        if batch and full:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


@torch.no_grad()
def predict_histories(model: KTModel, histories: Sequence[LearnerHistory], batch_size: int = 64,
                      device: str | torch.device | None = None, chunk: int = 4000,
                      max_positions: int | None = EVAL_POSITIONS) -> list[np.ndarray]:
    """Prequential predictions (T, K) for every learner, via the training path, on ``device``
    (default: where the model's weights are), in ``eval_batches`` (``max_positions`` bounds them on the
    CPU only: CUDA's caching allocator keeps its memory, and larger batches keep a GPU busy)."""
    model.eval()
    device = next(model.parameters()).device if device is None else torch.device(device)
    bound = max_positions if device.type == "cpu" else None
    by_id = {}
    for idx in eval_batches([len(h) for h in histories], batch_size, bound, chunk):
        batch = collate([histories[i] for i in idx]).to(device)
        parts = []
        for log_probs, _, _ in forward_windows(model, batch, chunk):
            parts.append(log_probs.exp().float().cpu())
        probs = torch.cat(parts, dim=1).numpy()
        for row, i in enumerate(idx):
            by_id[i] = probs[row, : len(histories[i])]
    return [by_id[i] for i in range(len(histories))]


def score(histories: Sequence[LearnerHistory], probs: Sequence[np.ndarray], scored=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten to (responses, probs (N, K), 1-based positions) over positions with a response.

    ``scored`` optionally gives, per learner, a boolean array of positions to score.
    """
    ys, ps, pos = [], [], []
    for i, (h, p) in enumerate(zip(histories, probs)):
        keep = h.responses >= 0
        if scored is not None:
            keep &= scored[i]
        ys.append(h.responses[keep])
        ps.append(p[keep])
        pos.append(np.flatnonzero(keep) + 1)
    K = probs[0].shape[1] if len(probs) else 2
    return (np.concatenate(ys) if ys else np.zeros(0, np.int64),
            np.concatenate(ps) if ps else np.zeros((0, K)), np.concatenate(pos) if pos else np.zeros(0, np.int64))


def validation_metric(model: KTModel, histories, scored, cfg: TrainConfig, device) -> tuple[str, float]:
    probs = predict_histories(model, histories, cfg.eval_batch_size, device)
    y, p, _ = score(histories, probs, scored)
    if model.n_categories == 2:
        return "auc", auc(y, p[:, 1])
    nll = float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-9, None))))
    return "neg_log_loss", -nll


class BatchSource(Protocol):
    """Training data that makes its own batches (an archive streamed within a memory budget)."""

    def batches(self, batch_size: int, rng: np.random.Generator | None, tokens: int) -> Iterable[list[LearnerHistory]]:
        ...


def _epoch_batches(train, cfg: TrainConfig, rng) -> Iterable[list[LearnerHistory]]:
    if hasattr(train, "batches"):
        return train.batches(cfg.batch_size, rng, cfg.batch_tokens)
    return _batches(train, cfg.batch_size, rng, cfg.batch_tokens)


def _train_epoch(model, opt, train, cfg: TrainConfig, rng, device, desc: str, show: bool,
                 parallel: DataParallel | None = None) -> tuple[float, int]:
    """One pass over ``train``; with ``parallel``, this rank's share of every global batch, the step's
    loss divided by the global count of predictions and the gradients summed over ranks."""
    model.train()
    total, count = 0.0, 0
    batches = _epoch_batches(train, cfg, rng)
    for hs in tqdm(batches, total=len(batches) if hasattr(batches, "__len__") else None, disable=not show,
                   desc=desc, leave=False):
        hs = parallel.shard(hs) if parallel is not None else hs
        loss_sum, n = (0.0, 0)
        if hs:
            batch = collate(hs).to(device)
            with _step_precision(device, cfg):
                loss_sum, n = model.training_loss(batch, lambda b: _loss(model, b, cfg.chunk))
        n_all = parallel.total(n, device) if parallel is not None else n
        if n_all == 0:
            continue
        opt.zero_grad(set_to_none=True)
        if n:
            (loss_sum / n_all).backward()
        if parallel is not None:
            parallel.all_reduce_gradients(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        total += float(loss_sum.detach()) if n else 0.0
        count += n
    return total, count


def refit(model: KTModel, histories: Sequence[LearnerHistory], selected: FitResult, cfg: TrainConfig) -> KTModel:
    """Train a fresh model on ``histories`` (train + valid) for the epochs and learning
    rates that ``selected`` chose on validation. No data outside ``histories`` is read."""
    if cfg.malloc_tuning:
        tune_malloc()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = _start(model, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    show = cfg.progress and sys.stderr.isatty()
    for record in selected.history[: selected.best_epoch]:
        for group in opt.param_groups:
            group["lr"] = record["lr"]
        _train_epoch(model, opt, histories, cfg, rng, device, f"refit epoch {record['epoch']}", show)
    return model.eval()


def fit(model: KTModel, train: Sequence[LearnerHistory] | BatchSource, valid: Sequence[LearnerHistory],
        cfg: TrainConfig | None = None, valid_scored=None, parallel: DataParallel | None = None) -> FitResult:
    """Train with Adam; keep the weights of the epoch best on ``valid`` (early stopping).

    ``train`` is a list of histories or a `BatchSource`; ``parallel``: train data-parallel among the
    ranks of torch.distributed's process group (``ktstream.training.distributed``; every rank calls fit
    with the same data and settings). The train loss in the history is this rank's share.
    """
    cfg = cfg or TrainConfig()
    assert len(valid) > 0, "fit needs non-empty validation histories"
    assert hasattr(train, "batches") or len(train) > 0, "fit needs non-empty training histories"
    if cfg.malloc_tuning:
        tune_malloc()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = _start(model, cfg)
    if parallel is not None:
        parallel.broadcast_parameters(model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best, best_epoch, best_state, history, bad = -math.inf, -1, None, [], 0
    started = time.time()
    show = cfg.progress and sys.stderr.isatty()
    metric_name = "auc"
    for epoch in range(cfg.epochs):
        total, count = _train_epoch(model, opt, train, cfg, rng, device, f"epoch {epoch + 1}/{cfg.epochs}", show,
                                    parallel)
        metric_name, value = validation_metric(model, valid, valid_scored, cfg, device)
        history.append({"epoch": epoch + 1, "lr": opt.param_groups[0]["lr"], "train_loss": total / max(count, 1),
                        f"valid_{metric_name}": value, "seconds": round(time.time() - started, 1)})
        log.info("epoch %d train_loss %.4f valid_%s %.4f", epoch + 1, total / max(count, 1), metric_name, value)
        if value > best:
            best, best_epoch, bad = value, epoch + 1, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad += 1
            if bad >= cfg.patience:
                break
            for group in opt.param_groups:
                group["lr"] *= cfg.lr_decay
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return FitResult(best_epoch, best, metric_name, history, time.time() - started, asdict(cfg))
