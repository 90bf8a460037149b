"""`ktstream` command line: one module per command in ktstream.cli, each with a `register(subparsers)`.

A command's module is named after it (``check-leakage``: ktstream/cli/check_leakage.py). Only the module
of the command given is imported, so ``ktstream serve`` loads the serving process's code and nothing of
the trainer, the leakage gate or the reports; ``ktstream --help`` lists `ktstream.cli.COMMANDS` and
imports no command at all.

Errors: a wrong invocation (unknown command or option, a bad value, a name that names nothing) is one
line ``ktstream: error: ...`` and exit status 2; an expected failure (`ktstream.exceptions.KTStreamError`,
a missing or unreadable file) one line and exit status 1; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys

from ktstream.cli import COMMANDS
from ktstream.exceptions import KTStreamError


class UsageError(KTStreamError):
    """A command line that names something that does not exist or combines options wrongly (exit 2)."""


def suggest(value: str, known) -> str:
    """`` (did you mean 'x'?)`` for a close match of ``value`` among ``known``, else ``""``.

    >>> suggest("dtk", ["dkt", "sakt"]), suggest("zzz", ["dkt"])
    (" (did you mean 'dkt'?)", '')
    """
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, value: str, known, hint: str = "") -> UsageError:
    """The error for a name that names nothing: the closest known name, or the list of them."""
    known = sorted(map(str, known))
    close = suggest(value, known)
    some = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
    listed = close or f"; known: {some}"
    return UsageError(f"unknown {kind} {value!r}{listed}{hint}")


class HelpFormatter(argparse.HelpFormatter):
    """Shows every option's default (unless it is None or False), with or without a help text."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("%(default)" not in text and "(default" not in text and action.option_strings and default is not None
                and default is not False and default is not argparse.SUPPRESS and not isinstance(default, list)):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (raised as `UsageError`, so ``main`` decides how to show them),
    close-match suggestions for a mistyped choice, and defaults in every help text."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("description"):
            kwargs["description"] = kwargs["description"].replace("``", "`")  # docstrings' reST quoting
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, unknown("choice", value, action.choices).args[0].replace(
                "unknown choice", "invalid choice"))


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ktstream")
    except PackageNotFoundError:
        return "unknown (not installed)"


def command_modules() -> list[str]:
    """Names of the modules in ktstream.cli that define a command."""
    return sorted(name.replace("-", "_") for name in COMMANDS)


def requested(argv: list[str]) -> str | None:
    """The module of the command ``argv`` names (its first argument that is not an option), if there is one.

    >>> requested(["-v", "check-leakage", "--help"]), requested(["--help"]), requested(["nonsense"])
    ('check_leakage', None, None)
    """
    first = next((a for a in argv if not a.startswith("-")), None)
    return first.replace("-", "_") if first in COMMANDS else None


def build_parser(only: str | None = None, lazy: bool = False) -> argparse.ArgumentParser:
    """The parser with every command, or with only the command whose module is ``only``; ``lazy``: every
    command as a stub that only lists it (``ktstream --help``, an unknown command: no module imported)."""
    parser = Parser(prog="ktstream", description="Streaming knowledge tracing: serve, train, evaluate, check and "
                                                 "explain models. `ktstream COMMAND --help` describes a command.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("--version", action="version", version=f"ktstream {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if lazy:
        for name, text in COMMANDS.items():
            sub.add_parser(name, help=text, add_help=False)
        return parser
    for name in [only] if only is not None else command_modules():
        importlib.import_module(f"ktstream.cli.{name}").register(sub)
    return parser


def one_line(exc: BaseException) -> str:
    """An error as one line: a pydantic validation error (a settings file's) as ``key: problem; ...``."""
    cause = exc.__cause__
    text = str(exc)
    errors = getattr(cause, "errors", None)
    if callable(errors) and type(cause).__name__ == "ValidationError" and str(cause) in text:
        where = text.split(str(cause))[0].rstrip(": ")
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg'][0].lower()}{e['msg'][1:]}"
                             f"{_key_hint(cause.title, e) if e['type'] == 'extra_forbidden' else ''}"
                             for e in cause.errors())
        text = f"{where}: {problems}"
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    return " ".join(text.split())


#: modules whose pydantic settings classes a settings file is read into
SETTINGS_MODULES = ("ktstream.config", "ktstream.finetune.settings", "connectors.archive")


def _key_hint(title: str, error: dict) -> str:
    """`` (did you mean 'x'?)`` for a misspelt settings key, from the fields of the class it was read into."""
    try:
        cls = next(c for m in SETTINGS_MODULES if (c := getattr(importlib.import_module(m), title, None)) is not None)
        for key in error["loc"][:-1]:
            cls = cls.model_fields[key].annotation
        return suggest(str(error["loc"][-1]), cls.model_fields)
    except Exception:  # noqa: BLE001 - a hint is optional; never fail while reporting an error
        return ""


def main(argv: list[str] | None = None) -> int:
    """Run one command; the exit status (0 done, 1 failed, 2 wrong invocation)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        only = requested(argv)
        args = build_parser(only, lazy=only is None).parse_args(argv)
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return int(args.func(args) or 0)
    except (KTStreamError, OSError) as exc:
        if debug:
            raise
        print(f"ktstream: error: {one_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        if debug:
            raise
        print("ktstream: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # python -m ktstream.cli.main: the module's own classes, not __main__'s copies
    from ktstream.cli.main import main as _main

    sys.exit(_main())
