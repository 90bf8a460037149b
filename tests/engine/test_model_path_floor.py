"""bench/model_path_floor.py measures a floor of DKT's model path only if it does the engine's work:
the same prediction for every event, steps (ties in event time) included; and in the engine's loop
(bench_engine --floor) every record gets its prediction and its offset committed."""

import sys
from collections import Counter
from pathlib import Path

import orjson

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from bench_engine import serving_models  # noqa: E402
from engine_offline import engine_for, records, run  # noqa: E402
from model_path_floor import FloorProcessor, SlotDKT  # noqa: E402

from ktstream.data.histories import build_vocabularies  # noqa: E402
from ktstream.engine import MemorySink, MemorySource  # noqa: E402
from ktstream.engine.engine import Engine  # noqa: E402


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


def test_the_floor_in_the_engine_loop_predicts_every_record_and_commits_it():
    recs, load = records(3000, 10)
    serving = serving_models(["dkt"], *build_vocabularies(load))
    source, sink = MemorySource(list(recs)), MemorySink()
    engine = Engine(source, sink, FloorProcessor(serving["dkt"], len({r.key for r in recs}), "p"), max_batch=400)
    try:
        while source.pending:
            engine.step()
    finally:
        engine.close()
    messages = [orjson.loads(o.value) for o in sink.flushed if o.topic == "p"]
    sources = sorted((m["source"]["partition"], m["source"]["offset"]) for m in messages)
    assert sources == sorted((r.partition, r.offset) for r in recs)
    assert source.committed == {tp: max(r.offset for r in recs if r.tp == tp) + 1 for tp in {r.tp for r in recs}}
