"""Known-leaky designs, kept as fixtures the leakage gate must fail. Never registered.

(a) `PooledRouting`: mixture of heads whose router reads the mean over the
    whole sequence of a representation that contains responses (the RouterKT
    bug: each position learns the future's routing, hence its labels).
(b) `SecondSoftmax`: attention that applies softmax again after masking, so
    masked keys get ``exp(0) / sum`` back (DisKT, sparseKT).
(c) `TopKResoftmax`: top-k over rows that were already softmaxed, then softmax
    again: in rows with fewer than k visible keys, masked keys (weight 0) are
    picked and weighted again (sparseKT's top-k).
(d) `expanded_rows_data`: a DATA fixture, multi-concept questions expanded into
    one row per concept with the response copied (pyKT's preprocessing).
(e) `PeekingLSTM`: an LSTM whose prediction at t reads its state after r_t.
(f) `StepMateResponses`: an LSTM whose prediction at t reads the interactions
    before t, not before t's step: the responses of earlier items of the same
    step (revealed together, as an EdNet bundle) reach it. Invisible on data
    without steps.
(g) `NextEventTime`: an LSTM whose query carries the time until the learner's
    next event (known only once that event happened). Invisible on data
    without clocks.

Serving (`predict`/`update`) recomputes the training path over a stored
history buffer (`Recompute`), so each fixture is a complete `KTModel`: the
serving path then cannot see the future, which is itself a visible mismatch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, LearnerHistory
from ktstream.models.base import KTModel, State, gather_steps
from ktstream.models.embeddings import InteractionEmbedding, QuestionEmbedding

CAPACITY, WIDTH = 512, 4  # serving buffer: positions, concepts per interaction


class Recompute(KTModel):
    """Serving by re-running ``forward`` over the buffered past plus the query (no carried state)."""

    carries_state = False

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 8):
        super().__init__(n_items, n_concepts, n_categories)
        self.dim = dim
        self.question = QuestionEmbedding(n_items, n_concepts, dim)
        self.interaction = InteractionEmbedding(n_items, n_concepts, n_categories, dim)

    def config(self):
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories, dim=self.dim)

    def init_state(self, batch_size: int) -> State:
        z = torch.zeros(batch_size, CAPACITY, dtype=torch.long)
        return {"items": z, "concepts": torch.zeros(batch_size, CAPACITY, WIDTH, dtype=torch.long),
                "responses": z - 1, "times": torch.full((batch_size, CAPACITY), float("nan"), dtype=torch.float64),
                "length": torch.zeros(batch_size, dtype=torch.long)}

    def predict(self, state: State, query: Interactions, describe: bool = False, max_values: int | None = None):
        probs = self._predict(state, query)
        return (probs, {}) if describe else probs

    def _predict(self, state: State, query: Interactions) -> torch.Tensor:
        B, n = len(query), state["length"]
        T = int(n.max()) + 1
        rows = torch.arange(B)
        items, conc = state["items"][:, :T].clone(), state["concepts"][:, :T].clone()
        resp, times = state["responses"][:, :T].clone(), state["times"][:, :T].clone()
        items[rows, n] = query.items
        conc[rows, n] = F.pad(query.concepts, (0, WIDTH - query.concepts.shape[1]))[:, :WIDTH]
        resp[rows, n], times[rows, n] = query.responses, query.times
        mask = torch.arange(T).unsqueeze(0) <= n.unsqueeze(1)
        hist = Histories(items, conc, resp, times, torch.arange(T).expand(B, T).clone(), mask)
        log_probs, _ = self.forward(hist)
        return log_probs[rows, n].exp()

    def update(self, state: State, interaction: Interactions) -> State:
        new = {k: v.clone() for k, v in state.items()}
        rows, n = torch.arange(len(interaction)), state["length"]
        new["items"][rows, n] = interaction.items
        new["concepts"][rows, n] = F.pad(interaction.concepts, (0, WIDTH - interaction.concepts.shape[1]))[:, :WIDTH]
        new["responses"][rows, n], new["times"][rows, n] = interaction.responses, interaction.times
        new["length"] = n + 1
        return new


def _past_mask(h: Histories) -> torch.Tensor:
    """(B, T, T) True where query t may read key j: j before t's step, and real."""
    T = h.shape[1]
    return (torch.arange(T).view(1, 1, T) < h.step_start.unsqueeze(-1)) & h.mask.unsqueeze(1)


