"""`ktstream schema`: print the JSON Schemas of the wire messages."""


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schemas of events, predictions and dead letters")
    p.set_defaults(func=run)


def run(args) -> int:
    from ktstream.schema import json_schemas_text

    print(json_schemas_text())
    return 0
