"""`ktstream config-reference`: the configuration reference (every key, type, default, env var) from the code.

    ktstream config-reference -o docs/configuration.md --schemas docs/schemas

Without ``-o`` it prints the Markdown; ``--schemas DIR`` also writes the JSON
Schemas of the wire messages (ktstream.schema.json_schemas()), one file each.
``--yaml`` prints the shipped settings file instead (every key at its default,
commented), the starting point of your own:

    ktstream config-reference --yaml -o my.yaml
"""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("config-reference", help="generate docs/configuration.md (and docs/schemas/*.json)")
    p.add_argument("-o", "--out", type=Path, help="write the Markdown here instead of printing it")
    p.add_argument("--schemas", type=Path, metavar="DIR", help="also write one JSON Schema per wire message here")
    p.add_argument("--yaml", action="store_true",
                   help="print the shipped settings file (ktstream/configs/default.yaml) instead")
    p.set_defaults(func=run)


def _emit(text: str, out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    else:
        print(text, end="")


def run(args) -> int:
    if args.yaml:
        _emit((Path(__file__).resolve().parents[1] / "configs" / "default.yaml").read_text(encoding="utf-8"), args.out)
        return 0
    from ktstream.reports.config_reference import config_reference, write_schemas

    _emit(config_reference(), args.out)
    for path in write_schemas(args.schemas) if args.schemas else []:
        print(f"wrote {path}")
    return 0
