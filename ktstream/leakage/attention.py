"""Attention masking: after every softmax, weights on keys a query may not read are exactly zero.

Hook protocol (read by the gate, implemented by attention models)::

    model.attention_maps(histories) -> list, one entry per attention layer/block

Each entry is either a tensor (B, H, T, T) of post-softmax weights, where
``[b, h, t, j]`` is how much query position t reads key position j, and key j
carries interaction j (its response), so weights on ``j >= step_start[b, t]``
must be 0; or a dict ``{"weights": tensor, "keys": "past" | "through_self",
"name": str}``. ``keys="through_self"`` declares keys that carry only query
parts (item, concepts, time; e.g. AKT's question encoder) or an encoder whose
output at t is read only by later steps: weights on ``j > t`` must be 0.
The weights must be the ones the forward pass uses (after every softmax,
top-k or renormalisation), computed in eval mode.

This is where "a second softmax after masking" (DisKT, sparseKT) shows
directly: masked keys get ``exp(0) / sum`` > 0 back.

Models without the hook and without attention modules: not applicable. The
windowed families (SAKT, AKT, simpleKT) are read with forward hooks until they
expose the method (`attention_hooks`). Any other model that holds attention
modules (``nn.MultiheadAttention`` or a class whose name contains "Attention")
but no hook fails: the gate fails closed.
"""

from __future__ import annotations

import torch
from torch import nn

from ktstream.data.histories import LearnerHistory
from ktstream.leakage.attention_hooks import windowed_attention_maps
from ktstream.leakage.config import GateConfig
from ktstream.leakage.probe import batch_of
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel

RULE = "max weight on disallowed keys <= bound"


def attention_modules(model: nn.Module) -> list[str]:
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, nn.MultiheadAttention) or "attention" in type(m).__name__.lower()]


def _entries(maps) -> list[tuple[str, torch.Tensor, str]]:
    out = []
    for i, m in enumerate(maps):
        if isinstance(m, torch.Tensor):
            out.append((f"map {i}", m, "past"))
        else:
            keys = m.get("keys", "past")
            assert keys in ("past", "through_self"), f"attention map {i}: keys must be 'past' or 'through_self'"
            out.append((m.get("name", f"map {i}"), m["weights"], keys))
    return out


def allowed_keys(step_start: torch.Tensor, keys: str) -> torch.Tensor:
    """(B, T, T) True where query t may read key j."""
    B, T = step_start.shape
    j = torch.arange(T).view(1, 1, T)
    if keys == "past":
        return j < step_start.unsqueeze(-1)
    return j <= torch.arange(T).view(1, T, 1)


@torch.no_grad()
def attention_masking(model: KTModel, learners: list[LearnerHistory], cfg: GateConfig) -> CheckResult:
    hist = batch_of(learners)
    B, T = hist.shape
    hook = getattr(model, "attention_maps", None)
    source = "attention_maps()"
    model.eval()
    if hook is not None:
        maps = hook(hist)
    else:
        maps, source = windowed_attention_maps(model, hist), "forward hooks on WindowAttention"
    if maps is None:
        held = attention_modules(model)
        if held:
            return CheckResult("attention_masking", "fail", None, 0.0, RULE,
                               f"model holds attention modules ({', '.join(held[:4])}) but has no "
                               "attention_maps(histories) hook returning its post-softmax weights")
        return CheckResult.not_applicable("attention_masking", "model has no attention")
    worst, where = 0.0, ""
    entries = _entries(maps)
    if not entries:
        return CheckResult("attention_masking", "fail", None, 0.0, RULE, f"{source} returned no maps")
    for name, w, keys in entries:
        if w.dim() == 3:
            w = w.unsqueeze(1)  # (B, T, T) -> (B, 1, T, T)
        if w.shape[0] != B or w.shape[-2:] != (T, T):
            return CheckResult("attention_masking", "fail", None, 0.0, RULE,
                               f"{name}: weights of shape {tuple(w.shape)}, expected (B, H, T, T) = ({B}, H, {T}, {T})")
        bad = ~allowed_keys(hist.step_start, keys) & hist.mask.unsqueeze(-1)  # (B, T, T) valid queries only
        leaked = torch.nan_to_num(w.abs().double(), nan=float("inf")).masked_fill(~bad.unsqueeze(1), 0.0)
        value = float(leaked.max()) if leaked.numel() else 0.0
        if value > worst:
            b, h, t, j = (int(x) for x in torch.nonzero(leaked == leaked.max())[0])
            worst = value
            where = (f"{name} ({keys}): head {h}, learner {learners[b].learner_id!r}, query {t} "
                     f"(step start {int(hist.step_start[b, t])}) reads key {j} with weight {value:.3g}")
    return CheckResult.judge("attention_masking", worst, 0.0, worst == 0.0, RULE,
                             where or f"{len(entries)} attention maps ({source}), {B} learners x {T} positions",
                             maps=[e[0] for e in entries])
