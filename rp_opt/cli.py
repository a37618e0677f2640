"""The ``rp-opt`` command.

Each subcommand lives in its own module of :mod:`rp_opt.commands` and defines
``register(subparsers)``, which adds its parser and sets ``run`` (a function ``args ->
exit code``). Modules are discovered, so adding a command edits no other file.

Exit codes: 0 success, 1 the answer is negative (an invalid plan, an infeasible window),
2 bad input (one line on stderr naming the field and value).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from . import commands
from .errors import InputError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rp-opt", description="Expert placement and sample packing for MoE RL steps.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


class _ArgumentParserExit(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    logging.getLogger("rp_opt").setLevel(level)
    if getattr(args, "json", False):
        # JSON on stdout stays clean: solver banners go to stderr, progress only when asked for
        from ._highs import silence_banner

        silence_banner()
        logging.getLogger("rp_opt").setLevel(max(level, logging.WARNING) if not args.verbose else level)
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
