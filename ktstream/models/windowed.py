"""The skeleton shared by the attention families: one window, two paths, one set of caches.

A family provides question and interaction embeddings and chooses its layers:

- ``encoders``: stacks over past interactions (AKT's question and knowledge
  encoders). The representation of interaction j is computed once, when j is
  appended, attending to the W interactions before it and itself, and is never
  recomputed; each layer caches its keys/values.
- ``retriever``: the prediction for position t reads the W applied interactions
  j with ``step_start[t] - W <= j < step_start[t]`` (all queries of a step see
  the same keys). A query may first pass the ``query_encoder`` stack (AKT: the
  question encoder, reading the cached window plus the query itself).

Training (``forward``) runs the same computation over a whole chunk with
per-layer sliding-window masks, after the carried cache if a state is given,
and returns the cache after the chunk (``carries_state``). Serving ``predict``
reads the cache only; ``update`` appends one interaction per learner and
evicts the oldest. Distances count applied interactions (positions whose
response is known), which is what the serving path appends; ``position``
picks how every layer turns them into a bias (``attention.POSITIONS``). A
family that offers it records it in its config (``self._config["position"]``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, Prepared, derived
from ktstream.models import kvcache
from ktstream.models.attention import Block, cached_window, window, without_dropout
from ktstream.models.base import Described, KTModel, State

CACHE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


class WindowedKT(KTModel):
    carries_state = True
    state_kind = "windowed"  # served by ktstream.serving.windowed_cache
    key_source, value_source = "question", "interaction"  # encoder stacks (or raw embeddings) they come from
    query_encoder: str | None = None
    query_block = 256  # queries per attention block in forward (memory, not results)

    def __init__(self, n_items: int, n_concepts: int, n_categories: int, dim: int, heads: int, window: int,
                 layers: int, dropout: float, ffn: int, time_decay: bool, relation_dim: int, shared_heads: int,
                 routed_topk: int, cache_dtype: str, encoder_layers: dict[str, int], kq_same: bool = False,
                 position: str = "monotonic"):
        super().__init__(n_items, n_concepts, n_categories)
        if cache_dtype not in CACHE_DTYPES:
            raise ValueError(f"cache_dtype must be one of {sorted(CACHE_DTYPES)}, got {cache_dtype!r}")
        if window < 1 or layers < 1:
            raise ValueError(f"window and layers must be >= 1, got {window}, {layers}")
        self.dim, self.window, self.cache_dtype = dim, window, cache_dtype
        self._config = dict(dim=dim, heads=heads, window=window, layers=layers, dropout=dropout, ffn=ffn,
                            time_decay=time_decay, relation_dim=relation_dim, shared_heads=shared_heads,
                            routed_topk=routed_topk, cache_dtype=cache_dtype)
        opts = dict(shared_heads=shared_heads, routed_topk=routed_topk, position=position, max_distance=window)
        self.encoders = nn.ModuleDict({name: nn.ModuleList(Block(dim, heads, ffn, dropout, **opts) for _ in range(n))
                                       for name, n in encoder_layers.items() if n > 0})
        self.retriever = nn.ModuleList(Block(dim, heads, ffn, dropout, kq_same=kq_same, relation=time_decay, **opts)
                                       for _ in range(layers))
        self.relation_proj = nn.Linear(dim, relation_dim, bias=False) if time_decay else None
        self.head = nn.Sequential(nn.Linear(2 * dim, ffn), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(ffn, n_categories))
        self._cache_dims = self._named_cache_dims()  # fixed by the layers above; read several times per wave

    # -- family hooks ----------------------------------------------------
    def embed_question(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def embed_interaction(self, items, concepts, responses, question: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- shared pieces ---------------------------------------------------
    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories, **self._config)

    def receptive_field(self) -> int:
        """Applied interactions before a query's step that can reach it (encoders reach W further per layer)."""
        return self.window * (1 + max([len(b) for b in self.encoders.values()], default=0))

    def cache_dims(self) -> dict[str, int]:
        """Width of each cached name: every encoder's and retriever's keys and values, and the relation."""
        return dict(self._cache_dims)

    def _named_cache_dims(self) -> dict[str, int]:
        dims = {f"{name}_{i}_{kv}": self.dim for name, blocks in self.encoders.items()
                for i in range(len(blocks)) for kv in "kv"}
        dims.update({f"retriever_{i}_{kv}": self.dim for i in range(len(self.retriever)) for kv in "kv"})
        if self.relation_proj is not None:
            dims["relation"] = self.relation_proj.out_features
        return dims

    def _blocks(self, q_pos, q_time, ks: kvcache.KeySpace, n_new: int, include_self: bool):
        """Queries in blocks of ``query_block``, each with the slice of keys it can see.

        Exact (every key a query may see is in its slice) and keeps memory at
        O(T (block + W)) for long histories; key positions never decrease along S.
        """
        T, S, out = q_pos.shape[1], ks.pos.shape[1], []
        for s in range(0, T, self.query_block):
            e = min(T, s + self.query_block)
            lo = 0  # one block: no key lies more than a window before its first query (the cache holds W)
            if T > self.query_block:
                first = q_pos[:, s:e].min(1, keepdim=True).values - self.window  # (B, 1)
                lo = int(torch.searchsorted(ks.pos, first).min())
            hi = S - n_new + e  # keys after the block's last position are never visible
            win = window(q_pos[:, s:e], q_time[:, s:e], ks.pos[:, lo:hi], ks.valid[:, lo:hi], ks.time[:, lo:hi],
                         self.window, include_self)
            out.append((s, e, lo, hi, win))
        return out

    @staticmethod
    def _attend(blk, x, k, v, blocks, route_in, self_kv=None, rel=None):
        """Run ``blk`` block by block; returns (B, T, D) and the last block's weights."""
        outs = []
        for s, e, lo, hi, win in blocks:
            kw = dict(route_in=route_in[:, s:e])
            if self_kv is not None:
                kw["self_kv"] = (self_kv[0][:, s:e], self_kv[1][:, s:e])
            if rel is not None:
                kw["rel"] = (rel[0][:, s:e], rel[1][:, lo:hi])
            o, w = blk(x[:, s:e], k[:, lo:hi], v[:, lo:hi], win, **kw)
            outs.append(o)
        return torch.cat(outs, 1), w

    def _append(self, state: State | None, q, y, pos, applied, times) -> kvcache.KeySpace:
        """Keys/values of new interactions (B, T) after the cache; encoder stacks run here."""
        ks = kvcache.keyspace(state, pos, applied, times, q.dtype)
        blocks = self._blocks(pos, times, ks, pos.shape[1], include_self=True) if self.encoders else None
        source = {"question": q, "interaction": y}
        for name, stack in self.encoders.items():
            h = source[name]
            for i, blk in enumerate(stack):
                k, v = blk.attn.kv(h, h)
                h, _ = self._attend(blk, h, ks.extend(f"{name}_{i}_k", k), ks.extend(f"{name}_{i}_v", v), blocks, q)
            source[name] = h  # (B, T, D), computed once per interaction
        for name, entry in self._retrieval_entries(source, q).items():
            ks.add(name, entry)
        return ks

    def _retrieval_entries(self, source: dict[str, torch.Tensor], q: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the cache keeps of new interactions for retrieval: each retriever layer's keys and
        values (from the encoder stacks' outputs, or the raw embeddings) and the relation vectors."""
        out = {}
        for i, blk in enumerate(self.retriever):
            out[f"retriever_{i}_k"], out[f"retriever_{i}_v"] = blk.attn.kv(source[self.key_source],
                                                                         source[self.value_source])
        if self.relation_proj is not None:
            out["relation"] = F.normalize(self.relation_proj(q), dim=-1)
        return out

    def _retrieve(self, ks: kvcache.KeySpace, q: torch.Tensor, anchor: torch.Tensor, times: torch.Tensor,
                  n_new: int):
        """Queries (B, Tq) read the W keys before their anchor; returns (B, Tq, D) and the last weights."""
        return self._retrieve_in(self._blocks(anchor, times, ks, n_new, include_self=False), ks.full, q)

    def _retrieve_in(self, blocks, v, q: torch.Tensor):
        """``_retrieve`` over given blocks; ``v(name)`` is the (B, S, D) keys or values of a cached name."""
        x = q
        if self.query_encoder in self.encoders:
            for i, blk in enumerate(self.encoders[self.query_encoder]):
                n = f"{self.query_encoder}_{i}"
                x, _ = self._attend(blk, x, v(n + "_k"), v(n + "_v"), blocks, q, self_kv=blk.attn.kv(x, x))
        rel = None
        if self.relation_proj is not None:
            rel = (F.normalize(self.relation_proj(q), dim=-1), v("relation"))
        for i, blk in enumerate(self.retriever):
            x, w = self._attend(blk, x, v(f"retriever_{i}_k"), v(f"retriever_{i}_v"), blocks, q, rel=rel)
        return x, w

    def _log_probs(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        h = torch.cat([x, q], dim=-1)
        return F.log_softmax(self.head(h) if self.training else without_dropout(self.head, h), dim=-1)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        h = histories
        B, T = h.shape
        applied = (h.mask & (h.responses >= 0)).long()  # what the serving path appends
        n0 = state["count"] if state is not None else torch.zeros(B, dtype=torch.long, device=h.items.device)
        before = applied.cumsum(1) - applied  # applied interactions earlier in the chunk
        pos = n0.unsqueeze(1) + before  # (B, T) number of each new interaction
        anchor = n0.unsqueeze(1) + before.gather(1, h.step_start)  # interactions applied before t's step
        q = self.embed_question(h.items, h.concepts)
        y = self.embed_interaction(h.items, h.concepts, h.responses, q)
        ks = self._append(state, q, y, pos, applied.bool(), h.times)
        x, _ = self._retrieve(ks, q, anchor, h.times, T)
        final = kvcache.roll(ks, n0 + applied.sum(1), self.window, CACHE_DTYPES[self.cache_dtype])
        return self._log_probs(x, q), final

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        p = next(self.parameters())
        return kvcache.empty(batch_size, self.window, self.cache_dims(), CACHE_DTYPES[self.cache_dtype], p.device)

    def _read(self, state: State, query: Interactions):
        """One query per learner over its cache: the cached window (``cached_window``), no key space."""
        q = self._question(query)  # (B, 1, D)
        win = cached_window(state["count"], query.times, state["time"])
        cached = lambda name: state[name] if state[name].dtype == q.dtype else state[name].to(q.dtype)  # noqa: E731
        x, w = self._retrieve_in([(0, 1, 0, state["time"].shape[1], win)], cached, q)
        return x, w, q

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """With ``describe``, the attention of the last retriever layer over the cached past (slots
        oldest first), from the same read of the cache.

        ``attention`` (B, W) head average and ``attention_heads`` (B, H, W) on the
        cached interactions, numbered by ``attention_positions`` (B, W; -1 empty);
        ``attention_null`` (B,) the weight left on "no history"; ``attention_entropy``
        (B,) mean per-head entropy (nats); ``head_diversity`` (B,) the heads'
        Jensen-Shannon divergence (0: all heads attend alike); with head routing,
        ``route_gates`` (B, H) the gate of each head for this query (0: off).
        """
        x, w, q = self._read(state, query)
        probs = self._log_probs(x, q)[:, 0].exp()
        return (probs, self._described(state, x, w, q, max_values)) if describe else probs

    def update(self, state: State, interaction: Interactions) -> State:
        state = kvcache.widen(state, self.window)
        return kvcache.shift(self.appended(state, interaction), CACHE_DTYPES[self.cache_dtype])

    def appended(self, state: State, interaction: Interactions) -> kvcache.KeySpace:
        """The cache followed by one new interaction per learner (encoders run on it); ``state`` may be
        cut to its last slots (the keys the encoders may read)."""
        q, y = self._embedded(interaction)
        applied = torch.ones(len(interaction), 1, dtype=torch.bool, device=q.device)
        return self._append(state, q, y, state["count"].unsqueeze(1), applied, interaction.times.unsqueeze(1))

    def prepare(self, interactions: Interactions) -> Prepared:
        return Prepared.of(interactions, {"question": self._question(interactions)})

    def _question(self, x: Interactions) -> torch.Tensor:
        """Question embeddings (B, 1, D) of one interaction per learner, as prepared if they were:
        predict and update (or the entries) of the same events share them."""
        q = derived(x, "question")
        return self.embed_question(x.items.unsqueeze(1), x.concepts.unsqueeze(1)) if q is None else q

    def cache_entries(self, interactions: Interactions) -> dict[str, torch.Tensor]:
        """What the cache keeps of one new interaction per learner (name -> (B, 1, D)), computed from
        the interactions alone: valid without encoder stacks, which attend over the cache on the
        way in (with them, ``appended(state, interaction).new``)."""
        assert not self.encoders, "encoder stacks read the cache: use appended(state, interaction)"
        q, y = self._embedded(interactions)
        return self._retrieval_entries({"question": q, "interaction": y}, q)

    def _embedded(self, interaction: Interactions) -> tuple[torch.Tensor, torch.Tensor]:
        """Question and interaction embeddings (B, 1, D) of one interaction per learner."""
        i, q = interaction, self._question(interaction)
        return q, self.embed_interaction(i.items.unsqueeze(1), i.concepts.unsqueeze(1), i.responses.unsqueeze(1), q)

    def _described(self, state: State, x: torch.Tensor, w: torch.Tensor, q: torch.Tensor,
                   max_values: int | None = None) -> dict[str, torch.Tensor]:
        """``predict``'s extras; with ``max_values``, the window-wide ones (W or H * W numbers per
        learner) only when they are not more than that: the engine's messages carry no larger entry,
        so building (B, H, W) maps for every wave would be work thrown away."""
        w = w[:, :, 0]  # (B, H, 1 + S); S < W when the batch was cut to its filled slots
        avg = w.mean(1)
        W = self.window
        per_head = -torch.special.xlogy(w, w).sum(-1).mean(1)  # entropy, 0 log 0 = 0
        cut = W + 1 - w.shape[-1]  # empty slots left out: weight 0, as in the whole window
        out = {"attention_null": avg[:, 0], "attention_entropy": per_head,
               "head_diversity": -torch.special.xlogy(avg, avg).sum(-1) - per_head}
        if max_values is None or W <= max_values:
            out["attention"] = F.pad(avg[:, 1:], (cut, 0))
            out["attention_positions"] = (state["count"].unsqueeze(1) - W + torch.arange(W)).clamp(min=-1)
        if max_values is None or w.shape[1] * W <= max_values:
            out["attention_heads"] = F.pad(w[:, :, 1:], (cut, 0))
        router = self.retriever[-1].attn.router
        if router is not None:
            out["route_gates"] = router(q)[:, :, 0, 0]
        return out
