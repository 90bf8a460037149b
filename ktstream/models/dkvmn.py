"""DKVMN: Dynamic Key-Value Memory Networks (Zhang et al., WWW 2017).

A key memory (N x Dk) shared by all learners addresses concepts; each learner
owns a value memory (N x Dv) that is read for a prediction and changed by
erase/add after the response is known. Letters: B learners, T positions,
N memory slots, K response categories.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, Prepared, derived
from ktstream.models.base import Described, KTModel, State, StepFlags
from ktstream.models.embeddings import InteractionEmbedding, QuestionEmbedding
from ktstream.models.families import register


class CategoricalHead(nn.Module):
    """Summary features -> log-probabilities of the K response categories (K=2: the binary head)."""

    def __init__(self, summary_dim: int, n_categories: int):
        super().__init__()
        self.linear = nn.Linear(summary_dim, n_categories)

    def forward(self, summary: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.linear(summary), dim=-1)


@register
class DKVMN(KTModel):
    name = "dkvmn"
    carries_state = True
    tiny_config = {"memory_size": 5, "key_dim": 8, "value_dim": 12, "summary_dim": 8}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, memory_size: int = 20,
                 key_dim: int = 50, value_dim: int = 100, summary_dim: int = 50, dropout: float = 0.0,
                 use_items: bool = True):
        super().__init__(n_items, n_concepts, n_categories)
        self.memory_size, self.key_dim, self.value_dim = memory_size, key_dim, value_dim
        self.summary_dim, self.dropout_p, self.use_items = summary_dim, dropout, use_items
        self.question = QuestionEmbedding(n_items, n_concepts, key_dim, use_items)
        self.interaction = InteractionEmbedding(n_items, n_concepts, n_categories, value_dim, use_items)
        self.keys = nn.Parameter(torch.randn(memory_size, key_dim) * (1.0 / key_dim**0.5))  # (N, Dk)
        self.value0 = nn.Parameter(torch.randn(memory_size, value_dim) * 0.1)  # (N, Dv)
        self.erase = nn.Linear(value_dim, value_dim)
        self.add = nn.Linear(value_dim, value_dim)
        self.summary = nn.Linear(value_dim + key_dim, summary_dim)
        self.drop = nn.Dropout(dropout)
        self.head = self._make_head()

    def _make_head(self) -> nn.Module:
        return CategoricalHead(self.summary_dim, self.n_categories)

    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    memory_size=self.memory_size, key_dim=self.key_dim, value_dim=self.value_dim,
                    summary_dim=self.summary_dim, dropout=self.dropout_p, use_items=self.use_items)

    # -- memory blocks ---------------------------------------------------
    def _address(self, items: torch.Tensor, concepts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The question's key (..., Dk) and its weights over the memory slots (..., N)."""
        key = self.question(items, concepts)  # (..., Dk)
        return key, F.softmax(key @ self.keys.t(), dim=-1)  # (..., N)

    def _address_of(self, x: Interactions) -> tuple[torch.Tensor, torch.Tensor]:
        """``_address`` of one interaction per learner, as prepared for the micro-batch if it was."""
        key = derived(x, "key")
        return self._address(x.items, x.concepts) if key is None else (key, derived(x, "weights"))

    def _value_of(self, x: Interactions) -> torch.Tensor:
        """The interaction embedding (B, Dv) written to memory, as prepared if it was."""
        value = derived(x, "value")
        return self.interaction(x.items, x.concepts, x.responses) if value is None else value

    def prepare(self, interactions: Interactions) -> Prepared:
        key, weights = self._address_of(interactions)
        return Prepared.of(interactions, {"key": key, "weights": weights, "value": self._value_of(interactions)})

    @staticmethod
    def _read(weights: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return (weights.unsqueeze(-2) @ memory).squeeze(-2)  # (B, 1, N) @ (B, N, Dv) -> (B, Dv)

    def _erase_add(self, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The erase and add vectors (..., Dv) of interaction embeddings (..., Dv)."""
        return torch.sigmoid(self.erase(value)), torch.tanh(self.add(value))

    @staticmethod
    def _erase_then_add(memory: torch.Tensor, weights: torch.Tensor, erase: torch.Tensor,
                        add: torch.Tensor) -> torch.Tensor:
        """memory * (1 - w * erase) + w * add, with two (B, N, Dv) temporaries instead of four."""
        return torch.addcmul(memory, weights.unsqueeze(-1), add.unsqueeze(1) - erase.unsqueeze(1) * memory)

    def _write(self, memory: torch.Tensor, weights: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return self._erase_then_add(memory, weights, *self._erase_add(value))

    def _memory_pass(self, memory: torch.Tensor, weights: torch.Tensor, value: torch.Tensor,
                     histories: Histories) -> tuple[torch.Tensor, torch.Tensor]:
        """The recurrence over positions: each position's read (B, T, Dv) of the memory as its step
        started, and the memory after the last applied write (B, N, Dv). Erase and add depend on the
        interaction alone, so they are computed for every position at once, outside the loop."""
        B, T = histories.shape
        erase, add = self._erase_add(value)
        f = StepFlags.of(histories)
        at_step_start, reads = memory, []
        rows = (f.starts.view(B, T, 1, 1).unbind(1), f.applied.view(B, T, 1, 1).unbind(1))  # per position, (B, 1, 1)
        for t, (starts, applies) in enumerate(zip(*rows)):
            at_step_start = memory if f.all_start[t] else torch.where(starts, memory, at_step_start)
            reads.append(self._read(weights[:, t], at_step_start))
            if f.any_applied[t]:
                written = self._erase_then_add(memory, weights[:, t], erase[:, t], add[:, t])
                memory = written if f.all_applied[t] else torch.where(applies, written, memory)
        if not reads:
            return value.new_zeros(B, 0, self.value_dim), memory
        return torch.stack(reads, dim=1), memory

    def _log_probs(self, read: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        summary = torch.tanh(self.summary(torch.cat([read, key], dim=-1)))
        return self.head(self.drop(summary), key)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        memory = state["memory"] if state is not None else self.value0.unsqueeze(0).expand(B, -1, -1)
        key, weights = self._address(histories.items, histories.concepts)  # (B, T, Dk), (B, T, N)
        value = self.interaction(histories.items, histories.concepts, histories.responses)  # (B, T, Dv)
        read, memory = self._memory_pass(memory, weights, value, histories)
        return self._log_probs(read, key), {"memory": memory}

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        return {"memory": self.value0.detach().unsqueeze(0).expand(batch_size, -1, -1).clone()}

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        key, weights = self._address_of(query)
        probs = self._log_probs(self._read(weights, state["memory"]), key).exp()
        return (probs, {}) if describe else probs

    def update(self, state: State, interaction: Interactions) -> State:
        _, weights = self._address_of(interaction)
        return {"memory": self._write(state["memory"], weights, self._value_of(interaction))}
