"""The disk-sorted assistments-raw and datashop readers give exactly what the in-memory grouping gave.

The reference functions below are the readers as they were before the sort moved to DuckDB
(`connectors.datasets.sorted_rows`): every row held in a dict of lists by learner, each list sorted
stably in Python. Random small inputs with interleaved learners spread over two files, ties on the sort
key (repeated ``order_id`` rows, equal times), absent fields and ids long enough to be shortened are
converted both ways, with batches of a few rows so learners straddle batch boundaries: the records, the
statistics (including the order of ``notes``) and the errors must be identical.
"""

from __future__ import annotations

import csv
import random
from typing import Any, Iterator

import pytest

from connectors.datasets import ConversionStats, DatasetFormatError, iter_events, sorted_rows
from connectors.datasets.assistments_raw import ATTRIBUTES, REQUIRED, _learner_events
from connectors.datasets.datashop import (COUNT_COLUMNS, CORRECT, FIRST_TIME, KC_SEPARATOR, PROBLEM, START_TIME,
                                          STEP, STUDENT, _rows, parse_time_ms)
from connectors.datasets.records import (as_paths, check_concepts, clean_id, event_record, fit_id, parse_int,
                                         parse_response)

# --------------------------------------------------------------------------- the in-memory reference


def reference_assistments_raw(inputs, stats, keep_repeated_rows=False) -> Iterator[dict[str, Any]]:
    by_learner: dict[str, list] = {}
    for path in as_paths(inputs):
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
            if missing:
                raise DatasetFormatError(f"{path}: missing column(s) {missing}; is this a skill-builder export?")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                stats.rows_in += 1
                attrs = {a: parse_int(row[a], a, where) for a in ATTRIBUTES if (row.get(a) or "").strip()}
                by_learner.setdefault(clean_id(row["user_id"]), []).append(
                    (parse_int(row["order_id"], "order_id", where), clean_id(row["problem_id"]),
                     clean_id(row["skill_id"] or ""), parse_response(row["correct"], where), where, attrs))
    for learner, rows in by_learner.items():
        learner_id = fit_id(learner, stats)
        stats.start_learner(learner_id, rows[0][4])
        rows.sort(key=lambda r: r[0])
        yield from _learner_events(learner_id, rows, keep_repeated_rows, stats)


def reference_datashop(inputs, stats, kc_column=None) -> Iterator[dict[str, Any]]:
    by_student: dict[str, list] = {}
    for path in as_paths(inputs):
        for where, row_id, fields, kcs in _rows(path, kc_column, stats):
            student, problem, step = fields[STUDENT], fields[PROBLEM], fields[STEP]
            if not student or not (problem or step):
                raise DatasetFormatError(f"{where}: empty student, problem or step name")
            time_text = fields.get(FIRST_TIME) or ""
            if not time_text.strip():
                time_text = fields.get(START_TIME) or ""
                if not time_text.strip():
                    raise DatasetFormatError(f"{where}: neither {FIRST_TIME!r} nor {START_TIME!r} is given")
                stats.note("time_from_step_start")
            cids = [fit_id(k.strip(), stats) for k in kcs.split(KC_SEPARATOR) if k.strip()]
            attrs = {key: parse_int(fields[col], col, where) for col, key in COUNT_COLUMNS.items()
                     if (fields.get(col) or "").strip()}
            by_student.setdefault(student, []).append((parse_time_ms(time_text, where), f"{path.stem}:{row_id}", {
                "item": fit_id(f"{problem} | {step}", stats), "concepts": check_concepts(cids, where),
                "response": parse_response(fields[CORRECT], where), "attributes": attrs}))
    for student, rows in by_student.items():
        learner = fit_id(student, stats)
        stats.start_learner(learner, f"student {student!r}")
        rows.sort(key=lambda r: r[0])
        for seq, (time_ms, event_id, f) in enumerate(rows):
            rec = event_record(fit_id(event_id, stats), learner, f["item"], f["concepts"], f["response"], seq=seq,
                               event_time=time_ms, attributes=f["attributes"])
            stats.observe(rec)
            yield rec


REFERENCES = {"assistments-raw": reference_assistments_raw, "datashop": reference_datashop}


def both(fmt: str, inputs, **options) -> tuple[Any, Any]:
    """(records, stats) or the error, from the reference and from the converter."""
    out = []
    for read in (REFERENCES[fmt], lambda i, s, **o: iter_events(fmt, i, s, **o)):
        stats = ConversionStats(fmt)
        try:
            records = list(read(inputs, stats, **options))
        except (DatasetFormatError, ValueError) as exc:
            out.append((type(exc), str(exc)))
            continue
        out.append((records, stats.as_dict(), sorted(stats._learners), sorted(stats._items)))
    return out[0], out[1]