class _LSTMBase(Recompute):
    def __init__(self, n_items, n_concepts, n_categories=2, dim=8):
        super().__init__(n_items, n_concepts, n_categories, dim)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)

    def states(self, h: Histories) -> torch.Tensor:
        """(B, T+1, D): LSTM state after 0..T interactions."""
        out, _ = self.lstm(self.interaction(h.items, h.concepts, h.responses))
        return torch.cat([torch.zeros_like(out[:, :1]), out], 1)


class PooledRouting(_LSTMBase):
    """(a) Heads mixed by a router fed the sequence mean of interaction embeddings (responses included)."""

    name = "leaky-pooled-routing"

    def __init__(self, n_items, n_concepts, n_categories=2, dim=8, heads=3):
        super().__init__(n_items, n_concepts, n_categories, dim)
        self.heads = nn.Linear(2 * dim, heads * n_categories)
        self.router = nn.Linear(dim, heads)
        self.n_heads = heads

    def forward(self, h: Histories, state=None):
        B, T = h.shape
        prev = gather_steps(self.states(h), h.step_start)  # (B, T, D): before t's step, causal
        x = self.interaction(h.items, h.concepts, h.responses) * h.mask.unsqueeze(-1)
        pooled = x.sum(1) / h.mask.sum(1, keepdim=True).clamp(min=1)  # (B, D): THE BUG, the whole sequence
        route = F.softmax(self.router(pooled), -1).view(B, 1, self.n_heads, 1)
        logits = self.heads(torch.cat([prev, self.question(h.items, h.concepts)], -1))
        logits = logits.view(B, T, self.n_heads, self.n_categories)
        return F.log_softmax((route * logits).sum(2), -1), None


