"""Online tracing River's way over many learners, and the same in batches; prequential scores as you go.

    python docs/examples/online_tracer.py [DATA]

Each test event is predicted before its answer is learned (what the engine publishes), learners
interleaved in time order where the data has times. ``learn_many`` does the same for a batch and
returns those predictions; both equal the trained model's offline predictions.
"""

import sys

import numpy as np

import ktstream

source = sys.argv[1] if len(sys.argv) > 1 else "assist2009_akt_pid"
data = ktstream.load_dataset(source)
model = ktstream.train("dkt", data, epochs=1, model_args={"hidden": 32})

stream = sorted(data.test, key=lambda e: (e.get("event_time", 0), e["learner_id"]))[:2000]
tracer = model.tracer()
one_by_one = []
for event in stream:
    one_by_one.append(tracer.predict_one(event))
    tracer.learn_one(event)

batched = model.tracer().learn_many(stream)          # the same, one call
offline = model.predict(stream)                      # the training path's batched forward
by_id = dict(zip(offline.event_id, offline.p_correct))
assert np.allclose(one_by_one, batched, atol=1e-6)
assert np.allclose(batched, [by_id[e["event_id"]] for e in stream], atol=1e-5)

answered = [(e["response"], p) for e, p in zip(stream, one_by_one) if "response" in e]
y, p = map(np.array, zip(*answered))
print(f"{len(stream)} events of {len(tracer.learners)} learners; prequential accuracy "
      f"{((p >= 0.5) == (y == 1)).mean():.3f}; one-by-one = batched = offline")
