"""How far several families together get on a data set: a reference for a quality target, not a model.

Each family is trained as `ktstream compare` trains it (default size, early stopping on the validation
split); then, with the test split unread until the end, a logistic-regression stacker is fitted on the
members' validation logits and applied to their test logits. Prints each member's test AUC, the plain
mean of the members' probabilities and the stacked ensemble's test AUC. If the stacked ensemble of the
best families falls short of a target, no single configuration of them is likely to reach it either.

    python bench/ensemble_reference.py --dataset assist2009_akt_pid --families diskt,akt,simplekt,atkt,irt-pfa

The stacker is scikit-learn's (installed with the test extra: ``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.special import logit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ktstream.api import load_dataset, train  # noqa: E402
from ktstream.scoring.binary import auc  # noqa: E402

EPS = 1e-6  # probabilities are clipped to [EPS, 1 - EPS] before their logit


def logits(p: np.ndarray) -> np.ndarray:
    return logit(np.clip(p, EPS, 1 - EPS))


def stacked(valid: np.ndarray, y_valid: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Test probabilities of a logistic regression fitted on the validation logits (N, members)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0, max_iter=1000).fit(valid, y_valid).predict_proba(test)[:, 1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="assist2009_akt_pid")
    p.add_argument("--families", default="diskt,akt,simplekt,cl4kt,atkt,sparsekt,irt-pfa,dkt")
    p.add_argument("--lr", action="append", default=[], metavar="FAMILY=LR", help="a family's rate (repeatable)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rates = {k: float(v) for k, v in (kv.split("=") for kv in args.lr)}
    data = load_dataset(args.dataset)
    families = [f for f in args.families.split(",") if f]
    valid, test, y_valid, y_test = {}, {}, None, None
    for f in families:
        started = time.process_time()
        model = train(f, data, epochs=args.epochs, patience=args.patience, lr=rates.get(f, 1e-3), seed=0,
                      device="cpu", progress=False)
        v, t = model.predict(data.valid), model.predict(data.test)
        keep_v, keep_t = v.response >= 0, t.response >= 0
        valid[f], test[f] = v.p_correct[keep_v], t.p_correct[keep_t]
        y_valid, y_test = (v.response[keep_v] >= 1).astype(int), (t.response[keep_t] >= 1).astype(int)
        print(f"{f:16s} test AUC {auc(y_test, test[f]):.4f}   valid AUC {auc(y_valid, valid[f]):.4f}   "
              f"{(time.process_time() - started) / 60:.1f} CPU min", flush=True)
    mean = np.mean([test[f] for f in families], axis=0)
    stack = stacked(np.column_stack([logits(valid[f]) for f in families]), y_valid,
                    np.column_stack([logits(test[f]) for f in families]))
    print(f"mean of {len(families)}         test AUC {auc(y_test, mean):.4f}")
    print(f"stacked on valid    test AUC {auc(y_test, stack):.4f}")


if __name__ == "__main__":
    main()
