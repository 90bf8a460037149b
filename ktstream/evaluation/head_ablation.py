"""Head ablation at inference: one attention head's output set to zero, the model otherwise unchanged.

`masked_head` is a context manager that registers a forward pre-hook on the output projection (``o``) of
every `ktstream.models.attention.WindowAttention` of a model (or of one layer) and zeroes head ``h``'s block
of its input, (B, Tq, D) with head h at columns ``h * dk .. (h + 1) * dk``. The attention module itself is
not changed: the hook lives here and is removed on exit, so the model predicts as before afterwards.

>>> from ktstream.models import create
>>> m = create("sakt", n_items=5, n_concepts=3, dim=8, heads=2)
>>> [name for name, _ in attention_layers(m)]
['retriever.0.attn']
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from torch import nn

from ktstream.models.attention import WindowAttention


def attention_layers(model: nn.Module) -> list[tuple[str, WindowAttention]]:
    """(name, module) of every windowed attention layer of ``model``, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, WindowAttention)]


@contextmanager
def masked_head(model: nn.Module, head: int, layer: str | None = None) -> Iterator[None]:
    """Within the block, head ``head`` of every attention layer (or of the layer named ``layer``) adds nothing."""
    hooks = []
    for name, attn in attention_layers(model):
        if layer is not None and name != layer:
            continue
        assert 0 <= head < attn.heads, f"head {head} out of range: {name} has {attn.heads} heads"
        lo, hi = head * attn.dk, (head + 1) * attn.dk

        def zero(_module, inputs, lo=lo, hi=hi):
            (x,) = inputs  # (B, Tq, D): the heads' outputs side by side, before the output projection
            x = x.clone()
            x[..., lo:hi] = 0
            return (x,)

        hooks.append(attn.o.register_forward_pre_hook(zero))
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def head_count(model: nn.Module) -> int:
    """Heads per attention layer (0: the model has no windowed attention)."""
    layers = attention_layers(model)
    return layers[0][1].heads if layers else 0
