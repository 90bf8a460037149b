"""bench/model_path_floor.py measures a floor of DKT's model path only if it does the engine's work:
the same prediction for every event, steps (ties in event time) included."""

import sys
from collections import Counter
from pathlib import Path

import orjson

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from bench_engine import serving_models  # noqa: E402
from engine_offline import engine_for, records, run  # noqa: E402
from model_path_floor import SlotDKT  # noqa: E402

from ktstream.data.histories import build_vocabularies  # noqa: E402


def predictions(outputs) -> dict[str, float]:
    msgs = (orjson.loads(o.value) for o in outputs)
    return {m["event_id"]: m["p_correct"] for m in msgs if "p_correct" in m}


def test_the_floor_predicts_what_the_engine_predicts():
    recs, load = records(4000, 10)
    serving = serving_models(["dkt"], *build_vocabularies(load))
    floor = SlotDKT(serving["dkt"], len({r.key for r in recs}))
    floor_out = [o for i in range(0, len(recs), 500) for o in floor.step(recs[i : i + 500])]
    engine, engine_out = engine_for("dkt", serving, list(recs), max_batch=500), []
    send = engine.sink.send
    engine.sink.send = lambda outputs: send(engine_out.extend(outputs := list(outputs)) or outputs)
    try:
        run(engine, len(recs))
    finally:
        engine.close()  # hands the garbage collector back
    mine, theirs = predictions(floor_out), predictions(engine_out)
    assert len(theirs) > 0.9 * len(recs) and mine.keys() == theirs.keys()
    assert max(abs(mine[k] - theirs[k]) for k in theirs) < 1e-6
    times = Counter((e["learner_id"], e["event_time"]) for e in load)
    assert sum(times[e["learner_id"], e["event_time"]] > 1 for e in load) > 100, "no steps for the test to see"