@pytest.fixture(params=[3, None], ids=["batches-of-3", "default-batches"])
def batch_rows(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(sorted_rows, "BATCH_ROWS", request.param)
    return request.param


# --------------------------------------------------------------------------- random inputs

LONG = "L" * 300  # shortened by fit_id: its note's order is part of the statistics


def assistments_files(folder, rng: random.Random) -> list:
    learners = ["7", "8.0", " 9 ", "10", LONG]
    rows = []
    for learner in learners:
        for _ in range(rng.randint(1, 6)):
            order_id = rng.randint(1, 12)  # repeats within and across learners
            problem, response = f"p{order_id % 5}", order_id % 2  # a repeated order_id agrees on both
            for _ in range(rng.choice([1, 1, 2, 3])):
                attrs = [rng.choice(["", str(rng.randint(0, 9)), f"{rng.randint(-5, 5)}.0"]) for _ in ATTRIBUTES]
                rows.append([str(order_id), learner, problem, str(response), rng.choice(["", "1", "10", "3.0"]),
                             *attrs])
    rng.shuffle(rows)
    cut = rng.randint(0, len(rows))
    header = ",".join([*REQUIRED, *ATTRIBUTES])
    paths = []
    for name, part in (("a.csv", rows[:cut]), ("b.csv", rows[cut:])):
        path = folder / name
        path.write_text(header + "\n" + "".join(",".join(r) + "\n" for r in part), encoding="utf-8")
        paths.append(path)
    return paths


DS_HEADER = ["Row", STUDENT, PROBLEM, STEP, START_TIME, FIRST_TIME, CORRECT, *COUNT_COLUMNS, "KC(Default)"]


def datashop_files(folder, rng: random.Random) -> list:
    rows = []
    for n in range(rng.randint(5, 30)):
        student = rng.choice(["s1", "s2", " s3", LONG])
        minute = rng.randint(0, 4)  # few distinct times: many ties
        time = f"2006-10-26 09:5{minute}:00.0"
        first, start = (time, "") if rng.random() < 0.7 else ("", time)
        kcs = KC_SEPARATOR.join(rng.sample(["A", "B", "C", "K" * 300], rng.randint(0, 2)))
        counts = [rng.choice(["", "0", "2", "1.0"]) for _ in COUNT_COLUMNS]
        rows.append([str(n + 1), student, f"P{rng.randint(1, 3)}", f"R{rng.randint(1, 3)}", start, first,
                     str(rng.randint(0, 1)), *counts, kcs])
    cut = rng.randint(0, len(rows))
    paths = []
    for name, part in (("steps1.txt", rows[:cut]), ("steps2.txt", rows[cut:])):
        path = folder / name
        path.write_text("\t".join(DS_HEADER) + "\n" + "".join("\t".join(r) + "\n" for r in part), encoding="utf-8")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("keep_repeated_rows", [False, True])
def test_assistments_raw_matches_the_in_memory_grouping(tmp_path, batch_rows, keep_repeated_rows):
    for seed in range(12):
        folder = tmp_path / str(seed)
        folder.mkdir()
        inputs = assistments_files(folder, random.Random(seed))
        expected, got = both("assistments-raw", inputs, keep_repeated_rows=keep_repeated_rows)
        assert isinstance(expected[0], list) and len(expected[0]) > 5, expected
        assert got == expected, seed


def test_datashop_matches_the_in_memory_grouping(tmp_path, batch_rows):
    for seed in range(12):
        folder = tmp_path / str(seed)
        folder.mkdir()
        inputs = datashop_files(folder, random.Random(seed))
        expected, got = both("datashop", inputs)
        assert isinstance(expected[0], list) and len(expected[0]) >= 5, expected
        assert got == expected, seed


def test_errors_are_the_in_memory_grouping_errors(tmp_path, batch_rows):
    header = ",".join([*REQUIRED, *ATTRIBUTES]) + "\n"
    ok = "1,7,p1,1,1,,,,,\n2,8,p2,0,1,,,,,\n"
    cases = {
        "repeat.csv": ok + "3,8,p3,1,1,,,,,\n3,8,p3,0,2,,,,,\n",  # second learner: an order_id disagrees
        "attr.csv": ok + "4,9,p1,1,1,x,,,,\n",
        "response.csv": ok + "4,9,p1,2,1,,,,,\n",
        "long.csv": ok + f"4,{LONG},p1,1,1,,,,,\n5,{LONG[:-1]}M,p1,1,1,,,,,\n",  # distinct, no collision
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(header + text)
        expected, got = both("assistments-raw", tmp_path / name)
        assert got == expected, name
        assert (expected[0] is DatasetFormatError) == (name != "long.csv"), (name, expected)
    assert both("assistments-raw", tmp_path / "repeat.csv")[1][1].endswith(
        "order_id 3 repeats with a different problem or response than " + f"{tmp_path / 'repeat.csv'}:4")
    ds = "\t".join(DS_HEADER) + "\n"
    good = "1\ts1\tP\tR\t\t2006-10-26 09:51:00.0\t1\t0\t0\t1\tA\n"
    for name, text in {"time.txt": good + "2\ts2\tP\tR\t\t2006-13-26 09:51:00.0\t1\t0\t0\t1\tA\n",
                       "none.txt": good + "2\ts2\tP\tR\t\t\t1\t0\t0\t1\tA\n",
                       "cut.txt": good + "2\ts2\tP\tR\t\t2006-10-26 09:5"}.items():
        (tmp_path / name).write_text(ds + text)
        expected, got = both("datashop", tmp_path / name)
        assert got == expected, name
        assert (expected[0] is DatasetFormatError) == (name != "cut.txt"), (name, expected)


def test_integers_beyond_64_bits_are_refused_with_their_location(tmp_path):
    """The one difference from the in-memory grouping: the sort keeps integers in int64 columns."""
    path = tmp_path / "big.csv"
    path.write_text(",".join(REQUIRED) + "\n1e19,7,p1,1,1\n")
    with pytest.raises(DatasetFormatError, match=r"big.csv:2: order_id 10000000000000000000 is outside the 64-bit"):
        list(iter_events("assistments-raw", path))


def test_the_spill_folder_is_removed_when_the_records_are_consumed_or_abandoned(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    inputs = assistments_files(tmp_path, random.Random(1))
    assert len(list(iter_events("assistments-raw", inputs))) > 0
    records = iter_events("assistments-raw", inputs)
    next(records)
    assert [p.name.startswith("ktstream-convert-") for p in (tmp_path / "tmp").iterdir()] == [True]
    records.close()
    assert not list((tmp_path / "tmp").iterdir())
