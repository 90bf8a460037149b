"""`ktstream` command line: every module in ktstream.cli with a `register(subparsers)`
function adds its own subcommand, so commands live beside the code they drive."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import ktstream.cli as cli_pkg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ktstream", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cli_pkg.__path__), key=lambda m: m.name):
        if info.name == "main":
            continue
        module = importlib.import_module(f"ktstream.cli.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
