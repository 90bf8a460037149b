"""A hostile event corpus: valid traffic mixed with every kind of record the engine and archiver must survive.

``hostile_corpus(n, seed)`` returns ``n`` records in publishing order as ``(key, value, expected)``:
the record key (None for the keyless case), the value bytes (None for a tombstone), and
``Expected(case, engine, archive)``: the case's name, the engine's outcome ("prediction" or the
dead-letter reason) and the archiver's ("archived" or the dead-letter reason). Outcomes assume the
engine's defaults (late policy ``dead-letter``, 64 KiB records, 300 s clock skew) and a binary model,
and that one partition holds each key's records in order (as Kafka keys them).

Valid learners act in increasing event time, ending before ``now_ms``, so a valid event is never
late or future; a ``duplicate_event_id`` record repeats, at a new offset, the bytes of its learner's
last applied event; a ``late`` one is a new event timed before its learner's last applied one.
``accounting`` checks outputs against the expectations: each input offset exactly once, as expected.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from collections import Counter
from typing import Any, Iterable, NamedTuple

from ktstream.core import Record
from ktstream.schema import MAX_CONCEPTS, MAX_ID_BYTES, MAX_INT64

DAY_MS = 86_400_000
ITEMS, CONCEPTS = [f"q{i}" for i in range(40)], [f"c{i}" for i in range(8)]
#: The engine's and the archiver's default largest record (``engine.max_record_bytes``).
MAX_RECORD_BYTES = 65_536


class Expected(NamedTuple):
    case: str
    engine: str  # "prediction" or a dead-letter reason
    archive: str  # "archived" or a dead-letter reason


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


#: case -> (engine outcome, archiver outcome, weight among the hostile records)
CASES: dict[str, tuple[str, str, float]] = {
    "valid_at_the_bounds": ("prediction", "archived", 1.0),
    "oversized_seq": ("schema", "schema", 1.0),
    "oversized_elapsed_ms": ("schema", "schema", 1.0),
    "time_past_year_9999_after_its_offset": ("schema", "schema", 1.0),
    "time_before_year_1_after_its_offset": ("schema", "schema", 1.0),
    "epoch_ms_out_of_range": ("schema", "schema", 1.0),
    "far_future_time": ("future", "future", 1.0),
    "time_past_the_clock_skew": ("future", "future", 1.0),
    "deeply_nested_attributes": ("schema", "schema", 0.5),
    "nesting_past_the_json_parser": ("invalid_json", "invalid_json", 0.5),
    "oversized_attributes": ("schema", "schema", 0.5),
    "huge_learner_id": ("schema", "schema", 1.0),
    "huge_item_id": ("schema", "schema", 1.0),
    "huge_concept_id": ("schema", "schema", 1.0),
    "too_many_concepts": ("schema", "schema", 1.0),
    "null_key": ("missing_key", "missing_key", 1.0),
    "key_not_the_learner_id": ("key_mismatch", "key_mismatch", 1.0),
    "duplicate_event_id": ("duplicate", "archived", 2.0),
    "late": ("late", "archived", 1.0),
    "invalid_json": ("invalid_json", "invalid_json", 1.0),
    "non_utf8": ("invalid_json", "invalid_json", 1.0),
    "lone_surrogate": ("invalid_json", "invalid_json", 0.5),
    "nan": ("invalid_json", "invalid_json", 0.5),
    "not_an_object": ("invalid_json", "invalid_json", 0.5),
    "tombstone": ("invalid_json", "invalid_json", 0.5),
    "huge_record": ("oversized", "oversized", 0.1),
    "wrong_types": ("schema", "schema", 1.0),
    "missing_fields": ("schema", "schema", 1.0),
    "unknown_field": ("schema", "schema", 0.5),
    "response_out_of_range": ("schema", "schema", 1.0),
    "response_beyond_the_model": ("schema", "archived", 1.0),
}


class _Learners:
    """Valid traffic: learners acting in increasing event time, and what each last applied."""

    def __init__(self, rng: random.Random, n_learners: int, start_ms: int):
        self.rng, self.ids = rng, [f"u{i}" for i in range(n_learners)]
        self.clock = {lid: start_ms + rng.randrange(DAY_MS) for lid in self.ids}
        self.last: dict[str, bytes] = {}  # learner -> value of its last applied event
        self.applying: list[str] = []  # learners with a last applied event, in the order of their first
        self.events = 0

    def event(self, lid: str, **fields: Any) -> dict[str, Any]:
        self.events += 1
        self.clock[lid] += self.rng.randrange(1_000, 60_000)
        ev = {"event_id": f"{lid}-e{self.events}", "learner_id": lid, "item_id": self.rng.choice(ITEMS),
              "concept_ids": self.rng.sample(CONCEPTS, self.rng.randint(0, 2)), "event_time": self.clock[lid]}
        if self.rng.random() < 0.9:
            ev["response"] = self.rng.randint(0, 1)
        ev.update(fields)
        return ev

    def applied(self, lid: str, value: bytes) -> tuple[bytes, bytes]:
        if lid not in self.last:
            self.applying.append(lid)
        self.last[lid] = value
        return lid.encode(), value


def _hostile(case: str, lids: _Learners, now_ms: int, max_record_bytes: int) -> tuple[bytes | None, bytes | None]:
    """One record of ``case``; valid-looking fields elsewhere, so the case's fault is the only one."""
    rng = lids.rng
    lid = rng.choice(lids.ids)
    key = lid.encode()
    ev = lids.event(lid)  # its time is past the learner's last: only the case's fault is wrong with it

    def dumps(**change: Any) -> bytes:
        return json.dumps({**ev, **change}).encode()

    if case == "valid_at_the_bounds":
        value = dumps(seq=MAX_INT64, elapsed_ms=MAX_INT64, item_id="é" * (MAX_ID_BYTES // 2),
                      concept_ids=[f"{i:03d}" + "c" * (MAX_ID_BYTES - 3) for i in range(MAX_CONCEPTS)],
                      attributes=json.loads(_nested(8)), step_id="s" * MAX_ID_BYTES)
        return lids.applied(lid, value)
    simple = {
        "oversized_seq": {"seq": MAX_INT64 + 1},
        "oversized_elapsed_ms": {"elapsed_ms": 2**64 + 5},
        "time_past_year_9999_after_its_offset": {"event_time": "9999-12-31T22:00:00-05:00"},
        "time_before_year_1_after_its_offset": {"event_time": "0001-01-01T01:00:00+05:00"},
        "epoch_ms_out_of_range": {"event_time": rng.choice([10**16, -10**16, 2**63])},
        "far_future_time": {"event_time": "9999-06-01T00:00:00Z"},
        "time_past_the_clock_skew": {"event_time": now_ms + DAY_MS},
        "huge_item_id": {"item_id": "q" * (MAX_ID_BYTES + 1)},
        "huge_concept_id": {"concept_ids": ["ü" * (MAX_ID_BYTES // 2 + 1)]},
        "too_many_concepts": {"concept_ids": [f"c{i}" for i in range(MAX_CONCEPTS + 1)]},
        "oversized_attributes": {"attributes": {"notes": "x" * 20_000}},
        "wrong_types": rng.choice([{"response": "yes"}, {"item_id": 7}, {"response": True}, {"concept_ids": "c1"},
                                   {"seq": 1.5}, {"attributes": [1, 2]}]),
        "unknown_field": {"colour": "red"},
        "response_out_of_range": {"response": rng.choice([-1, 256, 10**30])},
        "response_beyond_the_model": {"response": 2},
    }
    if case in simple:
        return key, dumps(**simple[case])
    if case == "huge_learner_id":
        big = "ü" * (MAX_ID_BYTES // 2 + 1)
        return big.encode(), dumps(learner_id=big)
    if case in ("deeply_nested_attributes", "nesting_past_the_json_parser"):
        depth = rng.randint(9, 1000) if case == "deeply_nested_attributes" else rng.randint(1100, 5000)
        return key, dumps(attributes={"x": 1}).replace(b'{"x": 1}', _nested(depth).encode())
    if case == "null_key":
        return None, dumps()
    if case == "key_not_the_learner_id":
        return rng.choice([b"someone-else", b"", lid.upper().encode()]), dumps()
    if case == "duplicate_event_id":
        lid = rng.choice(lids.applying)
        return lid.encode(), lids.last[lid]
    if case == "late":
        lid = rng.choice(lids.applying)
        last_time = json.loads(lids.last[lid])["event_time"]
        return lid.encode(), json.dumps({**ev, "learner_id": lid, "event_time": last_time - 1}).encode()
    if case == "invalid_json":
        return key, dumps()[: rng.randint(1, 40)]
    if case == "non_utf8":
        return key, dumps(item_id="QQ").replace(b"QQ", b"\xff\xfe")
    if case == "lone_surrogate":
        return key, dumps(item_id="QQ").replace(b"QQ", b"\\ud800")
    if case == "nan":
        return key, dumps(response=0).replace(b'"response": 0', b'"response": NaN')
    if case == "not_an_object":
        return key, rng.choice([b"[1, 2]", b'"text"', b"42", b"null"])
    if case == "tombstone":
        return key, None
    if case == "huge_record":
        return key, dumps(attributes={"pad": "x" * (2 * max_record_bytes)})
    if case == "missing_fields":
        gone = rng.choice(["event_id", "learner_id", "item_id"])
        return key, json.dumps({k: v for k, v in ev.items() if k != gone}).encode()
    raise ValueError(f"unknown case {case!r}; known: {sorted(CASES)}")


def hostile_corpus(n: int, seed: int, cases: Iterable[str] | None = None, hostile_share: float = 0.3,
                   now_ms: int | None = None,
                   max_record_bytes: int = MAX_RECORD_BYTES) -> list[tuple[bytes | None, bytes | None, Expected]]:
    """``n`` records: valid traffic and, as about ``hostile_share`` of them, the hostile ``cases`` (all by
    default; each at least once when ``n`` allows it), in publishing order."""
    rng = random.Random(seed)
    cases = sorted(CASES) if cases is None else list(cases)
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    lids = _Learners(rng, max(8, n // 40), now_ms - 30 * DAY_MS)
    weights = [CASES[c][2] for c in cases]
    warmup = min(n, max(8, n // 50))  # valid events first, so duplicates and late events have a base
    plan = ["valid"] * warmup + cases[: max(n - warmup, 0)]
    plan += ["valid" if rng.random() >= hostile_share else rng.choices(cases, weights)[0]
             for _ in range(n - len(plan))]
    out = []
    for case in plan:
        if case == "valid":
            lid = rng.choice(lids.ids)
            key, value = lids.applied(lid, json.dumps(lids.event(lid)).encode())
            out.append((key, value, Expected("valid", "prediction", "archived")))
        else:
            if case in ("duplicate_event_id", "late") and not lids.last:
                continue
            key, value = _hostile(case, lids, now_ms, max_record_bytes)
            engine, archive, _ = CASES[case]
            out.append((key, value, Expected(case, engine, archive)))
    return out


def as_records(corpus: list[tuple[bytes | None, bytes | None, Expected]], topic: str,
               partitions: int) -> list[Record]:
    """The corpus as a broker would hold it: keyed records on partition crc32(key) % partitions (keyless ones on
    partition 0), offsets from 0 in publishing order."""
    offsets = [0] * partitions
    out = []
    for key, value, _ in corpus:
        p = zlib.crc32(key) % partitions if key is not None else 0
        out.append(Record(topic, p, offsets[p], key, value, 0))
        offsets[p] += 1
    return out


def outcome(value: bytes) -> tuple[tuple[str, int, int], str]:
    """A prediction's or dead letter's source (topic, partition, offset) and kind ("prediction" or the reason)."""
    msg = json.loads(value)
    src = msg["source"]
    return (src["topic"], src["partition"], src["offset"]), msg.get("reason", "prediction")


def accounting(expected: dict[tuple[str, int, int], str], outputs: Iterable[bytes]) -> list[str]:
    """Problems (empty: none) with ``outputs`` (predictions and dead letters) against ``expected`` (source ->
    kind): every input offset must have exactly one output, of the expected kind."""
    seen: dict[tuple[str, int, int], list[str]] = {}
    for value in outputs:
        src, kind = outcome(value)
        seen.setdefault(src, []).append(kind)
    problems = [f"{src}: {kinds} for one input" for src, kinds in seen.items() if len(kinds) > 1]
    problems += [f"{src}: no output" for src in expected if src not in seen]
    problems += [f"{src}: output for no input" for src in seen if src not in expected]
    wrong = Counter((expected[src], kinds[0]) for src, kinds in seen.items()
                    if src in expected and kinds[0] != expected[src])
    problems += [f"{n} records expected {want!r} got {got!r}" for (want, got), n in wrong.items()]
    return problems
