"""`python -m ktstream.state.serve --config FILE --state-dir DIR`: kept as a thin alias.

Durable state is part of ``ktstream serve`` now (``state.dir`` in the settings,
``KTSTREAM_STATE__DIR`` or ``--state-dir``); this runs exactly that.
"""

from __future__ import annotations

import argparse
import logging


def main(argv: list[str] | None = None) -> int:
    from ktstream.cli.serve import run

    p = argparse.ArgumentParser(prog="python -m ktstream.state.serve", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run(argparse.Namespace(config=args.config, state_dir=args.state_dir, create_topics=False, verbose=False))


if __name__ == "__main__":
    raise SystemExit(main())
