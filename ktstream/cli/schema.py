"""`ktstream schema`: print the JSON Schemas of the wire messages."""

from ktstream.schema import json_schemas_text


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schemas of events, predictions and dead letters")
    p.set_defaults(func=lambda args: print(json_schemas_text()))
