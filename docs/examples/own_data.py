"""Your own events in a pandas DataFrame: split by learner, train, evaluate, keep the predictions as a DataFrame.

    python docs/examples/own_data.py

Any table with learner_id, item_id, concept_ids (a list or one id), response and event_time (a
time-zone-aware timestamp, RFC 3339 text or epoch milliseconds) will do; here it is simulated.
"""

import pandas as pd

import ktstream

events = pd.DataFrame(ktstream.simulate(n_learners=200, mean_length=30, seed=0))
events["event_time"] = pd.to_datetime(events["event_time"], unit="ms", utc=True)

data = ktstream.load_dataset(events).split_by_learner(test=0.2, valid=0.1)
print(data)
model = ktstream.train("sakt", data, epochs=1, model_args={"dim": 32, "heads": 2, "window": 50})
result = model.evaluate(data.test)
print(result.to_frame().round(4).to_string(index=False))
predictions = result.predictions.to_frame()
print(predictions.groupby("position")["p_correct"].mean().head(5).round(3).to_string())
