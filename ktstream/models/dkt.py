"""DKT: Deep Knowledge Tracing (Piech et al., NeurIPS 2015), an LSTM over interactions.

The state after i interactions is the LSTM's (h, c). The prediction for
position t reads h after the interactions before t's step and t's question
embedding (item and concepts), so it can score any item, not only a skill
vector's entry. A prediction request (no response) is predicted and never
fed to the LSTM, in training as in serving.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ktstream.data.histories import Histories, Interactions, Prepared, applied_first, derived
from ktstream.models.base import Described, KTModel, State, gather_steps
from ktstream.models.embeddings import InteractionEmbedding, QuestionEmbedding
from ktstream.models.families import register


@register
class DKT(KTModel):
    name = "dkt"
    carries_state = True
    tiny_config = {"dim": 8, "hidden": 12, "layers": 2}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64,
                 hidden: int = 128, layers: int = 1, dropout: float = 0.2, use_items: bool = True):
        super().__init__(n_items, n_concepts, n_categories)
        self.dim, self.hidden, self.layers, self.dropout_p, self.use_items = dim, hidden, layers, dropout, use_items
        self.interaction = InteractionEmbedding(n_items, n_concepts, n_categories, dim, use_items)
        self.question = QuestionEmbedding(n_items, n_concepts, dim, use_items)
        self.lstm = nn.LSTM(dim, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Sequential(nn.Linear(hidden + dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, n_categories))

    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    dim=self.dim, hidden=self.hidden, layers=self.layers, dropout=self.dropout_p,
                    use_items=self.use_items)

    def _head(self, h: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Log-probabilities from the state ``h`` and the question embedding ``q``."""
        return F.log_softmax(self.out(torch.cat([self.drop(h), q], dim=-1)), dim=-1)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        state = state if state is not None else self.init_state(B)
        applied = histories.applied  # (B, T)
        order = applied_first(applied).unsqueeze(-1)  # (B, T, 1)
        x = self.interaction(histories.items, histories.concepts, histories.responses)  # (B, T, D)
        x = x.gather(1, order.expand_as(x))  # each row's applied interactions first: all the LSTM reads
        h0 = state["h"].transpose(0, 1).contiguous()  # (L, B, H)
        c0 = state["c"].transpose(0, 1).contiguous()
        out, hn, cn = self._run(x, applied.sum(1), h0, c0)
        prefix = torch.cat([h0[-1].unsqueeze(1), out], dim=1)  # (B, T+1, H): after 0..T applied interactions
        before = applied.long().cumsum(1) - applied.long()  # (B, T) applied interactions before each position
        h_at = gather_steps(prefix, before.gather(1, histories.step_start))  # (B, T, H): as of t's step start
        log_probs = self._head(h_at, self.question(histories.items, histories.concepts))
        return log_probs, {"h": hn.transpose(0, 1), "c": cn.transpose(0, 1)}  # (B, L, H)

    def _run(self, x: torch.Tensor, counts: torch.Tensor, h0: torch.Tensor,
             c0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The LSTM over the first ``counts[b]`` steps of each row of ``x`` (B, T, D) from (h0, c0)
        (L, B, H): outputs (B, T, H) (meaningless after a row's count) and each row's state after its
        last step (h0, c0 for a row of none). The steps every row runs go unpacked, only the rest
        packed: on the CPU a packed LSTM over rows of unequal lengths leaves oneDNN for a path about
        ten times slower (measured on 32 rows of 190-200 steps)."""
        B, T, _ = x.shape
        common = int(counts.min())
        out, (h, c) = self.lstm(x[:, :common], (h0, c0)) if common else (x.new_zeros(B, 0, self.hidden), (h0, c0))
        rest = counts - common
        if int(rest.max()) == 0:
            return F.pad(out, (0, 0, 0, T - common)), h, c
        packed = pack_padded_sequence(x[:, common:], rest.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        tail, (h_tail, c_tail) = self.lstm(packed, (h, c))
        tail, _ = pad_packed_sequence(tail, batch_first=True, total_length=T - common)  # (B, T - common, H)
        ran = (rest > 0).view(1, B, 1)  # rows of no further step keep (h, c)
        return torch.cat([out, tail], 1), torch.where(ran, h_tail, h), torch.where(ran, c_tail, c)

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        p = next(self.parameters())
        z = torch.zeros(batch_size, self.layers, self.hidden, dtype=p.dtype, device=p.device)
        return {"h": z, "c": z.clone()}

    def prepare(self, interactions: Interactions) -> Prepared:
        return Prepared.of(interactions, {"question": self._question_of(interactions),
                                          "interaction": self._interaction_of(interactions)})

    def _question_of(self, x: Interactions) -> torch.Tensor:
        """Question embeddings (B, D), as prepared for the micro-batch if they were."""
        q = derived(x, "question")
        return self.question(x.items, x.concepts) if q is None else q

    def _interaction_of(self, x: Interactions) -> torch.Tensor:
        """Interaction embeddings (B, D) fed to the LSTM, as prepared if they were."""
        e = derived(x, "interaction")
        return self.interaction(x.items, x.concepts, x.responses) if e is None else e

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        probs = self._head(state["h"][:, -1], self._question_of(query)).exp()
        return (probs, {}) if describe else probs

    def update(self, state: State, interaction: Interactions) -> State:
        """One step of the LSTM's cells, layer by layer (serving runs in eval mode: no dropout between
        layers). ``nn.LSTM`` on the CPU goes through oneDNN, which builds a primitive for every new batch
        size (measured: +0.9 ms for a wave of a size not seen before, in a stream where every wave size
        occurs); ``torch.lstm_cell`` is the same arithmetic without it."""
        x = self._interaction_of(interaction)  # (B, D)
        hs, cs = [], []
        for layer in range(self.layers):
            weights = [getattr(self.lstm, f"{w}_l{layer}") for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            x, c = torch.lstm_cell(x, (state["h"][:, layer], state["c"][:, layer]), *weights)
            hs.append(x)
            cs.append(c)
        return {"h": torch.stack(hs, 1), "c": torch.stack(cs, 1)}  # (B, L, H)
