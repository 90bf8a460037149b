"""ATKT: an attentive LSTM trained with adversarial perturbations (Guo, Huang, Gao, Shang, Shu and
Sun, ACM MM 2021, "Enhancing Knowledge Tracing via Adversarial Training").

Interaction embedding, as the paper: the question embedding s (item and concepts) and a
response embedding a concatenated, [s; a] for a correct answer and [a; s] for a wrong one, so
the LSTM's input weights read the question differently by response. With K > 2 categories the
question block starts answer_dim * (K-1-r) / (K-1) places in (a rotation of [s; a]); K=2 is
the paper's layout.

Attention, made causal. ATKT scores each LSTM hidden state alone, score_j = v^T tanh(W h_j)
(no query), and reads sum_j alpha_j h_j over the states before the prediction, next to the
latest state. The original code normalises alpha with a softmax over *every* position of the
sequence, the future included, so a prediction depends on later interactions through the
normaliser (tests/leakage/leaky_atkt.py keeps that design as a fixture the leakage gate must
fail). Here the prediction for position t reads the hidden states after the last W applied
interactions before t's step (the latest one included), with the softmax over those alone;
no history: the read is zero. The serving state is the LSTM's (h, c), the window of those W
hidden states with their scores (oldest first; empty slots zeros) and ``applied``, the number
of interactions applied: a fixed shape per learner ("dense"). The prediction is an MLP of
[read; h; s_t] (the paper picks the query skill's output unit of a linear layer over
[read; h]; the MLP scores any item, as DKT's head here does).

Adversarial training (``training_loss``; ``forward`` and serving never perturb): after the
loss L of a batch, r = epsilon * g / ||g|| with g = dL/d(interaction embeddings), normalised
per learner over the positions of a forward (the paper's and its code's per-sequence L2), is
added to the embeddings and the batch's loss again counted with weight ``beta``:
L + beta * L(embeddings + r). Defaults are the paper's for ASSISTments 2009 (skill 256, answer
96, hidden 80, attention 80, epsilon 10, beta 0.2); the window of 200 is its sequence length.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, Prepared, applied_first, derived
from ktstream.models.base import Described, KTModel, State, gather_steps
from ktstream.models.dkt import DKT
from ktstream.models.embeddings import QuestionEmbedding
from ktstream.models.families import register


class HiddenStateAttention(nn.Module):
    """ATKT's score of one hidden state: v^T tanh(W h) -> (...)."""

    def __init__(self, hidden: int, dim: int):
        super().__init__()
        self.mlp = nn.Linear(hidden, dim)
        self.similarity = nn.Linear(dim, 1, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.similarity(torch.tanh(self.mlp(h))).squeeze(-1)


def visible_softmax(scores: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """scores (B, S) of keys, visible (B, T, S) -> (B, T, S) weights: softmax over each query's visible
    keys, zeros where a query sees none."""
    s = scores.unsqueeze(1).masked_fill(~visible, float("-inf"))
    top = s.amax(-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    total = e.sum(-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


class _Adversary:
    """The perturbation hook of ``training_loss``: records the interaction embeddings of every forward
    of a batch, then adds one perturbation to each forward's embeddings, in the same order."""

    def __init__(self, perturbations: list[torch.Tensor] | None = None):
        self.seen: list[torch.Tensor] = []
        self.perturbations = perturbations

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.perturbations is None:
            self.seen.append(x)
            return x
        r = self.perturbations[len(self.seen)]
        assert r.shape == x.shape, "the perturbed pass must run the forwards of the recorded one"
        self.seen.append(x)
        return x + r.to(x.dtype)


@register
class ATKT(KTModel):
    name = "atkt"
    carries_state = True
    state_kind = "dense"
    tiny_config = {"skill_dim": 8, "answer_dim": 4, "hidden": 12, "attention_dim": 6, "window": 6}
    query_block = 256  # queries per attention block in forward (memory, not results: O(T (block + W)))

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, skill_dim: int = 256,
                 answer_dim: int = 96, hidden: int = 80, attention_dim: int = 80, window: int = 200,
                 dropout: float = 0.2, epsilon: float = 10.0, beta: float = 0.2, use_items: bool = True):
        super().__init__(n_items, n_concepts, n_categories)
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.skill_dim, self.answer_dim, self.hidden, self.attention_dim = skill_dim, answer_dim, hidden, attention_dim
        self.window, self.dropout_p, self.epsilon, self.beta, self.use_items = window, dropout, epsilon, beta, use_items
        self.question = QuestionEmbedding(n_items, n_concepts, skill_dim, use_items)
        self.answer = nn.Embedding(n_categories, answer_dim)
        D, K = skill_dim + answer_dim, n_categories
        shift = torch.tensor([(K - 1 - r) * answer_dim // (K - 1) for r in range(K)])
        # layout[r, i]: the entry of [s; a] at input place i for response r (a rotation by shift[r])
        self.register_buffer("layout", (torch.arange(D).unsqueeze(0) - shift.unsqueeze(1)) % D, persistent=False)
        self.lstm = nn.LSTM(D, hidden, batch_first=True)
        self.attention = HiddenStateAttention(hidden, attention_dim)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Sequential(nn.Linear(2 * hidden + skill_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, n_categories))
        self._adversary: _Adversary | None = None

    _run = DKT._run  # the LSTM over each row's applied interactions (B, T, D), from (h0, c0) (1, B, H)

    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    skill_dim=self.skill_dim, answer_dim=self.answer_dim, hidden=self.hidden,
                    attention_dim=self.attention_dim, window=self.window, dropout=self.dropout_p,
                    epsilon=self.epsilon, beta=self.beta, use_items=self.use_items)

    # -- shared pieces ---------------------------------------------------
    def _interaction(self, question: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """(..., S) question embeddings and (...) responses -> (..., S + A), the paper's layout."""
        r = responses.clamp(min=0)  # absent responses are never fed to the LSTM
        joint = torch.cat([question, self.answer(r)], -1)
        return joint.gather(-1, self.layout[r])

    def _head(self, read: torch.Tensor, latest: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.out(torch.cat([self.drop(read), self.drop(latest), question], -1)), -1)

    def _weights(self, scores: torch.Tensor, visible: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """(B, T, S) attention weights of queries over keys of ``scores`` (B, S): ``visible`` (B, T, S)
        the keys each query may read, ``valid`` (B, S) the keys that exist."""
        return visible_softmax(scores, visible)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        log_probs, final, _, _ = self._forward(histories, state)
        return log_probs, final

    def _forward(self, h: Histories, state: State | None, block: int | None = None):
        """log-probs (B, T, K), the final state, the weights (B, T, W + T) over the carried window then
        the chunk's hidden states (applied first; None when the queries ran in several blocks of
        ``block``, default ``query_block``), and that order (B, T)."""
        B, T = h.shape
        W = self.window
        state = state if state is not None else self.init_state(B)
        applied = h.applied  # (B, T)
        count = applied.sum(1)  # (B,) applied in this chunk
        order = applied_first(applied)  # (B, T)
        q = self.question(h.items, h.concepts)  # (B, T, S)
        x = self._interaction(q, h.responses)  # (B, T, D)
        if self._adversary is not None:
            x = self._adversary(x)
        x = x.gather(1, order.unsqueeze(-1).expand_as(x))  # each row's applied interactions first
        out, hn, cn = self._run(x, count, state["h"].unsqueeze(0), state["c"].unsqueeze(0))  # out (B, T, H)
        before = (applied.long().cumsum(1) - applied.long()).gather(1, h.step_start)  # (B, T) applied before t's step
        latest = gather_steps(torch.cat([state["h"].unsqueeze(1), out], 1), before)  # (B, T, H)
        n0 = state["applied"].unsqueeze(1)  # (B, 1)
        ar = torch.arange(max(W, T), device=n0.device)
        number = torch.cat([n0 - W + ar[:W], n0 + ar[:T]], 1)  # (B, W + T): the key is the state after this interaction
        valid = torch.cat([number[:, :W] >= 0, ar[:T].unsqueeze(0) < count.unsqueeze(1)], 1)
        keys = torch.cat([state["window"], out], 1)  # (B, W + T, H)
        scores = torch.cat([state["scores"], self.attention(out)], 1)  # (B, W + T)
        # query t reads the keys of numbers [n - W, n), n = n0 + before[t]: places [before[t], before[t] + W)
        reads, weights = [], None
        block = self.query_block if block is None else block
        for s in range(0, T, block):
            e = min(T, s + block)
            first = before[:, s:e].unsqueeze(-1)  # (B, Tb, 1)
            lo, hi = (0, W + T) if e - s == T else (int(first.min()), min(W + T, int(first.max()) + W))
            place = torch.arange(lo, hi, device=first.device)
            visible = valid[:, lo:hi].unsqueeze(1) & (place >= first) & (place < first + W)  # (B, Tb, hi - lo)
            w = self._weights(scores[:, lo:hi], visible, valid[:, lo:hi])
            reads.append(w @ keys[:, lo:hi])
            weights = w if e - s == T else None
        log_probs = self._head(torch.cat(reads, 1), latest, q)
        total = state["applied"] + count
        slot = number - (total.unsqueeze(1) - W)  # (B, W + T): where each key lands in the final window
        index = torch.where(valid & (slot >= 0), slot, W)  # everything else to a spare slot, cut off
        window = keys.new_zeros(B, W + 1, self.hidden).scatter(1, index.unsqueeze(-1).expand_as(keys), keys)
        kept = scores.new_zeros(B, W + 1).scatter(1, index, scores)
        final = {"h": hn[0], "c": cn[0], "window": window[:, :W], "scores": kept[:, :W], "applied": total}
        return log_probs, final, weights, order

    def attention_maps(self, histories: Histories) -> list[dict]:
        """The leakage gate's hook: weights (B, 1, T, T) of query t on the hidden state after the
        interaction at position j (no carried state: every key is one of the chunk's positions)."""
        B, T = histories.shape
        with torch.no_grad():
            _, _, weights, order = self._forward(histories, None, block=max(T, 1))
        new = weights[..., self.window:]  # (B, T, T), keys in applied-first order
        maps = torch.zeros_like(new).scatter(2, order.unsqueeze(1).expand(B, T, T), new)
        return [{"weights": maps.unsqueeze(1), "keys": "past", "name": "hidden-state attention"}]

    def training_loss(self, batch: Histories, base_loss: Callable[[Histories], tuple[torch.Tensor, int]]
                      ) -> tuple[torch.Tensor, int]:
        """L + beta * L(interaction embeddings + epsilon * g / ||g||), g = dL/d(embeddings)."""
        if self.beta == 0 or self.epsilon == 0:
            return base_loss(batch)
        self._adversary = recorded = _Adversary()
        try:
            loss, n = base_loss(batch)
        finally:
            self._adversary = None
        if n == 0 or not torch.is_tensor(loss) or not loss.requires_grad:
            return loss, n
        grads = torch.autograd.grad(loss, recorded.seen, retain_graph=True, allow_unused=True)
        perturbations = []
        for x, g in zip(recorded.seen, grads):
            g = torch.zeros_like(x) if g is None else g.detach()
            norm = g.flatten(1).norm(dim=1).view(-1, *([1] * (g.dim() - 1)))  # per learner
            perturbations.append(self.epsilon * g / (norm + 1e-12))
        self._adversary = _Adversary(perturbations)
        try:
            adversarial, _ = base_loss(batch)
        finally:
            self._adversary = None
        return loss + self.beta * adversarial, n

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        p = next(self.parameters())
        z = torch.zeros(batch_size, self.hidden, dtype=p.dtype, device=p.device)
        return {"h": z, "c": z.clone(), "window": z.new_zeros(batch_size, self.window, self.hidden),
                "scores": z.new_zeros(batch_size, self.window),
                "applied": torch.zeros(batch_size, dtype=torch.long, device=p.device)}

    def prepare(self, interactions: Interactions) -> Prepared:
        q = self._question_of(interactions)
        return Prepared.of(interactions, {"question": q, "interaction": self._interaction(q, interactions.responses)})

    def _question_of(self, x: Interactions) -> torch.Tensor:
        q = derived(x, "question")
        return self.question(x.items, x.concepts) if q is None else q

    def _interaction_of(self, x: Interactions) -> torch.Tensor:
        e = derived(x, "interaction")
        return self._interaction(self._question_of(x), x.responses) if e is None else e

    def _read(self, state: State) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The attention read (B, H) over the cached window, its weights (B, W) and the slots' numbers."""
        W = self.window
        number = state["applied"].unsqueeze(1) - W + torch.arange(W, device=state["applied"].device)  # (B, W)
        valid = number >= 0
        w = self._weights(state["scores"], valid.unsqueeze(1), valid)  # (B, 1, W)
        return (w @ state["window"])[:, 0], w[:, 0], number

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """With ``describe``: ``attention`` (B, W) the weights on the cached hidden states (oldest first),
        numbered by ``attention_positions`` (B, W; -1 empty), ``attention_null`` (B,) 1 where there is
        no history to read, ``attention_entropy`` (B,) nats, ``head_diversity`` (B,) 0 (one head)."""
        read, w, number = self._read(state)
        probs = self._head(read, state["h"], self._question_of(query)).exp()
        if not describe:
            return probs
        out = {"attention_null": 1.0 - w.sum(-1), "attention_entropy": -torch.special.xlogy(w, w).sum(-1),
               "head_diversity": torch.zeros_like(w[:, 0])}
        if max_values is None or self.window <= max_values:
            out |= {"attention": w, "attention_positions": number.clamp(min=-1)}
        return probs, out

    def update(self, state: State, interaction: Interactions) -> State:
        """One LSTM cell step (``torch.lstm_cell``, as DKT's update) and the window shifted by one."""
        x = self._interaction_of(interaction)  # (B, D)
        lstm = self.lstm
        h, c = torch.lstm_cell(x, (state["h"], state["c"]), lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0,
                               lstm.bias_hh_l0)
        return {"h": h, "c": c, "window": torch.cat([state["window"][:, 1:], h.unsqueeze(1)], 1),
                "scores": torch.cat([state["scores"][:, 1:], self.attention(h).unsqueeze(1)], 1),
                "applied": state["applied"] + 1}
