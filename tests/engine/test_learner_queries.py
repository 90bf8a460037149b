"""Live per-learner queries (ktstream.engine.queries): GET /learners/{id} and GET /instances.

In memory: every family answers with per-concept mastery and the learner's last prediction
(equal to the published one), reads without changing any state, bounds its cost, and answers
503 when the loop does not. On the embedded broker: two engine instances in one group split the
partitions; each answers for its own learners and redirects to the owner for the others.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
import torch

from ktstream.engine.queries import LearnerQueries, _Ask

FAMILIES = ["dkt", "dkvmn", "sakt", "akt", "simplekt", "deep-gpcm"]


def ask(engine, queries: LearnerQueries, learner_id, concepts=None) -> dict:
    """A query from another thread, answered by this (the engine's) thread, as the loop does."""
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("r", queries._ask(learner_id, concepts)))
    worker.start()
    while worker.is_alive():
        queries.answer(engine)
        worker.join(0.005)
    return out["r"]


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, kit):
    recs = kit.stream(n_learners=10, mean_length=14, seed=4)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(request.param, items, concepts)
    engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs))
    kit.drain(engine, source)
    return dict(name=request.param, recs=recs, engine=engine, preds=kit.outputs(sink, kit.PREDICTIONS))


def test_a_learner_query_reports_state_mastery_and_the_last_prediction(served, kit):
    engine, queries = served["engine"], LearnerQueries("http://me:1", timeout_s=10)
    for lid in sorted({r["learner_id"] for r in served["recs"]})[:4]:
        mine = [r for r in served["recs"] if r["learner_id"] == lid]
        got = ask(engine, queries, lid)
        assert got["partition"] == f"{kit.EVENTS}:{kit.partition_of(lid, 3)}" and got["owned"] is True
        learner = got["learner"]
        assert learner["model"] == {"name": served["name"], "version": "v0"}
        assert learner["events_applied"] == len(mine)
        assert learner["responses_applied"] == sum(r.get("response") is not None for r in mine)
        assert learner["last_event"]["event_id"] == mine[-1]["event_id"]
        assert learner["last_event"]["event_time"] == max(r["event_time"] for r in mine)
        seen = {c for r in mine for c in r["concept_ids"]}
        assert set(learner["mastery"]) == seen and all(0.0 <= v <= 1.0 for v in learner["mastery"].values())
        published = [p for p in served["preds"] if p["learner_id"] == lid][-1]
        last = learner["last_prediction"]
        assert last["event_id"] == published["event_id"] == mine[-1]["event_id"]
        assert torch.allclose(torch.tensor(last["probs"]), torch.tensor(published["probs"]), atol=1e-5)


def test_mastery_follows_the_models_answer_for_a_concept_only_question(served):
    """Each concept's mastery is the model's P(correct) (ordinal: expected score / (K-1)) for a question of
    that concept with no item of its own, asked from the learner's current state."""
    from ktstream.data.histories import Interactions
    from ktstream.serving.stacking import StackBuffer

    engine, queries = served["engine"], LearnerQueries("http://me:1", timeout_s=10)
    lid = served["recs"][0]["learner_id"]
    learner = ask(engine, queries, lid)["learner"]
    runner, st = engine.processor.runner, engine.cache.peek(lid)
    state = runner.layout.stack([st.state], None, StackBuffer())
    for concept, value in learner["mastery"].items():
        query = Interactions(torch.zeros(1, dtype=torch.long), torch.tensor([[runner.concepts.encode(concept)]]),
                             torch.tensor([-1]), torch.tensor([st.last_event_time_ms / 1000.0], dtype=torch.float64))
        with torch.inference_mode():
            probs = runner.model.predict(state, query)[0]
        k = probs.shape[0]
        expected = float(probs[1]) if k == 2 else float((probs * torch.arange(k)).sum() / (k - 1))
        assert abs(expected - value) < 1e-5, concept


def test_queries_change_no_state_and_no_later_prediction(kit):
    recs = kit.stream(n_learners=8, mean_length=16, seed=5)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    records = kit.as_records(recs)
    plain, src_a, sink_a = kit.memory_engine(model, items, concepts, records, max_batch=20)
    asked, src_b, sink_b = kit.memory_engine(model, items, concepts, records, max_batch=20)
    queries = LearnerQueries("http://me:1", timeout_s=10)
    kit.drain(plain, src_a)
    while len(src_b.pending) > len(records) // 2:
        asked.step()
    order, size = list(asked.cache.keys()), asked.cache.bytes
    states = {lid: asked.cache.peek(lid) for lid in order}
    for lid in order[:3] + ["nobody"]:
        ask(asked, queries, lid)
    assert list(asked.cache.keys()) == order and asked.cache.bytes == size, "the LRU order and size stay"
    assert all(asked.cache.peek(lid) is st for lid, st in states.items()), "the cached states stay"
    kit.drain(asked, src_b)
    a = {p["event_id"]: p["probs"] for p in kit.outputs(sink_a, kit.PREDICTIONS)}
    b = {p["event_id"]: p["probs"] for p in kit.outputs(sink_b, kit.PREDICTIONS)}
    assert a == b, "predictions after the queries are bit-for-bit those of an engine never asked"


