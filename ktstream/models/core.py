"""CORE: counterfactual removal of answer bias, around any family (Cui, Ma, Dong, Zhang, Zhang, Yao, Chen & Ma,
"Model-agnostic counterfactual reasoning for identifying and mitigating answer bias in knowledge tracing",
Neural Networks 178, 2024; arXiv 2308.07779 "Do We Fully Understand Students' Knowledge States?").

Why: most questions are answered mostly right (or mostly wrong), and a model can score well by remembering
each question's rate instead of tracing the learner. In CORE's causal graph the question acts on the
response twice, through the learner's knowledge (the effect to keep) and directly (the answer bias).
Training fits the total effect (TE) with a question-only branch beside the model; prediction subtracts
the natural direct effect (NDE), what the question alone gives with the knowledge held at a learned
counterfactual constant ``c``. With the paper's "sum" fusion, per response category (B, T, K):

    Z_k = the base family's log-probabilities, centred over K (its logits)
    Z_q = bias(item, concepts)              the question-only branch (own embedding and MLP)
    TE  = log sigmoid(Z_k + Z_q)            NDE = log sigmoid(c + Z_q)
    prediction (forward in eval, serving): softmax(TE - NDE)

``training_loss``: the trainer's NLL of softmax(TE) (chunked and step-aware, as for any family) + the NLL
of softmax(Z_q) over the positions it scores + the cross-entropy of softmax(NDE) against softmax(TE),
everything but ``c`` detached there, which fits ``c`` (as the authors' code, github lucky7-code/CORE).

Differences from the authors' code: it wraps a family instead of editing it, so it reads the base's
prediction only. There is no student-only branch Z_s (it reads a family's hidden state; in the NDE it is
the constant anyway), and the bias branch has its own question embedding where the authors detach the
shared one (either way it cannot shape the base's embeddings).

The state, its kind, ``carries_state`` and the receptive field are the base's (set per instance from the
base: the serving layer reads ``model.state_kind``); Z_q reads the query part only, so causality and
train/serve equivalence are the base's. With Z_q = 0 and c = 0 the prediction is softmax(log sigmoid(Z_k)):
for K = 2, sigmoid(logit(p) / 2) of the base's p, the same ranking.

>>> model = CoreKT(n_items=10, n_concepts=5, **CoreKT.tiny_config)
>>> model.state_kind, model.config()["base"]
('dense', 'dkt')
>>> CoreKT(n_items=10, n_concepts=5, base="sakt", base_config={"dim": 8, "heads": 2, "window": 4}).state_kind
'windowed'
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, Prepared, derived
from ktstream.models.base import Described, KTModel, State
from ktstream.models.embeddings import QuestionEmbedding
from ktstream.models.families import create, register

VOCAB = ("n_items", "n_concepts", "n_categories")


def logits_of(log_probs: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (..., K) -> logits with zero mean over K. Clamped first at the log of the
    smallest normal number, so the training path (log-probabilities) and the serving path (the log of
    probabilities, which may have underflowed to 0) agree."""
    lp = log_probs.clamp_min(math.log(torch.finfo(log_probs.dtype).tiny))
    return lp - lp.mean(-1, keepdim=True)


