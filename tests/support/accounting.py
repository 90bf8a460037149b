"""Every input offset accounted for among committed outputs: exactly one prediction or one dead letter.

At-least-once allows repeats of an offset's prediction (a batch processed again
after a failed commit); a consumer drops them by source offset, so they must
be of the same kind and carry the same probabilities.
"""

from __future__ import annotations

import torch


def account(predictions: list[dict], dead_letters: list[dict], offsets: set[tuple[int, int]], reference,
            atol: float = 1e-6) -> int:
    """Check the outputs against the input (partition, offset) pairs; returns the number of repeats.
    ``reference``: event id -> the uninterrupted run's probabilities."""
    kinds: dict[tuple[int, int], set[str]] = {}
    outputs = [("prediction", p) for p in predictions] + [("dead letter", d) for d in dead_letters]
    for kind, o in outputs:
        kinds.setdefault((o["source"]["partition"], o["source"]["offset"]), set()).add(kind)
    assert set(kinds) == offsets, f"missing {sorted(offsets - set(kinds))[:5]}, unexpected {sorted(set(kinds) - offsets)[:5]}"
    assert all(len(k) == 1 for k in kinds.values()), "an offset both predicted and dead-lettered"
    for p in predictions:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=atol), p["source"]
    return len(outputs) - len(kinds)
