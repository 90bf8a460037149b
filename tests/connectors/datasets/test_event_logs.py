"""`ktstream convert events`: a canonical log rewritten in the other form, every record validated, streaming."""

from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest

from connectors.datasets import convert
from connectors.datasets.exceptions import DatasetFormatError
from ktstream.cli.main import main
from ktstream.data.columnar import scan_log
from ktstream.data.eventlog import read_events
from ktstream.schema import Event

LINES = [
    {"event_id": "e1", "learner_id": "u1", "item_id": "q1", "concept_ids": ["k1"], "response": 1,
     "event_time": "2024-05-01T10:00:00Z"},
    {"event_id": "e2", "learner_id": "u2", "item_id": "q2", "response": 0, "event_time": 1714557700000,
     "attributes": {"device": "phone", "tries": [1, 2]}},
    {"event_id": "e3", "learner_id": "élève", "item_id": "q1", "seq": 4, "step_id": "s9", "elapsed_ms": 12},
    {"event_id": "e4", "learner_id": "u1", "item_id": "q3", "event_time": "2024-05-01T12:00:00+02:00"},
]


def _log(path, lines=LINES, valid: bool = True) -> list[dict]:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines) + b"\n")
    return [Event.model_validate(x).to_record() for x in lines] if valid else []


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_a_jsonl_log_is_rewritten_record_for_record_in_canonical_form(tmp_path, suffix):
    expected = _log(tmp_path / "log.jsonl")
    stats = convert("events", tmp_path / "log.jsonl", tmp_path / f"out{suffix}")
    assert read_events(tmp_path / f"out{suffix}") == expected
    assert expected[0]["event_time"] == 1714557600000 and expected[3]["event_time"] == 1714557600000
    assert (stats.rows_in, stats.interactions_out, stats.learners, stats.items) == (4, 4, 3, 3)


def test_a_parquet_log_and_several_files_keep_their_order(tmp_path):
    expected = _log(tmp_path / "a.jsonl")
    convert("events", tmp_path / "a.jsonl", tmp_path / "a.parquet")
    more = _log(tmp_path / "b.jsonl", [{**x, "event_id": x["event_id"] + "b"} for x in LINES[:2]])
    convert("events", [tmp_path / "a.parquet", tmp_path / "b.jsonl"], tmp_path / "both.jsonl")
    assert read_events(tmp_path / "both.jsonl") == expected + more


def test_a_record_the_schema_refuses_names_its_line_and_leaves_no_output(tmp_path):
    _log(tmp_path / "log.jsonl", [*LINES[:2], {**LINES[0], "event_id": "e5", "response": "right"}, LINES[3]],
         valid=False)
    with pytest.raises(DatasetFormatError, match=r"log\.jsonl:3: not an event \(response"):
        convert("events", tmp_path / "log.jsonl", tmp_path / "out.parquet")
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"], "no output, no partial file"
    (tmp_path / "log.txt").write_text("{}\n")
    with pytest.raises(DatasetFormatError, match="ends in .jsonl or .parquet"):
        convert("events", tmp_path / "log.txt", tmp_path / "out.parquet")


def test_the_cli_turns_a_jsonl_log_into_the_parquet_log_the_columnar_reader_takes(tmp_path, capsys):
    expected = _log(tmp_path / "log.jsonl")
    assert main(["convert", "events", str(tmp_path / "log.jsonl"), "-o", str(tmp_path / "log.parquet")]) == 0
    assert json.loads(capsys.readouterr().out)["interactions_out"] == 4
    rows = scan_log(tmp_path / "log.parquet").read_all().to_pylist()
    assert sorted(r["event_id"] for r in rows) == sorted(r["event_id"] for r in expected)


def test_the_log_streams_through(tmp_path):
    """Traced Python allocations at N and 4N lines (JSON lines out: no writer chunk): the peak grows by under
    a tenth of the input's growth, after a first, untraced conversion has done the one-time work. (With
    pydantic's string cache on, the peak held up to 16,384 parsed ids and depended on which were cached.)"""
    def peak(n: int, traced: bool = True) -> tuple[int, int]:
        source = tmp_path / f"log{n}.jsonl"
        _log(source, [{**LINES[i % 4], "event_id": f"e{i}", "learner_id": f"u{i % 50}"} for i in range(n)])
        if not traced:
            return convert("events", source, tmp_path / f"out{n}.jsonl")
        tracemalloc.start()
        try:
            convert("events", source, tmp_path / f"out{n}.jsonl")
            return tracemalloc.get_traced_memory()[1], source.stat().st_size
        finally:
            tracemalloc.stop()

    peak(20_000, traced=False)
    (small, small_size), (large, large_size) = peak(3_000), peak(12_000)
    assert large - small < 0.1 * (large_size - small_size), (small, large, large_size)
