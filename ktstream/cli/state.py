"""`ktstream state inspect|export|import`: look into and move a partition's local state store.

- ``inspect LEARNER --state-dir DIR``: the learner's stored bookkeeping and tensor shapes, as JSON
  (searches every partition database under DIR; safe while the engine runs: WAL readers never block);
- ``export --state-dir DIR --topic T --partition P -o FILE``: one partition as JSON lines
  (learner rows, tensors as safetensors bytes in base64, and the input offset the store reflects);
- ``import --state-dir DIR FILE``: the reverse, in one transaction (stop the engine first). The file's
  header must name a Kafka topic and partition (never a path: nothing is written outside DIR) and every
  row must belong to that partition; otherwise nothing is written and the command exits with 2.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("state", help="inspect, export or import the engine's local learner-state store")
    verbs = p.add_subparsers(dest="verb", required=True)
    i = verbs.add_parser("inspect", help="print one learner's stored state (JSON)")
    i.add_argument("learner")
    i.add_argument("--state-dir", required=True)
    i.set_defaults(func=inspect)
    e = verbs.add_parser("export", help="write one partition's store as JSON lines")
    e.add_argument("--state-dir", required=True)
    e.add_argument("--topic", required=True)
    e.add_argument("--partition", type=int, required=True)
    e.add_argument("-o", "--out", default="-", metavar="FILE", help="where to write (-: standard output)")
    e.set_defaults(func=export)
    m = verbs.add_parser("import", help="load a partition exported by `ktstream state export`")
    m.add_argument("--state-dir", required=True)
    m.add_argument("input")
    m.set_defaults(func=import_)


def _partitions(state_dir: str) -> list[tuple[str, int]]:
    out = []
    for f in sorted(Path(state_dir).glob("*.sqlite")):
        topic, _, part = f.stem.rpartition("-")
        out.append((topic, int(part)))
    return out


def inspect(args) -> int:
    from ktstream.state.sqlite import SqliteStore

    store = SqliteStore(args.state_dir)
    for tp in _partitions(args.state_dir):
        store.open(tp)
    st = store.load(args.learner)
    if st is None:
        print(f"ktstream: error: learner {args.learner!r} is in no partition store under {args.state_dir}",
              file=sys.stderr)
        return 1
    shapes = {k: [list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in st.state.items()}
    print(json.dumps({"learner_id": st.learner_id, "partition": st.partition, "model_version": st.model_version,
                      "last_offset": st.last_offset, "last_event_id": st.last_event_id,
                      "last_event_time_ms": st.last_event_time_ms, "events": st.events,
                      "responses": st.responses, "late": st.late, "open_step": st.step_key,
                      "store_offset": store.offset(st.partition), "tensors": shapes}, indent=2))
    store.close()
    return 0


def export(args) -> int:
    from ktstream.state import codec
    from ktstream.state.sqlite import SqliteStore

    store, tp = SqliteStore(args.state_dir), (args.topic, args.partition)
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    out.write(json.dumps({"topic": tp[0], "partition": tp[1], "offset": store.open(tp)}) + "\n")
    n = 0
    for st in store.learners(tp):
        row = codec.encode(st)
        row["blob"] = base64.b64encode(row["blob"]).decode()
        out.write(json.dumps(row) + "\n")
        n += 1
    if out is not sys.stdout:
        out.close()
    print(f"exported {n} learners of {tp} at offset {store.offset(tp)}", file=sys.stderr)
    store.close()
    return 0


def import_(args) -> int:
    from safetensors import SafetensorError

    from ktstream.state.store import StoreError

    try:
        tp, states, offset = _read_export(args.input)
        _write_import(args.state_dir, tp, states, offset)
    except (OSError, ValueError, KeyError, TypeError, SafetensorError, StoreError) as exc:
        print(f"cannot import {args.input}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"imported {len(states)} learners into {tp} at offset {offset}", file=sys.stderr)
    return 0


def _read_export(path: str):
    """(partition, learner states, offset) of an export, checked: the header names a real topic and
    partition (``partition_path`` refuses anything else), and every row belongs to that partition."""
    from ktstream.state import codec
    from ktstream.state.sqlite import partition_path

    with open(path) as f:
        head = json.loads(f.readline())
        rows = [json.loads(line) for line in f if line.strip()]
    tp = (head["topic"], head["partition"])
    partition_path(".", tp)
    offset = head["offset"]
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"the header's offset {offset!r} is not an integer")
    states = []
    for n, row in enumerate(rows, start=2):
        row["blob"] = base64.b64decode(row["blob"], validate=True)
        st = codec.decode(row)
        if st.partition != tp:
            raise ValueError(f"line {n}: learner {st.learner_id!r} belongs to {st.partition}, not {tp}")
        states.append(st)
    return tp, states, offset


def _write_import(state_dir: str, tp, states, offset: int) -> None:
    from ktstream.state.sqlite import SqliteStore

    store = SqliteStore(state_dir)
    try:
        store.open(tp)
        store.write(states, {tp: offset})
    finally:
        store.close()
