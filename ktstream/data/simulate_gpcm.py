"""Simulated learners answering GPCM items, with the true parameters kept for recovery checks.

Items have a known discrimination alpha and K-1 ordered thresholds beta
(difficulty = their mean). A learner's ability is theta0 + g: the gain g moves
a share ``rate`` of the way towards ``max_gain`` after every practice, and
decays as exp(-dt / forgetting) with the time dt since the previous one.
Practice comes in sessions (seconds apart inside, days apart between). The
response to each interaction is drawn from GPCM with the ability just before
it; the output is canonical event records (`Event.to_record` layout, event_time
in epoch ms) sorted per learner.

>>> records, truth = simulate(n_learners=3, n_items=5, n_categories=3, length=(4, 6), seed=1)
>>> sorted(records[0]) == ['concept_ids', 'event_id', 'event_time', 'item_id', 'learner_id', 'response', 'seq']
True
>>> bool((np.diff(truth.betas, axis=1) > 0).all()), truth.theta_path[0].shape == (truth.lengths[0],)
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def gpcm_probs(theta: np.ndarray, alpha: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """theta, alpha (N,), betas (N, K-1) -> P(Y=k) (N, K), Z_k = sum_{h<k} alpha (theta - beta_h)."""
    steps = alpha[:, None] * (theta[:, None] - betas)
    z = np.concatenate([np.zeros((len(theta), 1)), np.cumsum(steps, axis=1)], axis=1)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class GPCMTruth:
    """True parameters: items (alpha, betas, concept), learners (theta0, rate), and every ability used."""

    alpha: np.ndarray  # (I,)
    betas: np.ndarray  # (I, K-1), increasing along axis 1
    item_concept: np.ndarray  # (I,)
    theta0: np.ndarray  # (L,)
    rate: np.ndarray  # (L,)
    lengths: np.ndarray  # (L,)
    item_path: list[np.ndarray]  # per learner (T_l,) item indices
    theta_path: list[np.ndarray]  # per learner (T_l,) ability just before each response
    final_theta: np.ndarray  # (L,) ability right after the last practice

    @property
    def difficulty(self) -> np.ndarray:
        return self.betas.mean(axis=1)

    def oracle_probs(self, learner: int) -> np.ndarray:
        """(T_l, K) probabilities a predictor knowing every true parameter would give."""
        items = self.item_path[learner]
        return gpcm_probs(self.theta_path[learner], self.alpha[items], self.betas[items])


def item_id(i: int) -> str:
    return f"Q{i:04d}"


def learner_id(u: int) -> str:
    return f"L{u:05d}"


def simulate(n_learners: int = 2000, n_items: int = 200, n_categories: int = 4, length: tuple[int, int] = (40, 80),
             n_concepts: int = 10, max_gain: float = 1.0, rate: tuple[float, float] = (0.01, 0.06),
             forgetting_days: float = 20.0, session_size: float = 8.0, seed: int = 0
             ) -> tuple[list[dict], GPCMTruth]:
    """Records of ``n_learners`` learners (lengths uniform in ``length``, inclusive) and the truth."""
    if not 2 <= n_categories <= 10:
        raise ValueError(f"n_categories must be 2..10, got {n_categories}")
    if not (1 <= length[0] <= length[1] and n_items >= 1 and n_learners >= 1):
        raise ValueError(f"need n_learners, n_items >= 1 and 1 <= length[0] <= length[1], got {length}")
    rng = np.random.default_rng(seed)
    K = n_categories
    alpha = np.clip(np.exp(rng.normal(0.0, 0.3, n_items)), 0.4, 2.5)
    offsets = np.sort(rng.normal(0.0, 0.8, (n_items, K - 1)), axis=1)
    offsets += np.linspace(-0.3, 0.3, K - 1) * (K > 2)  # keep neighbouring thresholds apart
    betas = rng.normal(0.0, 1.0, (n_items, 1)) + offsets - offsets.mean(axis=1, keepdims=True)
    item_concept = rng.integers(0, n_concepts, n_items)
    theta0, rates = rng.normal(0.0, 1.0, n_learners), rng.uniform(*rate, n_learners)
    lengths = rng.integers(length[0], length[1] + 1, n_learners)
    records, item_path, theta_path, final = [], [], [], np.zeros(n_learners)
    for u in range(n_learners):
        T = int(lengths[u])
        new_session = rng.random(T) < 1.0 / session_size
        gaps = np.where(new_session, rng.exponential(2 * 86400.0, T), rng.exponential(40.0, T)) + 1.0
        t_sec = rng.uniform(0, 30 * 86400.0) + np.cumsum(gaps)
        items = rng.integers(0, n_items, T)
        thetas, gain = np.zeros(T), 0.0
        for i in range(T):
            if i > 0:
                gain *= np.exp(-(t_sec[i] - t_sec[i - 1]) / (forgetting_days * 86400.0))
            thetas[i] = theta0[u] + gain
            gain += rates[u] * (max_gain - gain)
        probs = gpcm_probs(thetas, alpha[items], betas[items])
        responses = (rng.random((T, 1)) > np.cumsum(probs, axis=1)).sum(axis=1)  # inverse-CDF draw
        final[u] = theta0[u] + gain
        item_path.append(items)
        theta_path.append(thetas)
        for i in range(T):
            records.append({"event_id": f"sim{seed}-{u}-{i}", "learner_id": learner_id(u),
                            "item_id": item_id(int(items[i])), "concept_ids": [f"C{int(item_concept[items[i]]):02d}"],
                            "response": int(min(responses[i], K - 1)), "event_time": START_MS + int(t_sec[i] * 1000),
                            "seq": i})
    truth = GPCMTruth(alpha, betas, item_concept, theta0, rates, lengths, item_path, theta_path, final)
    return records, truth
