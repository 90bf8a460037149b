"""A learner's mastery of each concept over its history, as a DataFrame and a figure.

    python docs/examples/mastery_curves.py [DATA [OUT]]

Row t is the mastery after t of the learner's events: per concept, the model's mean P(correct) over
the concept's most attempted items in the training events. The figure goes to OUT/mastery.png.
"""

import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import ktstream  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "assist2009_akt_pid"
png = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()) / "mastery.png"
data = ktstream.load_dataset(source)
model = ktstream.train("dkt", data, epochs=1, model_args={"hidden": 32})

learner = max(data.learners, key=lambda u: len(data.learner(u)) if u in {e["learner_id"] for e in data.test} else 0)
trajectory = ktstream.mastery_trajectory(model.model, model.vocab, data.test, learner)
curves = trajectory.to_frame()                       # index: events applied; one column per concept
print(curves.tail(3).round(3).to_string())
ax = curves.iloc[:, :4].plot(ylim=(0, 1), ylabel="P(correct)", title=f"learner {learner}")
ax.figure.savefig(png)
print(f"mastery now: {trajectory.now()}; figure {png}")
