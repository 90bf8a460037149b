"""The ten-line notebook: load a data set, train, evaluate, trace one learner online, read mastery, save, load.

    python docs/examples/notebook.py [DATA [OUT]]

DATA: a data set's name (default assist2009_akt_pid, from $KTSTREAM_DATA), a folder of split files or an
event file; OUT: where the model is saved (default: a temporary folder).
"""

import sys
import tempfile

import ktstream

source = sys.argv[1] if len(sys.argv) > 1 else "assist2009_akt_pid"
out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()

# --- the ten lines ---
data = ktstream.load_dataset(source)                                       # events and the data set's fold 1
model = ktstream.train("dkt", data, epochs=1, model_args={"hidden": 32})  # vocabularies from train only
print(model.evaluate(data.test))                                           # AUC, accuracy, ... on the test part
tracer = model.tracer()                                                    # learners' states, the engine's path
for event in data.learner(data.test[0]["learner_id"]):
    p = tracer.predict_one(event)                                          # before its answer is known
    tracer.learn_one(event)                                                # then the answer updates the state
print(tracer.mastery(event["learner_id"], event["concept_ids"]))           # {concept: P(correct) now}
model.save(out); model = ktstream.load(out)                                # checkpoint + vocabularies
# ---

print(f"last prediction {p:.3f}; saved and loaded {model}")
