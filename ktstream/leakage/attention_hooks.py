"""Attention maps read with forward hooks, for models that hold attention but expose no `attention_maps`.

The windowed attention families (SAKT, AKT, simpleKT: `WindowedKT`) run every
attention through `WindowAttention`, whose forward returns ``(output,
weights)`` with weights (B, H, Tq, 1 + S [+ 1]): a "no history" slot first,
then one column per key, then (query encoder only) the query's own slot. In a
forward without a carried state the keys are the chunk's own positions in
order, so column ``1 + j`` is position j. This adapter records those weights,
with the query blocking switched off (one block holds every query), and labels
each call by what its keys may be:

- retriever layers and the query encoder (called with ``self_kv``): the past
  only (``"past"``: j < step_start[t]; the query's own slot is not a key);
- encoder stacks appending interactions: ``"through_self"`` (j <= t), as an
  interaction's encoding may read itself and is read only by later steps.

The model's own masks are not consulted: the gate derives what is allowed from
``step_start``. Once a model exposes ``attention_maps`` the gate uses that.
"""

from __future__ import annotations

import torch

from ktstream.data.histories import Histories
from ktstream.models.base import KTModel


def windowed_attention_maps(model: KTModel, hist: Histories) -> list[dict] | None:
    """Maps for a `WindowedKT`, or a model that runs one inside (a wrapper such as CORE: its forward runs
    the inner one's, whose attention is recorded); None for any other model. See module docstring."""
    from ktstream.models.attention import WindowAttention
    from ktstream.models.windowed import WindowedKT

    inner = next((m for m in model.modules() if isinstance(m, WindowedKT)), None)
    if inner is None:
        return None
    names = {id(m): n for n, m in model.named_modules()}
    retrieval = {id(b.attn) for b in inner.retriever}
    calls: list[tuple[torch.nn.Module, bool, torch.Tensor]] = []

    def record(module, args, kwargs, output):
        calls.append((module, kwargs.get("self_kv") is not None, output[1].detach()))

    handles = [m.register_forward_hook(record, with_kwargs=True) for m in model.modules()
               if isinstance(m, WindowAttention)]
    B, T = hist.shape
    had_block = "query_block" in vars(inner)
    saved = inner.query_block
    inner.query_block = max(T, 1)  # one block: every query sees the whole key range
    try:
        with torch.no_grad():
            model.eval()
            model(hist)
    finally:
        for h in handles:
            h.remove()
        if had_block:
            inner.query_block = saved
        else:
            del inner.query_block
    maps = []
    for module, with_self, w in calls:
        keys = "past" if id(module) in retrieval or with_self else "through_self"
        role = "retriever" if id(module) in retrieval else ("query encoder" if with_self else "encoder")
        maps.append({"weights": w[..., 1: 1 + T], "keys": keys, "name": f"{names[id(module)]} ({role})"})
    return maps
