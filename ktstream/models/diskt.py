"""DisKT (Zhou, Lv, Zhang, Chen, WWW 2025, "Disentangled Knowledge Tracing for Alleviating Cognitive
Bias"; arXiv 2503.02539): separate streams for what a learner has shown they know and for the
evidence that contradicts it.

A learner's record over unbalanced concepts confounds the state a model reads: correct answers
pile up on easy concepts, wrong ones on hard concepts, and predictions follow the concept rather
than the learner. DisKT reads the past three ways:

- knowledge: simpleKT's retriever (Rasch embeddings, ``x_t`` the read of the window for query t);
- familiar and unfamiliar abilities: each past interaction enters one stream only, correct
  answers the familiar one and wrong answers the unfamiliar one (the other stream sees a learned
  "absent" vector there), through a shared feed-forward layer (GELU, residual, LayerNorm);
- contradiction attention: query ``x_t``, keys ``x_j`` (the knowledge read for interaction j),
  values the two streams, over the window, with interactions flagged as contradictory
  (a guess: correct where the learner's state said it would fail; a slip: wrong where it said
  they would succeed) kept out. Their familiar and unfamiliar reads ``o_F``, ``o_U`` combine as
  the paper's IRT-like output: ``head([x_t - (o_F + o_U) - d_t, o_F - o_U, q_t])``, ``d_t`` the
  item's difficulty vector (mu_q times the concepts' variation vector).

Causal and serving choices (deliberate; the paper's code differs):

- one softmax over the visible, non-contradictory keys plus a "no history" slot (null key,
  zero values), so masked keys have weight exactly 0. The published contradiction attention
  softmaxed, zeroed the contradictory keys and softmaxed again without masking: the future keys'
  zeros came back as ``exp(0)/sum`` (tests/leakage/leaky_diskt.py keeps it as a gate fixture);
- the contradiction flag of interaction j is decided when j is applied, from the model's own
  knowledge-only prediction for j (the head with both streams at zero, from ``x_j``): the
  probability it gave the observed response is below ``contradiction`` (0.2 by default, the
  paper's starting threshold). The paper scored each response against its concept's correct rate
  in the whole data set with a random factor and a running threshold; a per-learner,
  deterministic flag is what a streaming engine can serve;
- the key ``x_j`` is the retriever's read at j's own position (everything applied before j, the
  state when j is appended), so the serving path computes it in ``update``: an update reads the
  cache (``appends_from_cache``) and costs about one retriever read more than simpleKT's;
- position is the shared distance bias in the retriever, none in the contradiction attention;
  the paper's L2-distance term between the two streams (weight ``reg``) is added by
  ``training_loss`` over the batch's applied interactions.

State per learner: simpleKT's caches plus, per interaction, the key ``x_j``, both stream values
(D each) and the flag.

>>> model = DisKT(n_items=10, n_concepts=5, **DisKT.tiny_config)
>>> sorted(n for n in model.cache_dims() if not n.startswith("retriever"))
['contra_flag', 'contra_k', 'familiar', 'unfamiliar']
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions
from ktstream.models import kvcache
from ktstream.models.attention import NEG_INF, cached_window, softmax_of_columns, without_dropout
from ktstream.models.base import Described, State
from ktstream.models.embeddings import mean_over_concepts
from ktstream.models.families import register
from ktstream.models.rasch import _concepts_or_unknown
from ktstream.models.simplekt import SimpleKT
from ktstream.models.windowed import CACHE_DTYPES



class StreamFFN(nn.Module):
    """DisKT's feed-forward layer on the two streams: GELU, dropout, residual, LayerNorm."""

    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop(self.w2(self.drop(F.gelu(self.w1(x))))) + x)


