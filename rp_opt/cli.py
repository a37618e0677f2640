"""The ``rp-opt`` command.

Each subcommand lives in its own module of :mod:`rp_opt.commands` and defines
``register(subparsers)``, which adds its parser and sets ``run`` (a function ``args ->
exit code``). Modules are discovered, so adding a command edits no other file.

Exit codes: 0 success, 1 the answer is negative (an invalid plan, an infeasible window),
2 bad input (one line on stderr naming the field and value; with ``--json`` also
``{"error": {"field": ..., "message": ...}}`` on stdout). Argument errors of argparse are
bad input too and take the same one line. 130: interrupted (Ctrl-C); 141: stdout was
closed by its reader (``rp-opt show | head``), without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import pkgutil
import re
import sys

from . import commands
from .errors import InputError


class _ArgumentParserExit(Exception):
    """An argparse error, raised instead of argparse's usage text and exit."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog, self.message = prog, message


class _Parser(argparse.ArgumentParser):
    """argparse with errors raised (:func:`main` prints them as one line); subparsers
    inherit the class."""

    def error(self, message):
        raise _ArgumentParserExit(self.prog, message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rp-opt", description="Expert placement and sample packing for MoE RL steps.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    # -v also after the command (rp-opt plan w.npz -v), counted with any before it
    for command in sub.choices.values():
        if "-v" not in command._option_string_actions and "--verbose" not in command._option_string_actions:
            command.add_argument("-v", "--verbose", action="count", default=0, dest="verbose_after",
                                 help="more log output (-vv for debug); also accepted before the command")
    return parser


def _argument_error(exc: _ArgumentParserExit) -> InputError:
    """argparse's message as an :class:`InputError` naming the argument
    ("argument --seed: ..." -> field ``--seed``), with where to find the usage."""
    match = re.match(r"argument ([^:]+): (.*)$", exc.message, re.S)
    field, message = (match.group(1), match.group(2)) if match else ("arguments", exc.message)
    field = field.split("/")[-1]  # -o/--output -> --output
    return InputError(field, " ".join(message.split()) + f" (see {exc.prog} --help)")


def _report(exc: InputError, as_json: bool) -> int:
    """The one place bad input is reported: one line on stderr, the same as a JSON object
    on stdout with ``--json``; exit code 2."""
    print(f"error: {exc}", file=sys.stderr)
    if as_json:
        json.dump({"error": {"field": exc.field, "message": exc.message}}, sys.stdout)
        sys.stdout.write("\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    """The ``rp-opt`` command line; returns the exit code. A Ctrl-C anywhere, also while
    the parser is built or HiGHS is loaded, ends it with one line and code 130 (commands
    that keep their best result so far catch it themselves)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentParserExit as exc:
        if exc.prog == parser.prog and exc.message.startswith("unrecognized arguments"):
            # the top parser reports a command's unknown flag: point at the command's help
            try:
                exc = _ArgumentParserExit(f"{parser.prog} {parser.parse_known_args(argv)[0].command}", exc.message)
            except _ArgumentParserExit:
                pass
        # argparse takes any unambiguous prefix of --json (--js) as --json
        return _report(_argument_error(exc), any(len(a) >= 3 and "--json".startswith(a) for a in argv))
    args.verbose += getattr(args, "verbose_after", 0)
    level = logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO
    # other libraries' INFO (Pyomo relays HiGHS's whole MIP log there) only with -v
    logging.basicConfig(level=level if args.verbose else logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("rp_opt").setLevel(level)
    # stdout stays clean (JSON, tables): HiGHS's banner is dropped, only -v shows it
    from ._highs import silence_banner

    silence_banner(keep=bool(args.verbose))
    if getattr(args, "json", False):
        # progress only when asked for
        logging.getLogger("rp_opt").setLevel(max(level, logging.WARNING) if not args.verbose else level)
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        return _report(exc, bool(getattr(args, "json", False)))
    except BrokenPipeError:
        # the reader of stdout went away (rp-opt show | head): no traceback, and stdout
        # goes to /dev/null so that Python's final flush does not complain again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by the pipe


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