class _AttentionBase(Recompute):
    """One-head attention from the query's question to past interactions, with a 'no history' slot."""

    def __init__(self, n_items, n_concepts, n_categories=2, dim=8):
        super().__init__(n_items, n_concepts, n_categories, dim)
        self.null = nn.Parameter(torch.randn(2, dim) * 0.1)  # key, value
        self.out = nn.Linear(2 * dim, n_categories)

    def reweigh(self, w: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return w

    def weights(self, h: Histories) -> torch.Tensor:
        """(B, T, 1 + T) post-softmax weights, null slot first."""
        q, x = self.question(h.items, h.concepts), self.interaction(h.items, h.concepts, h.responses)
        B, T = h.shape
        keys = torch.cat([self.null[0].expand(B, 1, -1), x], 1)  # (B, 1+T, D)
        allowed = torch.cat([torch.ones(B, T, 1, dtype=torch.bool), _past_mask(h)], -1)
        scores = (q @ keys.transpose(1, 2) / self.dim**0.5).masked_fill(~allowed, float("-inf"))
        return self.reweigh(F.softmax(scores, -1), allowed)

    def forward(self, h: Histories, state=None):
        B = h.shape[0]
        x = self.interaction(h.items, h.concepts, h.responses)
        values = torch.cat([self.null[1].expand(B, 1, -1), x], 1)
        read = self.weights(h) @ values  # (B, T, D)
        return F.log_softmax(self.out(torch.cat([read, self.question(h.items, h.concepts)], -1)), -1), None

    def attention_maps(self, h: Histories) -> list[torch.Tensor]:
        return [self.weights(h)[:, None, :, 1:]]  # (B, 1, T, T)


class SecondSoftmax(_AttentionBase):
    """(b) softmax, masked entries zeroed ... and softmax again: masked keys get exp(0) back."""

    name = "leaky-second-softmax"

    def reweigh(self, w, allowed):
        return F.softmax(w.masked_fill(~allowed, 0.0), -1)


class TopKResoftmax(_AttentionBase):
    """(c) top-k of an already-softmaxed row, softmaxed again: zeros of masked keys are picked in short rows."""

    name = "leaky-topk-resoftmax"

    k = 4

    def reweigh(self, w, allowed):
        top = w.topk(min(self.k, w.shape[-1]), -1)
        return F.softmax(torch.full_like(w, float("-inf")).scatter(-1, top.indices, top.values), -1)


class PeekingLSTM(_LSTMBase):
    """(e) DKT whose prediction at t reads the LSTM state after interaction t (its response included)."""

    name = "leaky-peeking-lstm"

    def __init__(self, n_items, n_concepts, n_categories=2, dim=8):
        super().__init__(n_items, n_concepts, n_categories, dim)
        self.out = nn.Linear(2 * dim, n_categories)

    def forward(self, h: Histories, state=None):
        after_t = self.states(h)[:, 1:]  # THE BUG: should be the state before t's step
        return F.log_softmax(self.out(torch.cat([after_t, self.question(h.items, h.concepts)], -1)), -1), None


class _CausalLSTM(_LSTMBase):
    """An honest LSTM head: the state at t's step start, and t's question (plus what `extra` adds)."""

    def __init__(self, n_items, n_concepts, n_categories=2, dim=8, extra: int = 0):
        super().__init__(n_items, n_concepts, n_categories, dim)
        self.out = nn.Linear(2 * dim + extra, n_categories)

    def before(self, h: Histories) -> torch.Tensor:
        return gather_steps(self.states(h), h.step_start)  # (B, T, D)

    def extra(self, h: Histories) -> list[torch.Tensor]:
        return []

    def forward(self, h: Histories, state=None):
        x = torch.cat([self.before(h), self.question(h.items, h.concepts), *self.extra(h)], -1)
        return F.log_softmax(self.out(x), -1), None


class StepMateResponses(_CausalLSTM):
    """(f) The state after every interaction before t, step mates included (THE BUG: not before t's step)."""

    name = "leaky-step-mate-responses"

    def before(self, h: Histories) -> torch.Tensor:
        return self.states(h)[:, :-1]


class NextEventTime(_CausalLSTM):
    """(g) The query embeds log(1 + seconds until the next event) (THE BUG: the next event's time)."""

    name = "leaky-next-event-time"

    def __init__(self, n_items, n_concepts, n_categories=2, dim=8):
        super().__init__(n_items, n_concepts, n_categories, dim, extra=1)

    def extra(self, h: Histories) -> list[torch.Tensor]:
        gap = torch.diff(h.times, append=h.times[:, -1:])  # (B, T): next time - this time; last: 0
        gap = torch.nan_to_num(gap.masked_fill(~h.mask, 0.0), nan=0.0).clamp(min=0)
        return [torch.log1p(gap / 60.0).unsqueeze(-1).to(self.out.weight.dtype)]


LEAKY_MODELS = {"pooled_routing": PooledRouting, "second_softmax": SecondSoftmax,
                "topk_resoftmax": TopKResoftmax, "peeking_lstm": PeekingLSTM,
                "step_mate_responses": StepMateResponses, "next_event_time": NextEventTime}


def expanded_rows_data(rng: np.random.Generator, n_learners: int, questions: int, n_items: int = 30,
                       n_concepts: int = 10, prefix: str = "u") -> list[LearnerHistory]:
    """(d) Learners whose multi-concept questions are expanded into one row per concept, response copied.

    About half the items carry 2-3 concepts, so roughly 40% of rows repeat the
    row before. Ids are already encoded (items 2..n_items-1, concepts 2..n_concepts-1).
    """
    item_concepts = {i: rng.choice(np.arange(2, n_concepts), size=rng.choice([1, 1, 2, 3]), replace=False)
                     for i in range(2, n_items)}
    out = []
    for u in range(n_learners):
        items, concepts, responses = [], [], []
        for _ in range(questions):
            item, r = int(rng.integers(2, n_items)), int(rng.integers(0, 2))
            for c in item_concepts[item]:  # one row per concept, the response copied forward
                items.append(item), concepts.append([c]), responses.append(r)
        n = len(items)
        out.append(LearnerHistory(f"{prefix}{u}", np.array(items), np.array(concepts), np.array(responses),
                                  np.full(n, np.nan), np.arange(n), [f"{prefix}{u}:{i}" for i in range(n)]))
    return out