class ContradictionAttention(nn.Module):
    """Multi-head dot-product attention of knowledge reads over past knowledge reads, two value
    streams, no projections (as the paper), a learned null key; flagged keys are masked."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        assert dim % heads == 0, f"dim ({dim}) must be a multiple of heads ({heads})"
        self.heads, self.dk = heads, dim // heads
        self.null_k = nn.Parameter(torch.randn(dim) * 0.1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.heads, self.dk).transpose(-3, -2)

    def logits(self, x: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor) -> list[torch.Tensor]:
        """The null column (B, H, Tq, 1) and the key logits (B, H, Tq, S), -inf where not ``allowed``."""
        scale = 1.0 / math.sqrt(self.dk)
        q = self._heads(x)
        null = (q * self.null_k.view(self.heads, 1, self.dk)).sum(-1, keepdim=True) * scale
        return [null, (q @ self._heads(k).transpose(-1, -2) * scale).masked_fill(~allowed.unsqueeze(1), NEG_INF)]

    def weights(self, x: torch.Tensor, k: torch.Tensor, visible: torch.Tensor, flagged: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, 1 + S): one softmax over the null slot and the visible keys not flagged."""
        return softmax_of_columns(self.logits(x, k, visible & ~flagged.unsqueeze(1)))

    def forward(self, x, k, familiar, unfamiliar, visible, flagged):
        """x (B, Tq, D) queries; k, familiar, unfamiliar (B, S, D); visible (B, Tq, S) the keys the
        queries may read; flagged (B, S) contradictory keys. Returns both reads (B, Tq, D) each
        and the weights (B, H, Tq, 1 + S)."""
        w = self.weights(x, k, visible, flagged)
        B, Tq, D = x.shape
        keys = w[..., 1:]  # the null slot's values are zero

        def read(v):
            return (keys @ self._heads(v)).transpose(1, 2).reshape(B, Tq, D)

        return read(familiar), read(unfamiliar), w


