"""load_dataset: a data set by name, a folder of split files, a canonical event file, a table -> events and splits."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

import ktstream
from ktstream.data.eventlog import write_events
from tests.conftest import require_dataset


def akt_block(index: int, user: str, problems: list[int], skills: list[int], responses: list[int]) -> str:
    """One learner in AKT's 4-line format."""
    return "\n".join([f"{index},{user}", *(",".join(map(str, xs)) for xs in (problems, skills, responses))]) + "\n"


def akt_folder(folder: Path, prefix: str = "toy", folds: int = 2) -> Path:
    """Folds 1..folds of train / valid / test files; learner ids say which file and fold they are in."""
    folder.mkdir(parents=True)
    for k in range(1, folds + 1):
        for part, n in (("train", 3), ("valid", 1), ("test", 2)):
            text = "".join(akt_block(i, f"{part}{k}-{i}", [5, 6, 7, 8], [1, 2, 3, 1], [1, 0, 0, 1]) for i in range(n))
            (folder / f"{prefix}_{part}{k}.csv").write_text(text)
    return folder


def learners(records) -> set[str]:
    return {r["learner_id"] for r in records}


def test_a_data_set_by_name_reads_its_own_folds(tmp_path, monkeypatch):
    akt_folder(tmp_path / "assist2009_akt_pid")
    data = ktstream.load_dataset("assist2009_akt_pid", root=tmp_path)
    assert (data.name, data.format, data.rows, data.fold) == ("assist2009_akt_pid", "akt", "merged", 1)
    assert learners(data.train) == {"train1-0", "train1-1", "train1-2"}
    assert learners(data.valid) == {"valid1-0"} and learners(data.test) == {"test1-0", "test1-1"}
    assert len(data.events) == len(data.train) + len(data.valid) + len(data.test) == 6 * 4
    assert learners(ktstream.load_dataset("assist2009_akt_pid", root=tmp_path, fold=2).test) == {"test2-0", "test2-1"}
    monkeypatch.setenv("KTSTREAM_DATA", str(tmp_path))
    assert ktstream.load_dataset("assist2009_akt_pid").events == data.events


def test_repeated_rows_are_merged_unless_kept(tmp_path):
    folder = tmp_path / "rows"
    folder.mkdir()
    # problem 5 tagged with skills 1 and 2: two rows, one answer
    (folder / "r_train.csv").write_text(akt_block(1, "a", [5, 5, 6], [1, 2, 3], [1, 1, 0]))
    (folder / "r_test.csv").write_text(akt_block(2, "b", [6], [3], [1]))
    merged = ktstream.load_dataset(folder, format="akt")
    kept = ktstream.load_dataset(folder, format="akt", keep_repeated_rows=True)
    assert (len(merged.train), merged.rows, len(kept.train), kept.rows) == (2, "merged", 3, "as given")
    assert merged.train[0]["concept_ids"] == ["1", "2"]
    assert merged.valid is None and merged.fold is None  # no validation file: train() holds learners out itself