@register
class CoreKT(KTModel):
    name = "core"
    tiny_config = {"base": "dkt", "base_config": {"dim": 8, "hidden": 12, "layers": 2}, "bias_dim": 8,
                   "bias_hidden": 8}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, base: str = "dkt",
                 base_config: dict[str, Any] | None = None, bias_dim: int = 32, bias_hidden: int = 64):
        super().__init__(n_items, n_concepts, n_categories)
        if base == self.name:
            raise ValueError("CORE wraps another family, not itself")
        config = dict(base_config or {})
        if set(config) & set(VOCAB):
            raise ValueError(f"base_config must not hold {', '.join(VOCAB)}: they are CORE's own arguments")
        self.base = create(base, n_items=n_items, n_concepts=n_concepts, n_categories=n_categories, **config)
        self.base_name, self.bias_dim, self.bias_hidden = base, bias_dim, bias_hidden
        # what the serving layer and the trainer read of a family is the base's (instance attributes shadow
        # the class defaults, which describe the default base, DKT)
        self.state_kind = self.base.state_kind
        self.carries_state = self.base.carries_state
        self.question = QuestionEmbedding(n_items, n_concepts, bias_dim)
        self.bias = nn.Sequential(nn.Linear(bias_dim, bias_hidden), nn.ReLU(), nn.Linear(bias_hidden, n_categories))
        self.constant = nn.Parameter(torch.zeros(()))  # c: the counterfactual knowledge
        self._kl: list[tuple[torch.Tensor, int]] | None = None  # set while training_loss runs

    def config(self) -> dict[str, Any]:
        base = {k: v for k, v in self.base.config().items() if k not in VOCAB}
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    base=self.base_name, base_config=base, bias_dim=self.bias_dim, bias_hidden=self.bias_hidden)

    def receptive_field(self) -> int | None:
        return self.base.receptive_field()

    # -- the two effects -------------------------------------------------
    def answer_bias(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        """Z_q (..., K): the question-only branch's logits."""
        return self.bias(self.question(items, concepts))

    def total_effect(self, base_log_probs: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
        """TE = log sigmoid(Z_k + Z_q) (..., K), the fused prediction training fits."""
        return F.logsigmoid(logits_of(base_log_probs) + z_q)

    def direct_effect(self, z_q: torch.Tensor) -> torch.Tensor:
        """NDE = log sigmoid(c + Z_q) (..., K): the question alone, the knowledge counterfactual."""
        return F.logsigmoid(self.constant + z_q)

    def debiased(self, base_log_probs: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of softmax(TE - NDE), the prediction CORE serves."""
        return F.log_softmax(self.total_effect(base_log_probs, z_q) - self.direct_effect(z_q), dim=-1)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State | None]:
        log_probs, final = self.base(histories, state)
        z_q = self.answer_bias(histories.items, histories.concepts)  # (B, T, K)
        if self._kl is None:
            return self.debiased(log_probs, z_q), final
        te = self.total_effect(log_probs, z_q)  # inside training_loss: the fused prediction is what is fitted
        keep = histories.applied
        p_te = F.softmax(te[keep], -1).detach()  # (N, K)
        log_nde = F.log_softmax(self.direct_effect(z_q[keep].detach()), -1)
        self._kl.append((-(p_te * log_nde).sum(), int(keep.sum())))
        return F.log_softmax(te, dim=-1), final

    def training_loss(self, batch: Histories, base_loss: Callable[[Histories], tuple[torch.Tensor, int]]
                      ) -> tuple[torch.Tensor, int]:
        """NLL of the total effect (``base_loss`` over ``forward``, which returns TE here) + NLL of the
        bias branch + the counterfactual term fitting ``c``, each a mean over its positions x ``count``."""
        self._kl = []
        try:
            te_nll, count = base_loss(batch)
            kl = self._kl
        finally:
            self._kl = None
        if count == 0:
            return te_nll, count
        keep = batch.applied
        bias_nll = F.cross_entropy(self.answer_bias(batch.items[keep], batch.concepts[keep]), batch.responses[keep],
                                   reduction="sum") * (count / max(int(keep.sum()), 1))
        kl_sum, kl_n = sum(s for s, _ in kl), sum(n for _, n in kl)
        return te_nll + bias_nll + kl_sum * (count / max(kl_n, 1)), count

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        return self.base.init_state(batch_size)

    def update(self, state: State, interaction: Interactions) -> State:
        return self.base.update(state, interaction)

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """With ``describe``, the base's extras and ``biased_probs`` (B, K): the total effect, the
        prediction with the answer bias left in."""
        out = self.base.predict(state, query, describe, max_values)
        probs, extras = out if describe else (out, None)
        z_q = derived(query, "answer_bias")
        z_q = self.answer_bias(query.items, query.concepts) if z_q is None else z_q  # (B, K)
        log_probs = probs.log()
        served = self.debiased(log_probs, z_q).exp()
        if not describe:
            return served
        return served, {**extras, "biased_probs": F.softmax(self.total_effect(log_probs, z_q), -1)}

    def prepare(self, interactions: Interactions) -> Prepared:
        """The base's prepared tensors (if it prepares any) and Z_q, once per micro-batch."""
        inner = self.base.prepare(interactions) if hasattr(self.base, "prepare") else interactions
        mine = {"answer_bias": self.answer_bias(interactions.items, interactions.concepts)}
        return Prepared.of(inner, {**(inner.derived if isinstance(inner, Prepared) else {}), **mine})

    # -- what the windowed layout reads (ktstream.serving.windowed_cache) ------------------------------
    # The state is the base's key/value cache: its shape and its appends are the base's. (A dense base
    # has none of these; the dense layout reads none.)
    @property
    def window(self) -> int:
        return self.base.window

    @property
    def cache_dtype(self) -> str:
        return self.base.cache_dtype

    @property
    def encoders(self) -> nn.ModuleDict:
        return self.base.encoders

    @property
    def head(self) -> nn.Sequential:
        return self.base.head

    def cache_dims(self) -> dict[str, int]:
        return self.base.cache_dims()

    def appended(self, state: State, interaction: Interactions):
        return self.base.appended(state, interaction)

    def cache_entries(self, interactions: Interactions) -> dict[str, torch.Tensor]:
        return self.base.cache_entries(interactions)
