"""The notebook API: load a data set, train, evaluate, trace learners online, read mastery, save and load.

Every name here is also a top-level ``ktstream`` name (imported on first use). docs/api.md shows them
at work; docs/examples/ holds scripts the test suite runs.

- ``load_dataset`` / ``Dataset``: events and splits from a data set's name, a folder, a file or a table;
- ``train`` -> ``Trained``, ``evaluate`` -> ``Evaluation``, ``predict`` -> ``Predictions``;
- ``Tracer``: ``predict_one`` / ``learn_one`` / ``predict_many`` / ``learn_many`` / ``mastery``, on the
  engine's serving path;
- ``mastery_trajectory`` -> ``Trajectory``;
- ``save`` / ``load``: a checkpoint folder with the vocabularies (``Vocab``).

This package is a facade in the command line's layer (pyproject.toml's import-linter contracts): it may
use every layer below, and nothing below imports it.
"""

from ktstream.api.bundle import Trained, Vocab, load, save
from ktstream.api.datasets import Dataset, load_dataset
from ktstream.api.mastery import Trajectory, mastery_trajectory
from ktstream.api.tracer import Tracer, TracerError
from ktstream.api.training import Evaluation, Predictions, evaluate, predict, train

__all__ = ["Dataset", "Evaluation", "Predictions", "Tracer", "TracerError", "Trained", "Trajectory", "Vocab",
           "evaluate", "load", "load_dataset", "mastery_trajectory", "predict", "save", "train"]
