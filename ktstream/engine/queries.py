"""Live per-learner queries: what the engine believes about a learner now, from its live state.

``GET /learners/{learner_id}`` answers, from the instance that owns the learner's input partition,
with the model version, the events applied, the last applied event, per-concept mastery now and
the learner's last prediction (JSON). ``GET /instances`` lists which instance owns which input
partition. An instance that does not own the learner's partition answers ``307`` with the owner's
URL in ``Location`` (and in the body), so a client that follows redirects, or a thin proxy, reaches
the owner. Kafka Streams' interactive queries work the same way.

Thread discipline. Learner state belongs to the engine loop's thread: the cache, the stores, the
consumer and the model runner are used by it alone. An HTTP worker therefore never reads them: it
puts the question on a bounded queue (``max_pending``; full: 503) and waits at most ``timeout_s``
(then 503). The loop answers at the top of each micro-batch (``answer``), between two batches, one
question and then more while ``loop_budget_s`` (20 ms) lasts, at most ``per_loop``; so an answer
shows the state as of the last committed micro-batch, each costs one learner's state stacked once
and model calls over at most ``max_concepts`` one-concept questions, and a flood of queries delays a
micro-batch by about one query plus the budget. Nothing is written:
the cached state is only peeked (its LRU place kept), a learner read from the durable store is not
put into the cache, and ``predict`` never mutates a state.

Mastery of concept c now: the model's P(correct) (ordinal models: expected score / (K-1)) for a
question tagged with c alone and no item of its own (item index 0, the padding row, whose item
parameters are zero), asked at the learner's last event time, from the state after every applied
event. By default the concepts are those of the learner's raw window, most recent first; ``?concepts=
a,b`` asks for given ones. The last prediction is computed again, from the state at the start of
the last event's step (as it was predicted), and equals the published one to float precision.

Owners of other partitions: each instance knows its own assignment; ``/instances`` asks the peers
listed in ``queries.peers`` for theirs (``/instances?local=1``, ``timeout_s`` each, remembered for
``OWNERS_TTL_S``). A learner's partition comes from Kafka's default partitioner over the input topic
(the source's ``partition_of``), as producers keying by learner id place it.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import quote, urlencode

import torch

from ktstream.core import W_CONCEPTS, W_SEQ, LearnerState, TopicPartition, WindowRecord, step_key
from ktstream.data.histories import NO_RESPONSE, Interactions
from ktstream.engine.server import Handler, Request
from ktstream.engine.swap import rebuild_learners
from ktstream.serving.stacking import StackBuffer

if TYPE_CHECKING:
    from ktstream.engine.engine import Engine
    from ktstream.serving.runner import ModelRunner

JSON = "application/json"
#: Seconds the peers' partition lists are reused before they are asked again.
OWNERS_TTL_S = 2.0
#: Concept queries per model call (bounds the memory of one call).
CHUNK = 64


@dataclass
class _Ask:
    learner_id: str | None  # None: only this instance's partitions
    concepts: list[str] | None
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    result: dict[str, Any] | None = None
    error: BaseException | None = None


class LearnerQueries:
    """The query routes of one engine instance; ``answer`` is the engine loop's side."""

    def __init__(self, url: str | None = None, peers: Sequence[str] = (), max_concepts: int = 256,
                 timeout_s: float = 2.0, max_pending: int = 64, per_loop: int = 8, loop_budget_s: float = 0.02):
        self.url = url  # set by the service once the server has its port
        self.peers = [p.rstrip("/") for p in peers]
        self.max_concepts, self.timeout_s, self.per_loop = max_concepts, timeout_s, per_loop
        self.loop_budget_s = loop_budget_s
        self._asks: queue.Queue[_Ask] = queue.Queue(max_pending)
        self._owners: tuple[float, dict[str, Any]] | None = None
        self._owners_lock = threading.Lock()

    def routes(self) -> dict[str, Handler]:
        return {"/learners/": self._learner_route, "/instances": self._instances_route}

    # -- the engine loop's side ---------------------------------------------
    def answer(self, engine: "Engine") -> int:
        """Answer waiting questions on the engine's thread: at least one, then more while fewer than
        ``per_loop`` were answered and ``loop_budget_s`` is not spent; returns how many."""
        n, start = 0, time.perf_counter()
        while n < self.per_loop and (n == 0 or time.perf_counter() - start < self.loop_budget_s):
            try:
                ask = self._asks.get_nowait()
            except queue.Empty:
                break
            if ask.cancelled:
                continue
            try:
                ask.result = self._local(engine, ask)
            except Exception as exc:  # noqa: BLE001  (reported to the asking client as a 500)
                ask.error = exc
            ask.done.set()
            n += 1
        return n

    def _local(self, engine: "Engine", ask: _Ask) -> dict[str, Any]:
        owned = sorted(engine.source.assignment())
        out: dict[str, Any] = {"instance": self.url, "partitions": [_tp(tp) for tp in owned]}
        if ask.learner_id is None:
            return out
        lid = ask.learner_id
        partition_of = getattr(engine.source, "partition_of", None)
        tp = partition_of(lid.encode()) if partition_of is not None else None
        st = engine.cache.peek(lid)
        store = engine.cache.store
        if st is None and store is not None and (tp is None or tp in owned):
            st = store.load(lid)  # read only: not put into the cache
        if tp is None and st is not None:
            tp = st.partition
        out["partition"] = None if tp is None else _tp(tp)
        out["owned"] = None if tp is None else tp in owned
        if st is not None and (tp is None or tp in owned):
            out["learner"] = self._describe(engine.processor.runner, st, ask.concepts)
        return out

    def _describe(self, runner: "ModelRunner", st: LearnerState, concepts: list[str] | None) -> dict[str, Any]:
        if st.model_version != runner.version:  # built by an earlier version: what the next event would see
            (st,) = rebuild_learners(runner, [st])
        if concepts is None:  # the learner's own concepts, most recent first
            concepts = list(dict.fromkeys(c for r in reversed(st.window) for c in r[W_CONCEPTS]))
        shown = concepts[: self.max_concepts]
        known = [c for c in shown if runner.concepts.encode(c) > 1]
        last = WindowRecord._make(st.window[-1]) if st.window and st.window[-1][W_SEQ] == st.events else None
        with torch.inference_mode():
            mastery = _mastery(runner, st, known)
            last_prediction = _last_prediction(runner, st, last) if last is not None else None
        return {"learner_id": st.learner_id, "model": {"name": runner.name, "version": runner.version},
                "events_applied": st.events, "responses_applied": st.responses, "late_events_applied": st.late,
                "last_event": {"event_id": st.last_event_id, "event_time": st.last_event_time_ms,
                               "offset": st.last_offset},
                "mastery": mastery,
                "concepts": {"asked": len(concepts), "shown": len(known), "truncated": len(concepts) > len(shown),
                             "unknown_to_the_model": [c for c in shown if c not in mastery]},
                "last_prediction": last_prediction}

    # -- the HTTP side (worker threads) -----------------------------------
    def _ask(self, learner_id: str | None, concepts: list[str] | None) -> dict[str, Any] | tuple[int, str, bytes]:
        ask = _Ask(learner_id, concepts)
        try:
            self._asks.put_nowait(ask)
        except queue.Full:
            return _json(503, {"detail": "too many queries waiting for the engine loop; try again"})
        if not ask.done.wait(self.timeout_s):
            ask.cancelled = True
            return _json(503, {"detail": f"the engine loop did not answer within {self.timeout_s} s"})
        if ask.error is not None:
            raise ask.error
        return ask.result

    def _learner_route(self, request: Request) -> tuple[int, str, bytes]:
        learner_id = request.path[len("/learners/"):]
        if not learner_id or "/" in learner_id:
            return _json(400, {"detail": "GET /learners/{learner_id}"})
        concepts = None
        if "concepts" in request.query:
            concepts = [c for v in request.query["concepts"] for c in v.split(",") if c]
            if len(concepts) > self.max_concepts:
                return _json(400, {"detail": f"at most {self.max_concepts} concepts per query"})
        local = self._ask(learner_id, concepts)
        if isinstance(local, tuple):
            return local
        if "learner" in local:
            return _json(200, {**local["learner"], "instance": self.url, "partition": local["partition"]})
        if local["owned"] is False:
            owner = self.owners()["partitions"].get(local["partition"])
            body = {"learner_id": learner_id, "partition": local["partition"], "owner": owner}
            if owner is None:
                return _json(503, {**body, "detail": "no instance is known to own this partition"})
            target = f"{owner.rstrip('/')}/learners/{quote(learner_id, safe='')}"
            if request.query:
                target += "?" + urlencode(request.query, doseq=True)
            return 307, JSON, _dumps(body), {"Location": target}
        return _json(404, {"learner_id": learner_id, "partition": local["partition"], "instance": self.url,
                           "detail": "no event of this learner has been applied"})

    def _instances_route(self, request: Request) -> tuple[int, str, bytes]:
        if request.query.get("local") == ["1"]:
            local = self._ask(None, None)
            return local if isinstance(local, tuple) else _json(200, local)
        return _json(200, self.owners(fresh=True))

    def owners(self, fresh: bool = False) -> dict[str, Any]:
        """{"instances": [{url, partitions} or {url, error}], "partitions": {"topic:partition": url}}: this
        instance's partitions and every peer's, reused for ``OWNERS_TTL_S`` unless ``fresh``."""
        with self._owners_lock:
            if not fresh and self._owners is not None and time.monotonic() - self._owners[0] < OWNERS_TTL_S:
                return self._owners[1]
        mine = self._ask(None, None)
        instances = [mine if isinstance(mine, dict) else {"instance": self.url, "error": "engine loop busy"}]
        for peer in self.peers:
            if peer != (self.url or "").rstrip("/"):
                instances.append(self._peer(peer))
        partitions = {p: i["instance"] for i in instances for p in i.get("partitions", ())}
        result = {"instances": instances, "partitions": dict(sorted(partitions.items()))}
        with self._owners_lock:
            self._owners = (time.monotonic(), result)
        return result

    def _peer(self, url: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"{url}/instances?local=1", timeout=self.timeout_s) as r:
                answer = json.loads(r.read())
            instance = str(answer.get("instance") or url)
            if any(c in instance for c in "\r\n"):  # it goes into a Location header
                raise ValueError(f"peer {url} advertises a URL with a line break")
            return {"instance": instance, "partitions": [str(p) for p in answer.get("partitions", [])]}
        except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts, bad JSON
            return {"instance": url, "error": f"{type(exc).__name__}: {exc}"}


