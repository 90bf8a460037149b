"""`ktstream state inspect / export / import` round trip on a SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from ktstream.core import LearnerState
from ktstream.state import SqliteStore


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ktstream.cli.main", "state", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_inspect_export_import(tmp_path):
    src, dst, tp = tmp_path / "a", tmp_path / "b", ("ev", 2)
    store = SqliteStore(src)
    store.open(tp)
    states = [LearnerState(f"u{i}", {"h": torch.randn(1, 6)}, "v3", tp, ("s", "x"), {"h": torch.zeros(1, 6)},
                           1000 + i, f"e{i}", i, i + 1, i, 0) for i in range(4)]
    store.write(states, {tp: 4})
    store.close()
    r = cli("inspect", "u2", "--state-dir", src)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert (shown["last_offset"], shown["events"], shown["store_offset"], shown["tensors"]["h"]) == \
           (2, 3, 4, [[1, 6], "float32"])
    assert cli("inspect", "nobody", "--state-dir", src).returncode == 1
    dump = tmp_path / "p2.jsonl"
    assert cli("export", "--state-dir", src, "--topic", "ev", "--partition", 2, "-o", dump).returncode == 0
    r = cli("import", "--state-dir", dst, dump)
    assert r.returncode == 0, r.stderr
    back = SqliteStore(dst)
    assert back.open(tp) == 4 and back.count(tp) == 4
    for st in states:
        got = back.load(st.learner_id)
        assert torch.equal(got.state["h"], st.state["h"]) and got.step_key == ("s", "x")
        assert torch.equal(got.step_state["h"], st.step_state["h"]) and got.last_event_id == st.last_event_id



def export_file(path, header, rows=()):
    path.write_text("\n".join(json.dumps(x) for x in [header, *rows]) + "\n")
    return path


def import_here(capsys, state_dir, dump):
    """``ktstream state import`` in this process (no interpreter start per call): (exit code, stderr)."""
    from ktstream.cli.main import main

    code = main(["state", "import", "--state-dir", str(state_dir), str(dump)])
    return code, capsys.readouterr().err


def test_import_refuses_a_header_naming_a_path_and_writes_nothing(tmp_path, capsys):
    dst = tmp_path / "state" / "inner"
    for topic in ("../x", "../../x", "/tmp/x", ".."):
        dump = export_file(tmp_path / "evil.jsonl", {"topic": topic, "partition": 0, "offset": 3})
        code, err = import_here(capsys, dst, dump)
        assert code == 2 and "is not a Kafka topic name" in err, (topic, err)
    dump = export_file(tmp_path / "neg.jsonl", {"topic": "ev", "partition": -1, "offset": 3})
    code, err = import_here(capsys, dst, dump)
    assert code == 2 and "partition number" in err
    assert not list(tmp_path.rglob("*.sqlite")), "nothing written anywhere"


def test_import_refuses_rows_of_another_partition(tmp_path, capsys):
    src, dst, tp = tmp_path / "a", tmp_path / "b", ("ev", 1)
    store = SqliteStore(src)
    store.open(tp)
    store.write([LearnerState("u1", {"h": torch.ones(1, 2)}, "v1", tp, last_offset=0, events=1)], {tp: 1})
    store.close()
    dump = tmp_path / "p1.jsonl"
    assert cli("export", "--state-dir", src, "--topic", "ev", "--partition", 1, "-o", dump).returncode == 0
    header, *rows = dump.read_text().splitlines()
    export_file(dump, {**json.loads(header), "partition": 2}, [json.loads(r) for r in rows])
    code, err = import_here(capsys, dst, dump)
    assert code == 2 and "belongs to ('ev', 1), not ('ev', 2)" in err, err
    assert not list(dst.glob("*.sqlite")), "nothing written"