def test_concept_filter_and_the_cost_bound(kit):
    recs = kit.stream(n_learners=4, mean_length=10, seed=6)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, _ = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                          kit.as_records(recs))
    kit.drain(engine, source)
    lid = recs[0]["learner_id"]
    queries = LearnerQueries("http://me:1", max_concepts=2, timeout_s=10)
    learner = ask(engine, queries, lid, ["c1", "no-such-concept"])["learner"]
    assert list(learner["mastery"]) == ["c1"]
    assert learner["concepts"]["unknown_to_the_model"] == ["no-such-concept"]
    everything = ask(engine, queries, lid, [f"c{i}" for i in range(8)])["learner"]
    assert len(everything["mastery"]) == 2 and everything["concepts"]["truncated"]


def test_no_answer_from_the_loop_is_a_503_within_the_timeout():
    queries = LearnerQueries("http://me:1", timeout_s=0.2, max_pending=1)
    start = time.monotonic()
    code, _, body = queries._ask("u1", None)
    assert code == 503 and b"did not answer" in body and time.monotonic() - start < 2
    code, _, body = queries._ask("u2", None)  # the unanswered one still fills the one place: refused at once
    assert code == 503 and b"too many" in body


def get(url: str) -> tuple[int, dict, str]:
    """Status, JSON body and the URL finally answered (urllib follows the 307)."""
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, json.loads(r.read()), r.geturl()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), url


def test_the_http_routes_of_a_service(kit):
    from ktstream.config import load_settings
    from ktstream.engine.records import MemorySink, MemorySource
    from ktstream.models.checkpoint import ServingModel
    from ktstream.service import Service

    recs = kit.stream(n_learners=6, mean_length=10, seed=7)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    settings = load_settings(None, metrics={"port": 0}, engine={"gc_tuning": False},
                             kafka={"topics": {"events": kit.EVENTS}})
    source = MemorySource(kit.as_records(recs))
    with Service(settings, ServingModel(model, items, concepts, "v-http"), source, MemorySink()) as service:
        service.start()
        base = service.server.url
        deadline = time.monotonic() + 60
        while source.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        lid = recs[0]["learner_id"]
        code, body, _ = get(f"{base}/learners/{lid}?concepts=c1,c2")
        assert code == 200 and body["learner_id"] == lid and body["instance"] == base
        assert set(body["mastery"]) <= {"c1", "c2"} and body["model"]["version"] == "v-http"
        code, body, _ = get(f"{base}/learners/nobody")
        assert code == 404 and body["learner_id"] == "nobody"
        code, body, _ = get(f"{base}/learners/{lid}?concepts=" + ",".join(f"c{i}" for i in range(300)))
        assert code == 400
        code, body, _ = get(f"{base}/instances")
        assert code == 200 and body["instances"][0]["instance"] == base


# --------------------------------------------------------------------------- two instances, one broker

PARTITIONS = 4