@register
class DisKT(SimpleKT):
    name = "diskt"
    tiny_config = {"dim": 8, "heads": 2, "window": 8, "layers": 2, "ffn": 16}
    #: what ``update`` appends reads the cache (the key of an interaction is a retriever read), so
    #: the serving layout must hand it the window, as for encoder stacks
    appends_from_cache = True

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64, heads: int = 4,
                 window: int = 200, layers: int = 2, dropout: float = 0.1, ffn: int = 128,
                 time_decay: bool = False, relation_dim: int = 16, shared_heads: int = 0, routed_topk: int = 0,
                 cache_dtype: str = "float32", l2: float = 1e-5, position: str = "monotonic",
                 contradiction: float = 0.2, reg: float = 1e-3):
        if not 0.0 <= contradiction < 1.0:
            raise ValueError(f"contradiction must be in [0, 1), got {contradiction}")
        super().__init__(n_items, n_concepts, n_categories, dim, heads, window, layers, dropout, ffn, time_decay,
                         relation_dim, shared_heads, routed_topk, cache_dtype, l2, position=position)
        self._config.update(contradiction=contradiction, reg=reg)
        self.contradiction, self.reg = contradiction, reg
        self.absent = nn.Parameter(torch.zeros(2, dim))  # what the familiar / unfamiliar stream sees elsewhere
        self.stream_ffn = StreamFFN(dim, dropout)
        self.contra = ContradictionAttention(dim, heads)
        # the output reads [x - (o_F + o_U) - d, o_F - o_U, q]
        self.head = nn.Sequential(nn.Linear(3 * dim, ffn), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ffn, n_categories))

    def _named_cache_dims(self) -> dict[str, int]:
        dims = super()._named_cache_dims()
        dims.update(contra_k=self.dim, familiar=self.dim, unfamiliar=self.dim, contra_flag=1)
        return dims

    # -- pieces ------------------------------------------------------------
    def difficulty(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        """(..., D) the item's difficulty vector, mu_q times its concepts' variation vector."""
        return self.rasch.mu(items) * mean_over_concepts(self.rasch.variation, _concepts_or_unknown(concepts))

    def familiar(self, responses: torch.Tensor) -> torch.Tensor:
        """(...,) True where a response counts as correct (the upper half of the categories)."""
        return responses * 2 >= self.n_categories

    def streams(self, y: torch.Tensor, responses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The familiar and unfamiliar stream inputs (..., D) of interactions ``y``."""
        ok = self.familiar(responses).unsqueeze(-1)
        return torch.where(ok, y, self.absent[0]), torch.where(ok, self.absent[1], y)

    def features(self, x, o_f, o_u, d) -> torch.Tensor:
        return torch.cat([x - (o_f + o_u) - d, o_f - o_u], -1)

    def _entries(self, ks: kvcache.KeySpace, q, y, items, concepts, responses, pos, times,
                 xk: torch.Tensor | None) -> None:
        """Add the contradiction keys, both stream values and the flags of new interactions to ``ks``
        (after the retriever's entries). ``xk``: the knowledge reads at their own positions, when
        the caller has them."""
        if xk is None:
            xk, _ = self._retrieve(ks, q, pos, times, pos.shape[1])
        f, u = self.streams(y, responses)
        d = self.difficulty(items, concepts)
        with torch.no_grad():  # the knowledge-only prediction decides the flag (no gradient through it)
            zero = torch.zeros_like(xk)
            h = torch.cat([self.features(xk, zero, zero, d), q], -1)
            log_p = F.log_softmax(without_dropout(self.head, h), -1)
            seen = log_p.gather(-1, responses.clamp(min=0).unsqueeze(-1)).exp()  # (B, T, 1)
            flag = (seen < self.contradiction).to(xk.dtype)
        ks.add("contra_k", xk)
        ks.add("familiar", self.stream_ffn(f) if self.training else without_dropout_ffn(self.stream_ffn, f))
        ks.add("unfamiliar", self.stream_ffn(u) if self.training else without_dropout_ffn(self.stream_ffn, u))
        ks.add("contra_flag", flag)

    def _contradict(self, x: torch.Tensor, blocks, v: Callable[[str], torch.Tensor]):
        """Contradiction reads (B, Tq, D) x 2 of queries ``x`` over the given blocks (as
        ``_retrieve_in``); returns them and the last block's weights."""
        fs, us, w = [], [], None
        for s, e, lo, hi, win in blocks:
            f, u, w = self.contra(x[:, s:e], v("contra_k")[:, lo:hi], v("familiar")[:, lo:hi],
                                  v("unfamiliar")[:, lo:hi], win.allowed, v("contra_flag")[:, lo:hi, 0] != 0)
            fs.append(f), us.append(u)
        return torch.cat(fs, 1), torch.cat(us, 1), w

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        h = histories
        B, T = h.shape
        applied = (h.mask & (h.responses >= 0)).long()
        n0 = state["count"] if state is not None else torch.zeros(B, dtype=torch.long, device=h.items.device)
        before = applied.cumsum(1) - applied
        pos = n0.unsqueeze(1) + before
        anchor = n0.unsqueeze(1) + before.gather(1, h.step_start)
        q = self.embed_question(h.items, h.concepts)
        y = self.embed_interaction(h.items, h.concepts, h.responses, q)
        ks = self._append(state, q, y, pos, applied.bool(), h.times)
        x, _ = self._retrieve(ks, q, anchor, h.times, T)
        same = torch.equal(anchor, pos)  # no steps: each key's read is its own query's read
        self._entries(ks, q, y, h.items, h.concepts, h.responses, pos, h.times, x if same else None)
        blocks = self._blocks(anchor, h.times, ks, T, include_self=False)
        o_f, o_u, _ = self._contradict(x, blocks, ks.full)
        feats = self.features(x, o_f, o_u, self.difficulty(h.items, h.concepts))
        final = kvcache.roll(ks, n0 + applied.sum(1), self.window, CACHE_DTYPES[self.cache_dtype])
        return self._log_probs(feats, q), final

    def training_loss(self, batch: Histories, base_loss) -> tuple[torch.Tensor, int]:
        """The likelihood plus ``reg`` times the mean L2 distance between each learner's familiar
        and unfamiliar stream inputs over its applied interactions (the paper's term)."""
        loss, n = base_loss(batch)
        if self.reg == 0 or n == 0:
            return loss, n
        q = self.embed_question(batch.items, batch.concepts)
        f, u = self.streams(self.embed_interaction(batch.items, batch.concepts, batch.responses, q), batch.responses)
        keep = (batch.mask & (batch.responses >= 0)).unsqueeze(-1).to(f.dtype)
        dist = (((f - u) * keep) ** 2).sum((1, 2)).clamp(min=1e-12).sqrt()  # (B,)
        return loss + self.reg * n * dist.mean(), n

    # -- serving path ----------------------------------------------------
    def _read(self, state: State, query: Interactions):
        q = self._question(query)
        S = state["time"].shape[1]
        win = cached_window(state["count"], query.times, state["time"])
        cached = lambda name: state[name] if state[name].dtype == q.dtype else state[name].to(q.dtype)  # noqa: E731
        x, w = self._retrieve_in([(0, 1, 0, S, win)], cached, q)
        o_f, o_u, _ = self._contradict(x, [(0, 1, 0, S, win)], cached)
        d = self.difficulty(query.items.unsqueeze(1), query.concepts.unsqueeze(1))
        return self.features(x, o_f, o_u, d), w, q

    def appended(self, state: State, interaction: Interactions) -> kvcache.KeySpace:
        q, y = self._embedded(interaction)
        i = interaction
        applied = torch.ones(len(i), 1, dtype=torch.bool, device=q.device)
        pos, times = state["count"].unsqueeze(1), i.times.unsqueeze(1)
        ks = self._append(state, q, y, pos, applied, times)
        self._entries(ks, q, y, i.items.unsqueeze(1), i.concepts.unsqueeze(1), i.responses.unsqueeze(1), pos,
                      times, None)
        return ks

    def cache_entries(self, interactions: Interactions) -> dict[str, torch.Tensor]:
        raise NotImplementedError("DisKT's entries read the cache (the key is a retriever read): "
                                  "use appended(state, interaction)")

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """As simpleKT's; ``describe`` adds ``contradiction_flags`` (B,), the flagged share of the
        cached interactions."""
        out = super().predict(state, query, describe, max_values)
        if not describe:
            return out
        probs, extras = out
        flags, count = state["contra_flag"][..., 0].float(), state["count"]
        extras["contradiction_flags"] = flags.sum(1) / count.clamp(max=flags.shape[1]).clamp(min=1)
        return probs, extras

    # -- the leakage gate's hook -------------------------------------------
    @torch.no_grad()
    def attention_maps(self, hist: Histories) -> list[dict[str, Any]]:
        """Post-softmax weights (B, H, T, T) of every attention in a forward without a state: the
        retriever for the queries ("past"), the retriever for the keys, each read at its own
        position, which the key's step mates before it may reach ("through_self": only later
        steps read it), and the contradiction attention ("past")."""
        T = hist.shape[1]
        calls: list[tuple[str, torch.Tensor]] = []
        retrieval = {id(b.attn): i for i, b in enumerate(self.retriever)}

        def record(module, args, kwargs, output):
            calls.append((f"retriever {retrieval[id(module)]}", output[1]))

        def record_contra(module, args, output):
            calls.append(("contradiction", output[2]))

        handles = [b.attn.register_forward_hook(record, with_kwargs=True) for b in self.retriever]
        handles.append(self.contra.register_forward_hook(record_contra))
        had_block, saved = "query_block" in vars(self), self.query_block
        self.query_block = max(T, 1)
        self.eval()
        try:
            applied = (hist.mask & (hist.responses >= 0)).long()
            before = applied.cumsum(1) - applied
            steps = not torch.equal(before.gather(1, hist.step_start), before)
            self(hist)
        finally:
            for handle in handles:
                handle.remove()
            if had_block:
                self.query_block = saved
            else:
                del self.query_block
        L = len(self.retriever)
        # call order: the query reads (L calls), then the key reads where there are steps (L), then contradiction
        maps = []
        for n, (name, w) in enumerate(calls):
            keys = "through_self" if steps and L <= n < 2 * L else "past"
            role = "keys" if keys == "through_self" else "queries"
            maps.append({"weights": w[..., 1: 1 + T], "keys": keys, "name": f"{name} ({role})"})
        return maps


def without_dropout_ffn(ffn: StreamFFN, x: torch.Tensor) -> torch.Tensor:
    """``ffn(x)`` in eval mode without calling its dropout layers (serving)."""
    return ffn.norm(ffn.w2(F.gelu(ffn.w1(x))) + x)
