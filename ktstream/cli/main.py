"""`ktstream` command line: every module in ktstream.cli with a `register(subparsers)`
function adds its own subcommand, so commands live beside the code they drive.

A command's module is named after it (``check-leakage``: ktstream/cli/check_leakage.py). Only the module
of the command given is imported, so ``ktstream serve`` loads the serving process's code and nothing of
the trainer, the leakage gate or the reports; ``ktstream --help`` (or an unknown command) imports them all.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import ktstream.cli as cli_pkg


def command_modules() -> list[str]:
    """Names of the modules in ktstream.cli that may define a command."""
    return sorted(m.name for m in pkgutil.iter_modules(cli_pkg.__path__) if m.name != "main")


def requested(argv: list[str]) -> str | None:
    """The module of the command ``argv`` names (its first argument that is not an option), if there is one.

    >>> requested(["-v", "check-leakage", "--help"]), requested(["--help"]), requested(["nonsense"])
    ('check_leakage', None, None)
    """
    first = next((a for a in argv if not a.startswith("-")), None)
    name = first.replace("-", "_") if first is not None else None
    return name if name in command_modules() else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only the command whose module is ``only``."""
    parser = argparse.ArgumentParser(prog="ktstream", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only is not None else command_modules():
        module = importlib.import_module(f"ktstream.cli.{name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(requested(argv)).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
