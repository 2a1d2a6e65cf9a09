"""The `headflow` command line.

Each command lives in its own module exposing `register(subparsers)`; the module adds its parser
and sets `func` (a callable taking the parsed arguments and returning a JSON-able summary dict or
`None`). Errors derived from [`dynamics.HeadflowError`][] become one line on stderr and exit
status 2, with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from dynamics import HeadflowError

from .commands._common import json_default

# Modules that register commands, in `--help` order. A module that is missing (a command still
# being built) is skipped, so the rest of the CLI keeps working.
_COMMAND_MODULES = (
    "validation.commands.demo",
    "validation.commands.sgd",
    "validation.commands.ode",
    "validation.commands.compare",
    "validation.commands.bayes",
    "validation.commands.phases",
    "validation.commands.escape",
    "validation.commands.activations",
    "validation.commands.prune",
    "validation.commands.sweep",
    "validation.gpt2.cli",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headflow", description=__doc__.splitlines()[0] + " "
                     "Learning dynamics of attention heads (arXiv 2603.03993) and attention "
                     "normalization bounds on GPT-2 (arXiv 2508.17821).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:
                continue
            raise
        module.register(sub)
    return parser


def emit_json(summary: dict) -> None:
    """Print `summary` as one JSON object on the last line of stdout."""
    print(json.dumps(summary, default=json_default), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = args.func(args)
    except HeadflowError as err:
        msg = str(err).strip().replace("\n", " ")
        print(f"headflow: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headflow: interrupted", file=sys.stderr)
        return 130
    if summary is not None and getattr(args, "json", False):
        emit_json(summary)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
