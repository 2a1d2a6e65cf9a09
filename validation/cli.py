"""headflow: learning dynamics of attention heads (arXiv 2603.03993) and attention-normalization
bounds on GPT-2 (arXiv 2508.17821).

Each command lives in its own module of `validation.commands` exposing `register(subparsers)`;
the module adds its parser and sets `func` (a callable taking the parsed arguments and returning
a JSON-able summary dict or `None`). Errors derived from [`dynamics.HeadflowError`][] become one
line on stderr and exit status 2, with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence

import jax

from dynamics import HeadflowError, Interrupted, clear_stop, request_stop

from ._json import dumps
from ._rundir import discard_active

# Modules that register commands, in `--help` order.
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


CONFIG_DOCS = ("configuration keys: every key of [model], [prior], [training], [ode], [sim] and "
               "[output], with its default, is listed in the README (section Configuration); "
               "the model behind them: docs/model.md")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _parse_optional(self, arg_string):
        # "-50,100" is a (bad) value of a list option, not an unknown option
        if re.fullmatch(r"-[0-9.][0-9.,eE+-]*", arg_string):
            return None
        return super()._parse_optional(arg_string)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headflow", description="Learning dynamics of attention heads in the "
                     "single-location model (arXiv 2603.03993): order-parameter ODEs against "
                     "online SGD; and attention-normalization bounds checked on GPT-2 (arXiv "
                     "2508.17821). Every command takes --help; configuration keys are "
                     "documented in the README.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    for name, p in sub.choices.items():
        example = getattr(importlib.import_module(f"validation.commands.{name}"), "EXAMPLE",
                          None) if name != "gpt2" else None
        if example is not None and p.epilog is None:
            p.epilog = f"{CONFIG_DOCS}. Example: {example}"
    return parser


def emit_json(summary: dict) -> None:
    """Print `summary` as one JSON object on the last line of stdout."""
    print(dumps(summary), flush=True)


class _Signals:
    """SIGINT and SIGTERM ask the running computation to stop at its next check
    ([`dynamics.request_stop`][]); it then unwinds, removing its partial output. A second
    signal exits at once (after removing the run folders in progress)."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum, frame):
        del frame
        if self.received is not None:
            discard_active()
            print("headflow: interrupted", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.received = signum
        request_stop()

    @property
    def exit_code(self) -> int:
        return 128 + (self.received or signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0, 2 for a bad input or a failed run, 130 or
    143 after SIGINT or SIGTERM)."""
    # headflow's theory and overlaps run in float64; the library never switches it on itself
    jax.config.update("jax_enable_x64", True)
    parser = build_parser()
    args = parser.parse_args(argv)
    clear_stop()
    with _Signals() as signals:
        try:
            summary = args.func(args)
        except Interrupted:
            print("headflow: interrupted", file=sys.stderr, flush=True)
            return signals.exit_code
        except KeyboardInterrupt:
            print("headflow: interrupted", file=sys.stderr, flush=True)
            return 130
        except HeadflowError as err:
            msg = str(err).strip().replace("\n", " ")
            print(f"headflow: error: {msg}", file=sys.stderr)
            return 2
        finally:
            clear_stop()
    if summary is not None and getattr(args, "json", False):
        emit_json(summary)
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ._entry import entry

    entry()
