"""`ktstream convert`: turn a public KT data set into the canonical event log and print what happened.

``ktstream convert events LOG.jsonl -o LOG.parquet`` rewrites a canonical log (each record validated) in the
other form, streaming: a large JSON-lines log becomes the Parquet log the columnar readers take.

The converters live in ``connectors.datasets`` (ktstream itself reads only the
canonical log); this command is the thin shell around them. The printed
statistics (rows in, interactions out, rows merged, learners, ...) are the
figures to quote with any result computed on the output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ktstream.cli.main import UsageError
from ktstream.cli.options import FORMATS, check_memory_limit

OUTPUT_SUFFIXES = (".jsonl", ".parquet")


def register(sub) -> None:
    p = sub.add_parser(
        "convert", help="convert a public KT data set to the canonical event log (JSONL or Parquet)",
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="formats: " + ", ".join(sorted(FORMATS))
               + ". Options apply only to the formats named in their help; giving one to another format is an error.")
    p.add_argument("format", choices=sorted(FORMATS), metavar="FORMAT", help="source format")
    p.add_argument("inputs", nargs="+", type=Path, metavar="INPUT",
                   help="source file(s) (ednet-kt1: also folders; events: .jsonl or .parquet logs)")
    p.add_argument("-o", "--out", required=True, type=Path, metavar="FILE", help="output path, .jsonl or .parquet")
    p.add_argument("--keep-repeated-rows", action="store_true", default=None,
                   help="akt, assistments-raw: keep multi-skill repeat rows as separate interactions "
                        "(only to reproduce published numbers)")
    p.add_argument("--concepts", metavar="MAP|auto|none",
                   help="dkvmn: question -> concept map file (default auto: the data set's own map, else identity)")
    p.add_argument("--info", metavar="FILE|auto|none",
                   help="dkt-synthetic: info file with each exercise's concept (default auto)")
    p.add_argument("--questions", metavar="FILE|auto|none",
                   help="ednet-kt1: EdNet questions.csv (default auto: found beside the inputs)")
    p.add_argument("--kc-column", metavar="NAME", help="datashop: KC model column (default KC(Default))")
    p.add_argument("--memory-limit", metavar="SIZE", help="assistments-raw, datashop: memory for sorting the rows "
                   "by learner (DuckDB, spilling to a temporary folder past it), e.g. 512MB (default 1GB)")
    p.add_argument("--validate", action="store_true", help="check every record against the event schema")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out.suffix not in OUTPUT_SUFFIXES:
        raise UsageError(f"-o/--out must end in {' or '.join(OUTPUT_SUFFIXES)}: {args.out}")
    for path in args.inputs:
        if not path.exists():
            raise FileNotFoundError(f"input not found: {path}")
        if path.is_dir() and args.format != "ednet-kt1":
            from connectors.datasets.splits import stream_inputs

            try:
                files = " ".join(str(f) for f in stream_inputs(path, args.format)[:3])
            except (OSError, ValueError):
                files = f"{path}/FILE.csv"
            raise UsageError(f"{path} is a folder; {args.format} reads files: name them (e.g. {files}); only ednet-kt1 "
                             f"reads a folder")
    check_memory_limit(args.memory_limit)
    from connectors.datasets import convert
    from connectors.datasets.exceptions import DatasetFormatError
    options = {}
    for name in ("keep_repeated_rows", "concepts", "info", "questions", "kc_column", "memory_limit"):
        value = getattr(args, name)
        if value is not None:
            options[name] = None if value == "none" else value
    try:
        stats = convert(args.format, args.inputs, args.out, validate=args.validate, **options)
    except ValueError as exc:  # an option the format does not take, a value it cannot use
        if isinstance(exc, DatasetFormatError):
            raise
        raise DatasetFormatError(str(exc)) from exc
    print(json.dumps(stats.as_dict(), indent=2))
    return 0
