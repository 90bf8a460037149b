"""Dataset converters: tiny hand-made files in every format, then every real data set we hold.

Real-data tests reproduce the counts of each folder's PROVENANCE.md (the figures
quoted below come from there) and skip, naming the path, where the data is absent.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from itertools import groupby, islice
from typing import Iterable, Iterator

import pytest

from connectors.datasets import (CONVERTERS, DATASET_FORMATS, ConversionStats, DatasetFormatError, convert,
                                 data_root, iter_events, options_of, split_files)
from ktstream.cli.main import main as cli_main
from ktstream.data.eventlog import read_events, sort_key
from ktstream.schema import Event

# --------------------------------------------------------------------------- helpers


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def events(fmt: str, inputs, **options) -> tuple[list[dict], ConversionStats]:
    stats = ConversionStats(fmt)
    return list(iter_events(fmt, inputs, stats, **options)), stats


def canonical(records: Iterable[dict], validate_every: int = 1) -> Iterator[dict]:
    """Pass records through, asserting the properties every converter promises, whatever the source.

    Records are `Event.to_record()` fixed points (every `validate_every`-th is
    checked); event ids are unique; each learner's records are contiguous,
    numbered seq = 0, 1, 2, ..., and in the canonical per-learner order of
    `ktstream.data.eventlog.sort_key`. Streams, so whole data sets need not be held.
    """
    ids: set[str] = set()
    learners: set[str] = set()
    previous = None
    for n, r in enumerate(records):
        if n % validate_every == 0:
            assert Event.model_validate(r).to_record() == r
        assert r["event_id"] not in ids, f"event id {r['event_id']} repeats"
        ids.add(r["event_id"])
        if previous is None or r["learner_id"] != previous["learner_id"]:
            assert r["learner_id"] not in learners, f"learner {r['learner_id']} is not contiguous"
            learners.add(r["learner_id"])
            assert r["seq"] == 0, r
        else:
            assert r["seq"] == previous["seq"] + 1, r
            assert sort_key(previous) < sort_key(r), f"not in event-time order: {previous} then {r}"
        previous = r
        yield r


def check_canonical(records: Iterable[dict], validate_every: int = 1) -> int:
    """`canonical` on a whole stream; returns the number of records."""
    return sum(1 for _ in canonical(records, validate_every))


def learner_groups(records: Iterable[dict]) -> Iterator[list[dict]]:
    """Each learner's records as a list, one learner at a time (records are contiguous per learner)."""
    for _, group in groupby(records, key=lambda r: r["learner_id"]):
        yield list(group)


def real(name: str) -> Path:
    """A real data set's folder, or skip saying where it was looked for."""
    path = data_root() / name
    if not path.is_dir():
        pytest.skip(f"real dataset {name!r} not found: {path}; set KTSTREAM_DATA to the folder holding it")
    return path


def day(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).date().isoformat()


def per_learner(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["learner_id"]].append(r)
    return out


# --------------------------------------------------------------------------- tiny fixture files

DKVMN_TEXT = "3\n4,4,9\n1,0,1\n\n0\n\n\n2\n9,2\n0,0\n"


def test_dkvmn_identity_and_zero_length_record(tmp_path):
    recs, stats = events("dkvmn", write(tmp_path, "toy_train.csv", DKVMN_TEXT), concepts=None)
    check_canonical(recs)
    assert [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"]) for r in recs] == [
        ("toy_train:0", "4", ["4"], 1), ("toy_train:0", "4", ["4"], 0), ("toy_train:0", "9", ["9"], 1),
        ("toy_train:2", "9", ["9"], 0), ("toy_train:2", "2", ["2"], 0)]
    assert "event_time" not in recs[0]
    assert (stats.rows_in, stats.interactions_out, stats.learners) == (5, 5, 2)


@pytest.mark.parametrize("map_name, map_text, expected", [
    ("toy_qid_sid_sname", "qid\tskillid\tskillname\n4\t11\tforces\n9\t12\tmoments\n9\t13\tarms\n",
     [["11"], ["11"], ["12", "13"]]),
    ("conceptname_question_id.csv",
     "dataset_question_id,question_id,concept_name\n4,11172,10.1 Angles\n9,11612,13.1 Significant Figures\n",
     [["10.1 Angles"], ["10.1 Angles"], ["13.1 Significant Figures"]]),
    ("toy_qid_sid", "4\t7\n9\t8\n", [["7"], ["7"], ["8"]]),
])
def test_dkvmn_finds_the_dataset_map_beside_the_file(tmp_path, map_name, map_text, expected):
    path = write(tmp_path, "toy_train.csv", "3\n4,4,9\n1,0,1\n")
    write(tmp_path, map_name, map_text)
    recs, stats = events("dkvmn", path)
    assert [r["concept_ids"] for r in recs] == expected
    assert stats.notes["concept_map"]["toy_train.csv"].endswith(map_name)
    # A map of another data set in the same folder is not picked up.
    if map_name.startswith("toy_"):
        other = write(tmp_path, "other_train.csv", "1\n4\n1\n")
        assert events("dkvmn", other)[0][0]["concept_ids"] == ["4"]