def _mastery(runner: "ModelRunner", st: LearnerState, concepts: list[str]) -> dict[str, float]:
    """P(correct) per concept (ordinal: expected score / (K-1)), one query per concept, in chunks."""
    if not concepts:
        return {}
    model = runner.model
    state = runner.layout.stack([st.state], None, StackBuffer())  # (1, ...)
    t = math.nan if st.last_event_time_ms is None else st.last_event_time_ms / 1000.0
    out: dict[str, float] = {}
    for i in range(0, len(concepts), CHUNK):
        names = concepts[i : i + CHUNK]
        q = len(names)
        wide = {k: v.expand(q, *v.shape[1:]) for k, v in state.items()}  # the one learner, q times (no copy)
        query = Interactions(torch.zeros(q, dtype=torch.long),
                             torch.tensor([[runner.concepts.encode(c)] for c in names], dtype=torch.long),
                             torch.full((q,), NO_RESPONSE, dtype=torch.long),
                             torch.full((q,), t, dtype=torch.float64))
        probs = model.predict(wide, query)  # (q, K)
        scores = _score(probs)
        out.update(zip(names, scores.tolist()))
    return out


def _last_prediction(runner: "ModelRunner", st: LearnerState, rec) -> dict[str, Any] | None:
    """The last event's prediction again, from the state its step started from; None where that state
    is gone (an event with neither time nor step id whose response was applied)."""
    key = step_key(rec.step_id, rec.event_time_ms)
    if rec.response is not None and (key is None or key != st.step_key):
        return None
    before = st.step_state if st.step_state is not None and key == st.step_key else st.state
    concepts = runner.concepts.encode_all(rec.concept_ids) or [0]
    query = Interactions(torch.tensor([runner.items.encode(rec.item_id)], dtype=torch.long),
                         torch.tensor([concepts], dtype=torch.long),
                         torch.full((1,), NO_RESPONSE, dtype=torch.long),
                         torch.tensor([math.nan if rec.event_time_ms is None else rec.event_time_ms / 1000.0],
                                      dtype=torch.float64))
    probs = runner.model.predict(runner.layout.stack([before], None, StackBuffer()), query)[0]
    out: dict[str, Any] = {"event_id": rec.event_id, "item_id": rec.item_id, "event_time": rec.event_time_ms,
                           "probs": probs.tolist()}
    if len(probs) == 2:
        out["p_correct"] = float(probs[1])
    else:
        out["expected_score"] = float((probs * torch.arange(len(probs), dtype=probs.dtype)).sum())
    return out


def _score(probs: torch.Tensor) -> torch.Tensor:
    k = probs.shape[-1]
    if k == 2:
        return probs[:, 1]
    return (probs * torch.arange(k, dtype=probs.dtype)).sum(-1) / (k - 1)


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}:{tp[1]}"


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), allow_nan=False, default=str).encode()


def _json(code: int, body: dict[str, Any]) -> tuple[int, str, bytes]:
    return code, JSON, _dumps(body)