@pytest.mark.broker
def test_two_instances_answer_for_their_own_learners_and_redirect_to_the_owner(broker, kit):
    from connectors.broker import free_port
    from connectors.kafka import KafkaSink, KafkaSource
    from ktstream.config import load_settings
    from ktstream.core import Output
    from ktstream.models.checkpoint import ServingModel
    from ktstream.service import Service

    recs = kit.stream(n_learners=24, mean_length=8, seed=12)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts, seed=1)
    tag = f"q-{uuid.uuid4().hex[:6]}"
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]

    def settings(i: int):
        return load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"engine-{tag}",
                                              session_timeout_ms=6000, partitions=PARTITIONS,
                                              topics=dict(events=f"{tag}.ev", predictions=f"{tag}.pred",
                                                          dead_letters=f"{tag}.dead")),
                             engine=dict(max_batch=64, poll_timeout_ms=20, gc_tuning=False),
                             metrics=dict(port=ports[i]), queries=dict(advertised_url=urls[i], peers=urls))

    s = settings(0)
    t = s.kafka.topics
    broker.create_topics([t.events, t.predictions, t.dead_letters], PARTITIONS)
    sink = KafkaSink(s.kafka)
    sink.send([Output(t.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs])
    sink.flush(30)
    sink.close()
    services = []
    try:
        for i in range(2):
            services.append(Service(settings(i), ServingModel(model, items, concepts, "v-q"),
                                    KafkaSource(settings(i).kafka, max_poll_records=64), KafkaSink(settings(i).kafka)))
            services[-1].start()
        deadline = time.monotonic() + 120
        owners: dict = {}
        while time.monotonic() < deadline:  # both joined, every partition owned, every event consumed
            _, owners, _ = get(f"{urls[0]}/instances")
            consumed = sum(sv.metrics.totals["consumed"] for sv in services)
            if len(owners.get("partitions", {})) == PARTITIONS and consumed >= len(recs) and \
                    len(set(owners["partitions"].values())) == 2:
                break
            time.sleep(0.2)
        assert len(owners["partitions"]) == PARTITIONS and set(owners["partitions"].values()) == set(urls), owners
        reader = KafkaSource(s.kafka.model_copy(update={"group_id": f"reader-{tag}"}), topics=[t.predictions])
        published: dict = {}
        stop = time.monotonic() + 60
        while len(published) < len(recs) and time.monotonic() < stop:
            for rec in reader.poll(0.2, 1000):
                p = json.loads(rec.value)
                published[p["event_id"]] = p
        reader.close()
        assert len(published) == len(recs)

        served_by = {}
        for lid in sorted({r["learner_id"] for r in recs}):
            mine = [r for r in recs if r["learner_id"] == lid]
            for i, asked in enumerate(urls):
                code, body, answered = get(f"{asked}/learners/{lid}")
                assert code == 200, (lid, body)
                owner = owners["partitions"][body["partition"]]
                assert body["instance"] == owner and answered.startswith(owner), "answered by the owner"
                assert body["events_applied"] == len(mine)
                last = published[mine[-1]["event_id"]]
                assert torch.allclose(torch.tensor(body["last_prediction"]["probs"]), torch.tensor(last["probs"]),
                                      atol=1e-5)
                served_by.setdefault(lid, set()).add(owner)
            with urllib.request.urlopen(urllib.request.Request(f"{urls[0]}/learners/{lid}", method="HEAD"),
                                        timeout=20) as r:
                assert r.status == 200
        assert all(len(v) == 1 for v in served_by.values()), "one owner per learner whoever is asked"
        assert len({o for v in served_by.values() for o in v}) == 2, "both instances own learners"
        # not following the redirect: the non-owner names the owner
        lid = next(lid for lid, v in served_by.items() if urls[1] in v)
        opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                                  {"redirect_request": lambda *a, **k: None}))
        try:
            opener.open(f"{urls[0]}/learners/{lid}?concepts=c1", timeout=20)
            raise AssertionError("expected a 307")
        except urllib.error.HTTPError as exc:
            assert exc.code == 307 and exc.headers["Location"] == f"{urls[1]}/learners/{lid}?concepts=c1"
            assert json.loads(exc.read())["owner"] == urls[1]
    finally:
        for sv in services:
            sv.close()
    assert all(sv.error is None for sv in services)


def test_the_loop_answers_at_least_one_and_stops_at_its_budget(kit):
    """However many questions wait, one micro-batch answers one, then more only within loop_budget_s."""
    recs = kit.stream(n_learners=3, mean_length=6, seed=8)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, _ = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                          kit.as_records(recs))
    kit.drain(engine, source)
    slow = LearnerQueries("http://me:1", per_loop=8, loop_budget_s=0.0)
    fast = LearnerQueries("http://me:1", per_loop=8, loop_budget_s=10.0)
    for q in (slow, fast):
        for lid in [recs[0]["learner_id"]] * 5:
            q._asks.put_nowait(_Ask(lid, None))
    assert slow.answer(engine) == 1 and fast.answer(engine) == 5


def test_an_evicted_learner_is_read_from_the_store_and_not_cached_again(kit):
    from ktstream.engine import MemorySink, MemorySource, StateCache
    from ktstream.engine.engine import Engine
    from ktstream.engine.processor import Processor
    from ktstream.serving.runner import ModelRunner
    from ktstream.state.memory import MemoryStore

    recs = kit.stream(n_learners=12, mean_length=10, seed=9)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    source, sink = MemorySource(kit.as_records(recs)), MemorySink()
    store = MemoryStore()
    for p in range(3):
        store.open((kit.EVENTS, p))  # what the state manager does on assignment
    cache = StateCache(30_000, store)  # room for a few learners: the rest live in the store only
    engine = Engine(source, sink, Processor(ModelRunner(model, items, concepts, "v0"), cache, kit.PREDICTIONS,
                                            kit.DEAD), max_batch=20)
    kit.drain(engine, source)
    evicted = next(lid for lid in dict.fromkeys(r["learner_id"] for r in recs) if lid not in cache)
    order, size = list(cache.keys()), cache.bytes
    learner = ask(engine, LearnerQueries("http://me:1", timeout_s=10), evicted)["learner"]
    assert learner["events_applied"] == sum(r["learner_id"] == evicted for r in recs)
    published = [p for p in kit.outputs(sink, kit.PREDICTIONS) if p["learner_id"] == evicted][-1]
    assert torch.allclose(torch.tensor(learner["last_prediction"]["probs"]), torch.tensor(published["probs"]),
                          atol=1e-5)
    assert evicted not in cache and list(cache.keys()) == order and cache.bytes == size
