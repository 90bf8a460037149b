"""`ktstream state inspect|export|import`: look into and move a partition's local state store.

- ``inspect LEARNER --state-dir DIR``: the learner's stored bookkeeping and tensor shapes, as JSON
  (searches every partition database under DIR; safe while the engine runs: WAL readers never block);
- ``export --state-dir DIR --topic T --partition P -o FILE``: one partition as JSON lines
  (learner rows, tensors as safetensors bytes in base64, and the input offset the store reflects);
- ``import --state-dir DIR FILE``: the reverse, in one transaction (stop the engine first).
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
    e.add_argument("-o", "--output", default="-")
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
        print(f"learner {args.learner!r} is in no partition store under {args.state_dir}", file=sys.stderr)
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
    out = sys.stdout if args.output == "-" else open(args.output, "w")
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
    from ktstream.state import codec
    from ktstream.state.sqlite import SqliteStore

    with open(args.input) as f:
        head = json.loads(f.readline())
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        row["blob"] = base64.b64decode(row["blob"])
    tp = (head["topic"], int(head["partition"]))
    store = SqliteStore(args.state_dir)
    store.open(tp)
    store.write([codec.decode(r) for r in rows], {tp: int(head["offset"])})
    print(f"imported {len(rows)} learners into {tp} at offset {head['offset']}", file=sys.stderr)
    store.close()
    return 0