def test_a_folder_of_our_own_in_a_format_its_files_show(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    for i, part in enumerate(("train1", "valid1", "test1")):  # AKT's blocks: "index,user_id" with numeric ids
        (folder / f"mine_{part}.csv").write_text(akt_block(i, str(900 + i), [5, 6], [1, 2], [1, 0]))
    data = ktstream.load_dataset(folder)
    assert (data.format, data.fold, learners(data.valid)) == ("akt", 1, {"901"})


def test_folders_and_files_of_canonical_events(tmp_path):
    events = ktstream.simulate(n_learners=6, mean_length=5, seed=0)
    parts = {"train": events[:10], "valid": events[10:15], "test": events[15:]}
    folder = tmp_path / "logs"
    folder.mkdir()
    for part, recs in parts.items():
        write_events(recs, folder / f"{part}.{'parquet' if part == 'test' else 'jsonl'}")
    data = ktstream.load_dataset(folder)
    assert data.format == "events" and (data.train, data.valid, data.test) == (parts["train"], parts["valid"],
                                                                              parts["test"])
    write_events(events, tmp_path / "all.parquet")
    whole = ktstream.load_dataset(tmp_path / "all.parquet")
    assert (whole.name, whole.events, whole.train) == ("all", events, None)
    unsplit = tmp_path / "unsplit"
    unsplit.mkdir()
    write_events(events[:7], unsplit / "a.jsonl")
    write_events(events[7:], unsplit / "b.jsonl")
    assert ktstream.load_dataset(unsplit).events == events


def test_a_file_in_a_converter_format(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text(akt_block(1, "x", [1, 2], [3, 4], [0, 1]))
    data = ktstream.load_dataset(path, format="akt")
    assert [(r["learner_id"], r["item_id"], r["response"]) for r in data.events] == [("x", "1", 0), ("x", "2", 1)]


def test_tables_and_lists():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"learner_id": [1, 1, 2], "item_id": [10, 11, 10], "concept_ids": ["add", "sub", "add"],
                          "response": [1, None, 0],
                          "event_time": pd.to_datetime(["2024-05-01T10:00:00Z", "2024-05-01T10:01:00Z",
                                                        "2024-05-01T10:00:00Z"], utc=True)})
    data = ktstream.load_dataset(frame)
    assert data.events[0] == {"event_id": "1#0", "learner_id": "1", "item_id": "10", "concept_ids": ["add"],
                              "response": 1, "event_time": 1714557600000}
    assert "response" not in data.events[1]  # a missing response: a prediction request
    import pyarrow as pa
    assert ktstream.load_dataset(pa.Table.from_pandas(frame)).events == data.events
    assert ktstream.load_dataset(data.events).events == data.events
    assert list(data.to_frame().columns[:3]) == ["event_id", "learner_id", "item_id"]
    with pytest.raises(ValueError, match="time zone"):
        ktstream.load_dataset([{"learner_id": "a", "item_id": "q", "event_time": datetime.datetime(2024, 5, 1)}])


def test_split_by_learner():
    data = ktstream.Dataset.of(ktstream.simulate(n_learners=50, mean_length=4, seed=0))
    split = data.split_by_learner(test=0.2, valid=0.1, seed=0)
    parts = [learners(split.train), learners(split.valid), learners(split.test)]
    assert set.union(*parts) == learners(data.events) and sum(map(len, parts)) == 50
    assert 5 <= len(parts[2]) <= 16 and 1 <= len(parts[1]) <= 10
    assert split.train == data.split_by_learner(test=0.2, valid=0.1, seed=0).train
    assert learners(data.split_by_learner(test=0.2, seed=1).test) != parts[2]
    with pytest.raises(ValueError, match="shares"):
        data.split_by_learner(test=0.7, valid=0.4)


def test_learner_gives_the_learners_order():
    events = [{"learner_id": "a", "item_id": "q2", "event_time": 20}, {"learner_id": "b", "item_id": "q9"},
              {"learner_id": "a", "item_id": "q1", "event_time": 10}]
    data = ktstream.Dataset.of(events)
    assert [r["item_id"] for r in data.learner("a")] == ["q1", "q2"] and data.learners == ["a", "b"]


def test_what_cannot_be_read_says_why(tmp_path):
    with pytest.raises(FileNotFoundError, match="data sets we know by name: .*assist2009_akt_pid"):
        ktstream.load_dataset("no_such_data_set", root=tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x_train.csv").write_text("")
    with pytest.raises(ValueError, match="cannot tell the format .* give format="):
        ktstream.load_dataset(tmp_path / "mine")
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        ktstream.load_dataset(tmp_path / "mine", format="csv")
    with pytest.raises(ValueError, match="has no repeated-row merging"):
        ktstream.load_dataset(tmp_path / "mine", format="dkvmn", keep_repeated_rows=True)
    with pytest.raises(TypeError, match="DataFrame"):
        ktstream.load_dataset(42)


def test_connectors_are_reached_through_ktstream_names():
    import connectors.datasets
    import connectors.kafka

    assert ktstream.datasets.convert is connectors.datasets.convert
    assert ktstream.datasets.DATASET_FORMATS is connectors.datasets.DATASET_FORMATS
    assert ktstream.kafka.KafkaSource is connectors.kafka.KafkaSource


def test_a_shipped_data_set_as_the_converters_read_it():
    require_dataset("dkvmn_assist2009_updated")
    from connectors.datasets import iter_events, split_files

    data = ktstream.load_dataset("dkvmn_assist2009_updated")
    files = split_files("dkvmn_assist2009_updated")
    fold = files.folds[0]
    assert data.train == list(iter_events("dkvmn", fold.train)) and data.test == list(iter_events("dkvmn", files.test))
    assert learners(data.train).isdisjoint(learners(data.test)) and data.rows == "as given"  # no problem ids
    json.dumps(data.events[:3])  # plain records
