"""A tiny data set of one's own, written by the tests: DKVMN 3-line split files (length / question ids /
responses per learner), learners answering easier questions right more often."""

from __future__ import annotations

import random
from pathlib import Path


def write_dkvmn(folder: Path, learners: int = 36, items: int = 12, length: tuple[int, int] = (8, 20),
                seed: int = 0, concept_map: bool = True) -> Path:
    """``toy_train.csv`` and ``toy_test.csv`` (5:1 by learner), and an identity ``toy_qid_sid`` map beside
    them as the DKVMN copies have (so the format is detected); the folder."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    blocks = []
    for _ in range(learners):
        skill = rng.random()
        qs = [rng.randint(1, items) for _ in range(rng.randint(*length))]
        rs = [int(rng.random() < 0.25 + 0.5 * skill + 0.2 * (q <= items // 2)) for q in qs]
        blocks.append(f"{len(qs)}\n{','.join(map(str, qs))},\n{','.join(map(str, rs))},\n")
    cut = learners * 5 // 6
    (folder / "toy_train.csv").write_text("".join(blocks[:cut]))
    (folder / "toy_test.csv").write_text("".join(blocks[cut:]))
    if concept_map:
        (folder / "toy_qid_sid").write_text("".join(f"{q}\t{q}\n" for q in range(1, items + 1)))
    return folder