def test_dkvmn_explicit_mapping_and_unmapped_items(tmp_path):
    path = write(tmp_path, "toy_train.csv", "3\n4,4,9\n1,0,1\n")
    recs, stats = events("dkvmn", path, concepts={"4": ["a", "b"]})
    assert [r["concept_ids"] for r in recs] == [["a", "b"], ["a", "b"], []]
    assert stats.notes["items_without_concept"] == 1
    mapping = write(tmp_path, "elsewhere/map.tsv", "4\tz\n9\ty\n")
    assert [r["concept_ids"] for r in events("dkvmn", path, concepts=mapping)[0]] == [["z"], ["z"], ["y"]]


@pytest.mark.parametrize("text, message", [
    ("3\n4,4\n1,0\n", "length line says 3"),
    ("2\n4,4\n1\n", "different lengths"),
    ("2\n4,4\n", "ends inside a record"),
    ("2\n4,4\n1,2\n", "response '2'"),
    ("x\n4\n1\n", "expected a sequence length"),
])
def test_dkvmn_rejects_malformed_records_with_their_location(tmp_path, text, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(DatasetFormatError, match=message) as info:
        events("dkvmn", path)
    assert str(path) in str(info.value)


def test_same_file_twice_is_refused_not_appended(tmp_path):
    path = write(tmp_path, "toy_train.csv", DKVMN_TEXT)
    with pytest.raises(DatasetFormatError, match="already converted"):
        events("dkvmn", [path, path])


def test_dkt_csv_trailing_commas_and_zero_based_skills(tmp_path):
    path = write(tmp_path, "builder_test.csv", "1\n7,\n1,\n3\n0,82,82,\n0,1,1,\n")
    recs, stats = events("dkt-csv", path)
    check_canonical(recs)
    assert [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"]) for r in recs] == [
        ("builder_test:0", "7", ["7"], 1), ("builder_test:1", "0", ["0"], 0),
        ("builder_test:1", "82", ["82"], 1), ("builder_test:1", "82", ["82"], 1)]
    assert stats.rows_merged == 0  # no problem ids: repeats cannot be told from attempts


AKT_TEXT = ("1,900\n"
            "5,5,5,8,8,6,6,6\n"      # 5 has skills 7+9+11; 8 twice with one skill; 6 repeats, response changes
            "7,9,11,7,7,3,4,3\n"
            "1,1,1,0,0,1,1,0\n"
            "2,901\n3\n2\n0\n")


def test_akt_merges_multi_skill_repeats_by_default(tmp_path):
    recs, stats = events("akt", write(tmp_path, "toy_test1.csv", AKT_TEXT))
    check_canonical(recs)
    assert [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"]) for r in recs] == [
        ("900", "5", ["7", "9", "11"], 1),
        ("900", "8", ["7"], 0), ("900", "8", ["7"], 0),      # same skill again: a second attempt, kept
        ("900", "6", ["3", "4"], 1), ("900", "6", ["3"], 0),  # different response: a second attempt
        ("901", "3", ["2"], 0)]
    assert [r["event_id"] for r in recs][:4] == ["900:0", "900:3", "900:4", "900:5"]  # source row of the first row
    assert (stats.rows_in, stats.rows_merged, stats.interactions_out) == (9, 3, 6)
    assert stats.rows_in - stats.rows_merged == stats.interactions_out
    assert "attributes" not in recs[0]


def test_akt_keep_repeated_rows_keeps_the_file_as_given(tmp_path):
    recs, stats = events("akt", write(tmp_path, "toy_test1.csv", AKT_TEXT), keep_repeated_rows=True)
    check_canonical(recs)
    assert [r["item_id"] for r in recs] == ["5", "5", "5", "8", "8", "6", "6", "6", "3"]
    assert [r["concept_ids"] for r in recs][:3] == [["7"], ["9"], ["11"]]
    assert (stats.rows_in, stats.rows_merged, stats.interactions_out) == (9, 0, 9)


def test_akt_overlapping_folds_skip_identical_records_and_refuse_conflicts(tmp_path):
    a = write(tmp_path, "toy_train1.csv", AKT_TEXT)
    b = write(tmp_path, "toy_valid1.csv", "2,901\n3\n2\n0\n3,902\n4\n1\n1\n")
    recs, stats = events("akt", [a, b])
    assert [r["learner_id"] for r in recs].count("901") == 1
    assert stats.learners == 3 and stats.notes["duplicate_records_skipped"] == 1
    c = write(tmp_path, "toy_test1.csv", "2,901\n3\n2\n1\n")
    with pytest.raises(DatasetFormatError, match="different sequence"):
        events("akt", [a, c])


def test_dkt_synthetic_columns_are_exercises_and_info_gives_concepts(tmp_path):
    path = write(tmp_path, "naive_c2_q3_s2_v0.csv", "1,0,1\n0,0,1\n")
    write(tmp_path, "info/naive_c2_q3_s2_v0_info.txt", "0.4\t0.49\t1\t1.6\n0.4\t0.49\t0\t1.4\n0.3\t0.4\t1\t1.2\n")
    recs, stats = events("dkt-synthetic", path)
    check_canonical(recs)
    assert [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"]) for r in recs[3:]] == [
        ("naive_c2_q3_s2_v0:1", "0", ["1"], 0), ("naive_c2_q3_s2_v0:1", "1", ["0"], 0),
        ("naive_c2_q3_s2_v0:1", "2", ["1"], 1)]
    assert all(r["concept_ids"] == [] for r in events("dkt-synthetic", path, info=None)[0])
    bad = write(tmp_path, "naive_c2_q3_s2_v1.csv", "1,0\n")
    with pytest.raises(DatasetFormatError, match="info file describes 3"):
        events("dkt-synthetic", bad, info=tmp_path / "info/naive_c2_q3_s2_v0_info.txt")


RAW_HEADER = ("order_id,user_id,problem_id,correct,skill_id,attempt_count,hint_count,ms_first_response,"
              "bottom_hint,first_action\n")
RAW_ROWS = ("30,7,p3,0,10.0,3,1,5000,,0\n"
            "12,7,p2,1,1.0,1,0,800,,0\n"
            "20,8,p9,1,,1,0,100,,0\n"
            "25,7,p1,1,1.0,1,0,900,,0\n"
            "25,7,p1,1,10.0,1,0,900,,0\n"   # one logged attempt, two skills
            "11,7,p4,0,10.0,2,4,-20,1,1\n")


def test_assistments_raw_sorts_by_order_id_and_merges_repeated_order_ids(tmp_path):
    recs, stats = events("assistments-raw", write(tmp_path, "as.csv", RAW_HEADER + RAW_ROWS))
    check_canonical(recs)
    assert [(r["event_id"], r["learner_id"], r["item_id"], r["concept_ids"], r["response"], r["seq"])
            for r in recs] == [
        ("11", "7", "p4", ["10"], 0, 0), ("12", "7", "p2", ["1"], 1, 1), ("25", "7", "p1", ["1", "10"], 1, 2),
        ("30", "7", "p3", ["10"], 0, 3), ("20", "8", "p9", [], 1, 0)]
    assert recs[0]["attributes"] == {"attempt_count": 2, "hint_count": 4, "ms_first_response": -20,
                                     "bottom_hint": 1, "first_action": 1}
    assert "event_time" not in recs[0]
    assert (stats.rows_in, stats.rows_merged, stats.interactions_out, stats.learners) == (6, 1, 5, 2)


def test_assistments_raw_keep_repeated_rows(tmp_path):
    recs, stats = events("assistments-raw", write(tmp_path, "as.csv", RAW_HEADER + RAW_ROWS),
                         keep_repeated_rows=True)
    check_canonical(recs)
    assert [(r["event_id"], r["concept_ids"], r["seq"]) for r in recs if r["learner_id"] == "7"] == [
        ("11", ["10"], 0), ("12", ["1"], 1), ("25:0", ["1"], 2), ("25:1", ["10"], 3), ("30", ["10"], 4)]
    assert (stats.rows_merged, stats.interactions_out) == (0, 6)


def test_assistments_raw_refuses_a_repeated_order_id_with_another_response(tmp_path):
    path = write(tmp_path, "as.csv", RAW_HEADER + "5,7,p1,1,1,1,0,9,,0\n5,7,p1,0,2,1,0,9,,0\n")
    with pytest.raises(DatasetFormatError, match="order_id 5 repeats"):
        events("assistments-raw", path)
    with pytest.raises(DatasetFormatError, match="missing column"):
        events("assistments-raw", write(tmp_path, "x.csv", "a,b\n1,2\n"))


QUESTIONS = ("question_id,bundle_id,explanation_id,correct_answer,part,tags,deployed_at\n"
             "q1,b1,e1,b,3,1;2,0\nq2,b1,e1,a,3,-1,0\nq3,b3,e3,c,5,7,0\n")
KT1_ROWS = ("timestamp,solving_id,question_id,user_answer,elapsed_time\n"
            "2000,2,q3,c,5000\n"
            "1000,1,q2,a,9000\n"     # q1 and q2: one bundle, shown together (same timestamp)
            "1000,1,q1,a,9000\n"
            "2000,2,q3,c,5000\n")    # exact duplicate of the first row


def test_ednet_sorts_by_timestamp_then_solving_id_and_makes_bundles_steps(tmp_path):
    write(tmp_path, "questions.csv", QUESTIONS)
    write(tmp_path, "u42.csv", KT1_ROWS)
    recs, stats = events("ednet-kt1", tmp_path)
    check_canonical(recs)
    assert [(r["event_id"], r["item_id"], r["concept_ids"], r["response"], r["event_time"], r["step_id"],
             r["elapsed_ms"]) for r in recs] == [
        ("u42:1", "q2", [], 1, 1000, "b1:1", 9000),         # tie on (timestamp, solving_id): file order
        ("u42:2", "q1", ["1", "2"], 0, 1000, "b1:1", 9000),
        ("u42:0", "q3", ["7"], 1, 2000, "b3:2", 5000),
        ("u42:3", "q3", ["7"], 1, 2000, "b3:2", 5000)]
    assert {r["learner_id"] for r in recs} == {"u42"}
    assert recs[1]["attributes"] == {"user_answer": "a", "part": 3}
    assert stats.duplicate_rows == 1 and stats.notes["rows_without_tags"] == 1
    assert stats.interactions_out == stats.rows_in == 4  # duplicates are kept


def test_ednet_prejoined_files_without_question_table(tmp_path):
    write(tmp_path, "_u5.csv", "user_id,timestamp,elapsed_time,solving_id,bundle_id,tags,question_id,"
                               "user_answer,correct_answer,correct\r\n"
                               "u5,3000,1.0e3,2.0,b2,4,q2,d,d,1\r\nu5,1000,2000.0,1.0,b1,5;6,q1,a,b,1\r\n")
    recs, stats = events("ednet-kt1", tmp_path / "_u5.csv", questions=None)
    check_canonical(recs)
    assert [(r["learner_id"], r["item_id"], r["response"], r["step_id"], r["elapsed_ms"]) for r in recs] == [
        ("u5", "q1", 0, "b1:1", 2000), ("u5", "q2", 1, "b2:2", 1000)]
    assert stats.notes["correct_column_disagrees"] == 1  # the file's `correct` says 1, the answers say 0
    write(tmp_path, "u6.csv", "timestamp,solving_id,question_id,user_answer,elapsed_time\n1,1,q1,a,1\n")
    with pytest.raises(DatasetFormatError, match="questions="):
        events("ednet-kt1", tmp_path / "u6.csv", questions=None)


DS_HEADER = ("Row\tAnon Student Id\tProblem Name\tStep Name\tStep Start Time\tFirst Transaction Time\t"
             "Correct First Attempt\tIncorrects\tHints\tCorrects\tKC(Default)\tKC(Other)\n")


def test_datashop_sorts_by_time_stably_and_splits_kcs(tmp_path):
    long_kc = "[SkillRule: " + "x" * 400 + "]"
    text = DS_HEADER + (
        "1\ts1\tP1\tR1C1\t2006-10-26 09:51:58.0\t2006-10-26 09:52:30.0\t0\t2\t0\t1\tA~~B\to\n"
        "2\ts1\tP1\tR1C2\t2006-10-26 09:50:00.0\t2006-10-26 09:51:00.0\t1\t0\t0\t1\t\to\n"
        "3\ts1\tP1\tR1C3\t2006-10-26 09:52:00.0\t2006-10-26 09:52:30.0\t1\t0\t1\t1\t" + long_kc + "\to\n"
        "4\ts2\tP2\tR1\t2006-10-27 10:00:00.0\t\t1\t0\t0\t1\tC\to\n"
        "5\ts1\tP2\tR1\t2006-10-26 09:59:59.0\t2006-10-26 10:00:00.0\t1\t0\t0\t1\tC\to")  # no final newline
    recs, stats = events("datashop", write(tmp_path, "steps.txt", text))
    check_canonical(recs)
    assert [(r["event_id"], r["learner_id"], r["item_id"], r["response"]) for r in recs] == [
        ("steps:2", "s1", "P1 | R1C2", 1), ("steps:1", "s1", "P1 | R1C1", 0),  # equal times: file order
        ("steps:3", "s1", "P1 | R1C3", 1), ("steps:5", "s1", "P2 | R1", 1), ("steps:4", "s2", "P2 | R1", 1)]
    assert recs[0]["event_time"] == int(datetime(2006, 10, 26, 9, 51, tzinfo=timezone.utc).timestamp() * 1000)
    assert recs[4]["event_time"] == int(datetime(2006, 10, 27, 10, 0, tzinfo=timezone.utc).timestamp() * 1000)
    assert stats.notes["time_from_step_start"] == 1
    assert recs[1]["concept_ids"] == ["A", "B"] and recs[0]["concept_ids"] == []
    assert recs[1]["attributes"] == {"incorrects": 2, "hints": 0, "corrects": 1}
    (short,) = recs[2]["concept_ids"]
    assert len(short) == 256 and stats.notes["shortened_ids"][short] == long_kc
    other, _ = events("datashop", tmp_path / "steps.txt", kc_column="KC(Other)")
    assert {tuple(r["concept_ids"]) for r in other} == {("o",)}


def test_datashop_cut_off_export(tmp_path):
    rows = "1\ts1\tP1\tR1\t2006-10-26 09:51:58.0\t2006-10-26 09:52:30.0\t0\t2\t0\t1\tA\tx\n"
    recs, stats = events("datashop", write(tmp_path, "cut.txt", DS_HEADER + rows + "2\ts1\tP1\tR2\t2006-10"))
    assert len(recs) == 1 and stats.notes["incomplete_last_row"] == 1
    with pytest.raises(DatasetFormatError, match="fields, expected 12"):
        events("datashop", write(tmp_path, "bad.txt", DS_HEADER + "2\ts1\tP1\n" + rows))


FIXTURES = {
    "dkvmn": lambda d: [write(d, "toy_train.csv", DKVMN_TEXT)],
    "dkt-csv": lambda d: [write(d, "builder_test.csv", "3\n0,82,82,\n0,1,1,\n")],
    "akt": lambda d: [write(d, "toy_test1.csv", AKT_TEXT)],
    "dkt-synthetic": lambda d: [write(d, "naive_c5_q3_s2_v0.csv", "1,0,1\n0,0,1\n")],
    "assistments-raw": lambda d: [write(d, "as.csv", RAW_HEADER + RAW_ROWS)],
    "ednet-kt1": lambda d: [write(d, "questions.csv", QUESTIONS), write(d, "u42.csv", KT1_ROWS)][1:],
    "datashop": lambda d: [write(d, "steps.txt", DS_HEADER + "1\ts1\tP1\tR1\t2006-10-26 09:51:58.0\t"
                                 "2006-10-26 09:52:30.0\t0\t2\t0\t1\tA~~B\tx\n")],
}


def test_every_registered_format_has_a_fixture():
    assert set(FIXTURES) == set(CONVERTERS)


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_through_the_event_log(tmp_path, fmt, suffix):
    inputs = FIXTURES[fmt](tmp_path)
    expected, _ = events(fmt, inputs)
    check_canonical(expected)
    out = tmp_path / f"events{suffix}"
    stats = convert(fmt, inputs, out, validate=True)
    assert read_events(out) == expected
    assert stats.interactions_out == len(expected)
    assert not list(tmp_path.glob(".*partial*"))


def test_convert_checks_format_and_options_before_reading(tmp_path):
    with pytest.raises(ValueError, match="known formats"):
        convert("nope", tmp_path / "missing.csv", None)
    with pytest.raises(ValueError, match="takes no option.*keep_repeated_rows"):
        convert("dkvmn", tmp_path / "missing.csv", None, keep_repeated_rows=True)
    assert options_of("akt") == ["keep_repeated_rows"]


def test_failed_conversion_leaves_no_output(tmp_path):
    good = write(tmp_path, "toy_train.csv", DKVMN_TEXT)
    bad = write(tmp_path, "bad_train.csv", "2\n4,4\n1\n")
    out = tmp_path / "events.jsonl"
    with pytest.raises(DatasetFormatError):
        convert("dkvmn", [good, bad], out)
    assert not out.exists() and not list(tmp_path.glob(".*partial*"))


def test_cli_convert_prints_stats(tmp_path, capsys):
    path = write(tmp_path, "toy_test1.csv", AKT_TEXT)
    out = tmp_path / "events.parquet"
    assert cli_main(["convert", "akt", str(path), "-o", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["rows_in"], printed["rows_merged"], printed["interactions_out"]) == (9, 3, 6)
    assert len(read_events(out)) == 6
    assert cli_main(["convert", "akt", str(path), "-o", str(out), "--keep-repeated-rows"]) == 0
    assert json.loads(capsys.readouterr().out)["interactions_out"] == 9
    assert cli_main(["convert", "dkvmn", str(path), "-o", str(out), "--keep-repeated-rows"]) == 1
    assert "takes no option" in capsys.readouterr().err
    assert cli_main(["convert", "akt", str(path), "-o", str(tmp_path / "events.csv")]) == 2


def test_split_files_and_data_root(tmp_path, monkeypatch):
    folder = tmp_path / "akt_like"
    for k in (1, 2):
        for part in ("train", "valid", "test"):
            write(folder, f"x_pid_{part}{k}.csv", "")
    write(folder, "problems.json", "{}")
    monkeypatch.setenv("KTSTREAM_DATA", str(tmp_path))
    assert data_root() == tmp_path
    s = split_files("akt_like")
    assert s.train is None and [f.k for f in s.folds] == [1, 2]
    assert [p.name for p in s.whole] == ["x_pid_train1.csv", "x_pid_valid1.csv", "x_pid_test1.csv"]
    with pytest.raises(FileNotFoundError, match="KTSTREAM_DATA"):
        split_files("absent")


# --------------------------------------------------------------------------- real data (PROVENANCE.md counts)


def test_every_dataset_folder_has_a_converter():
    root = data_root()
    if not root.is_dir():
        pytest.skip(f"data root not found: {root}; set KTSTREAM_DATA")
    folders = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert folders, f"no data sets under {root}"
    assert set(folders) <= set(DATASET_FORMATS), set(folders) - set(DATASET_FORMATS)
    assert set(DATASET_FORMATS) <= set(REAL_TESTS)
    assert set(DATASET_FORMATS.values()) == set(CONVERTERS)


# name: (learners, responses, items, concepts, share correct, {split part: (learners, responses)})
THREE_LINE = {
    "dkvmn_assist2009_updated": (4151, 325637, 110, 110, 0.659, {"train": (2921, 224218), "test": (1230, 101419)}),
    "dkvmn_assist2015": (19840, 683801, 100, 100, 0.732, {"train": (13935, None), "test": (5905, None)}),
    "dkvmn_statics2011": (333, 189297, 1223, 98, 0.765, {"train": (229, None), "test": (104, None)}),
    "fsai_f1tof3": (310, 51283, 2266, 99, 0.467, {"train": (217, None), "test": (93, None)}),
    "dkt_assistments2009_builder": (4217, 525534, 124, 124, 0.680,
                                    {"train": (3361, 407967), "test": (856, 117567)}),
}


@pytest.mark.parametrize("name", sorted(THREE_LINE))
def test_real_three_line_datasets(name):
    real(name)
    learners, responses, items, concepts, correct, parts = THREE_LINE[name]
    splits = split_files(name)
    fmt = DATASET_FORMATS[name]
    stats = ConversionStats(fmt)
    part_learners: Counter = Counter()
    part_rows: Counter = Counter()

    def counted(records):  # learner ids start with the file stem, so the split parts can be told apart
        for r in records:
            stem = r["learner_id"].rsplit(":", 1)[0]
            part_rows[stem] += 1
            part_learners[stem] += r["seq"] == 0
            yield r

    assert check_canonical(counted(iter_events(fmt, splits.whole, stats)), validate_every=97) == responses
    assert (stats.learners, stats.rows_in, stats.interactions_out) == (learners, responses, responses)
    assert (stats.items, stats.concepts) == (items, concepts)
    # PROVENANCE gives 3 decimals; e.g. the DKT file's 357,085 / 525,534 = 0.67946 is written there as 0.680.
    assert stats.share_correct == pytest.approx(correct, abs=6e-4)
    assert stats.notes.get("items_without_concept", 0) == 0
    for part, (n_learners, n_responses) in parts.items():
        stem = getattr(splits, part).stem
        assert part_learners[stem] == n_learners
        assert n_responses is None or part_rows[stem] == n_responses
    if fmt == "dkvmn":
        assert len(splits.folds) == 5 and all(f.valid is not None for f in splits.folds)


def test_real_skill_level_files_use_skills_as_concepts():
    real("dkvmn_assist2015")
    recs, _ = events("dkvmn", split_files("dkvmn_assist2015").test)
    assert all(r["concept_ids"] == [r["item_id"]] for r in recs)
    real("dkt_assistments2009_builder")
    recs, _ = events("dkt-csv", split_files("dkt_assistments2009_builder").test)
    assert {int(r["item_id"]) for r in recs} <= set(range(124)) and min(int(r["item_id"]) for r in recs) == 0


def test_real_statics_maps_questions_to_one_skill_each():
    real("dkvmn_statics2011")
    recs, _ = events("dkvmn", split_files("dkvmn_statics2011").test)
    item_concepts = {r["item_id"]: tuple(r["concept_ids"]) for r in recs}
    assert all(len(c) == 1 for c in item_concepts.values())
    assert len(set(item_concepts.values())) < len(item_concepts)  # questions share skills: the map was used


def test_real_akt_merges_15_7_percent_of_rows():
    splits = split_files(real("assist2009_akt_pid").name)
    stats = ConversionStats("akt")
    multi_concept = 0
    for rs in learner_groups(canonical(iter_events("akt", splits.whole, stats), validate_every=97)):
        multi_concept += sum(len(r["concept_ids"]) > 1 for r in rs)
        for a, b in zip(rs, rs[1:]):  # nothing mergeable is left
            assert not (a["item_id"] == b["item_id"] and a["response"] == b["response"]
                        and not set(b["concept_ids"]) & set(a["concept_ids"])), (a, b)
    # PROVENANCE: 4,151 students, 325,637 responses (rows), 16,891 problems, 110 skills.
    assert (stats.learners, stats.rows_in, stats.items, stats.concepts) == (4151, 325637, 16891, 110)
    assert round(stats.share_rows_merged, 3) == 0.157
    assert stats.interactions_out == stats.rows_in - stats.rows_merged
    assert multi_concept > 0

    kept = ConversionStats("akt")
    rows = Counter(tuple(r["response"] for r in rs)
                   for rs in learner_groups(iter_events("akt", splits.whole, kept, keep_repeated_rows=True)))
    assert (kept.interactions_out, kept.rows_merged) == (325637, 0)
    assert kept.share_correct == pytest.approx(0.659, abs=6e-4)  # 214,417 / 325,637 = 0.65845
    # Rows as given are the DKVMN copy of ASSISTments 2009: the same multiset of response sequences.
    if (data_root() / "dkvmn_assist2009_updated").is_dir():
        dkvmn = Counter(tuple(r["response"] for r in rs) for rs in learner_groups(
            iter_events("dkvmn", split_files("dkvmn_assist2009_updated").whole)))
        assert rows == dkvmn


def test_real_akt_folds_cover_every_learner_once():
    splits = split_files(real("assist2009_akt_pid").name)
    assert [f.k for f in splits.folds] == [1, 2, 3, 4, 5]
    # test1..test5 hold 4,150 students; train1 adds the one student that is in every train file.
    stats = convert("akt", [f.test for f in splits.folds] + [splits.folds[0].train], None)
    assert (stats.learners, stats.rows_in) == (4151, 325637)
    assert stats.notes["duplicate_records_skipped"] > 0
    assert convert("akt", [f.test for f in splits.folds], None).learners == 4150


def test_real_dkt_synthetic_versions():
    folder = real("dkt_synthetic5")
    versions = sorted(folder.glob("naive_c5_q50_s4000_v*.csv"), key=lambda p: int(p.stem.rsplit("_v", 1)[1]))
    assert len(versions) == 20
    # Whole files for v0 (tab-separated info) and v1 (comma-separated info); the first learners of every version.
    for path in versions[:2]:
        stats = ConversionStats("dkt-synthetic")
        check_canonical(iter_events("dkt-synthetic", path, stats), validate_every=97)
        assert (stats.learners, stats.rows_in, stats.items, stats.concepts) == (4000, 200000, 50, 5), path.name
    for path in versions:
        first = list(islice(iter_events("dkt-synthetic", path), 100))
        assert [r["item_id"] for r in first[:50]] == [str(j) for j in range(50)]
        concept_of = {r["item_id"]: tuple(r["concept_ids"]) for r in first[:50]}
        assert all(concept_of[r["item_id"]] == tuple(r["concept_ids"]) for r in first[50:])
        assert len(set(concept_of.values())) == 5 and all(len(c) == 1 for c in concept_of.values()), path.name


def test_real_assistments_raw_rows():
    folder = real("assist2009_skillbuilder_raw_2skills")
    recs, stats = events("assistments-raw", folder / "as.csv")
    check_canonical(recs)
    # PROVENANCE: 10,791 rows, 902 students, 678 problems, 2 skills, correct 8,029 ones / 2,762 zeros,
    # order_id unique (so nothing to merge here).
    assert (stats.rows_in, stats.learners, stats.items, stats.concepts) == (10791, 902, 678, 2)
    assert stats.response_counts == {1: 8029, 0: 2762}
    assert stats.rows_merged == 0 and stats.interactions_out == 10791
    lengths = sorted(len(rs) for rs in per_learner(recs).values())
    assert (lengths[0], lengths[-1], lengths[len(lengths) // 2]) == (1, 91, 8)
    for rs in per_learner(recs).values():
        assert [int(r["event_id"]) for r in rs] == sorted(int(r["event_id"]) for r in rs)
    assert all({"attempt_count", "hint_count", "ms_first_response"} <= set(r["attributes"]) for r in recs)
    # The file is grouped by skill, so time order interleaves the two skills for some learner.
    assert any(len({tuple(r["concept_ids"]) for r in rs}) > 1 and
               [r["concept_ids"] for r in rs] != sorted(r["concept_ids"] for r in rs)
               for rs in per_learner(recs).values())


def test_real_ednet_kt1():
    folder = real("ednet_kt1_11users")
    recs, stats = events("ednet-kt1", folder)
    check_canonical(recs, validate_every=97)
    # PROVENANCE: 11 users, 168,170 interactions (13,393-22,032 per user), 11,551 questions,
    # 188 distinct tags counting EdNet's "-1" (= no tag), which is not made a concept;
    # 52 duplicate (timestamp, question_id) rows: 36 + 11 + 2 + 2 + 1 in five users.
    assert (stats.learners, stats.rows_in, stats.interactions_out) == (11, 168170, 168170)
    assert (stats.items, stats.concepts, stats.duplicate_rows) == (11551, 188 - 1, 52)
    assert "correct_column_disagrees" not in stats.notes  # correct == (user_answer == correct_answer)
    users = per_learner(recs)
    sizes = sorted(len(rs) for rs in users.values())
    assert (sizes[0], sizes[-1]) == (13393, 22032)
    first, last = min(r["event_time"] for r in recs), max(r["event_time"] for r in recs)
    assert (day(first), day(last)) == ("2018-09-12", "2019-11-27")
    duplicates = []
    for rs in users.values():
        solving = [int(r["step_id"].split(":")[1]) for r in rs]
        assert solving == sorted(solving)  # after the sort, solving_id never decreases
        duplicates.append(sum(c - 1 for c in Counter((r["event_time"], r["item_id"]) for r in rs).values()))
    assert sorted((n for n in duplicates if n), reverse=True) == [36, 11, 2, 2, 1]


def test_real_datashop_cognitive_tutor():
    folder = real("cognitive_tutor_algebra_subset")
    recs, stats = events("datashop", folder / "ct.csv")
    check_canonical(recs)
    # PROVENANCE: 18,220 rows, 11 students (139-5,123 rows each), 1,389 problem names, 12,559 (problem, step)
    # pairs, 232 distinct KC fields, 293 multi-KC rows, 3,519 without KC, 13,602 / 4,618 first attempts
    # right / wrong, 2006-09-05 to 2007-05-23; the file is cut but its last row is complete.
    assert (stats.rows_in, stats.learners, stats.items) == (18220, 11, 12559)
    assert stats.response_counts == {1: 13602, 0: 4618}
    assert "incomplete_last_row" not in stats.notes
    assert len({r["item_id"].split(" | ")[0] for r in recs}) == 1389
    sizes = sorted(len(rs) for rs in per_learner(recs).values())
    assert (sizes[0], sizes[-1]) == (139, 5123)
    assert len({tuple(r["concept_ids"]) for r in recs if r["concept_ids"]}) == 232
    assert sum(len(r["concept_ids"]) > 1 for r in recs) == 293
    assert sum(not r["concept_ids"] for r in recs) == 3519
    first, last = min(r["event_time"] for r in recs), max(r["event_time"] for r in recs)
    assert (day(first), day(last)) == ("2006-09-05", "2007-05-23")
    assert all({"incorrects", "hints", "corrects"} <= set(r["attributes"]) for r in recs)


REAL_TESTS = set(THREE_LINE) | {"assist2009_akt_pid", "dkt_synthetic5", "assist2009_skillbuilder_raw_2skills",
                                "ednet_kt1_11users", "cognitive_tutor_algebra_subset"}
