"""headflow: learning dynamics of attention heads (arXiv 2603.03993) and attention-normalization
bounds on GPT-2 (arXiv 2508.17821).

Each command lives in its own module of `headflow.validation.commands` exposing
`register(subparsers)`; the module adds its parser and sets `func` (a callable taking the parsed
arguments and returning a JSON-able summary dict or `None`). Errors derived from
[`headflow.dynamics.HeadflowError`][] become one line on stderr and exit status 2, with no
traceback.

Building the parser imports only the standard library and light modules of ours, so that
`headflow --help`, `headflow COMMAND --help` and an argument that argparse rejects answer at
once; JAX, `dynamics` and the experiments are imported once a command runs (by [`main`][] after
parsing, and by each command's `func`). tests/test_startup.py keeps it so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence

# Modules that register commands, in `--help` order.
_COMMAND_MODULES = (
    "headflow.validation.commands.demo",
    "headflow.validation.commands.sgd",
    "headflow.validation.commands.ode",
    "headflow.validation.commands.sde",
    "headflow.validation.commands.compare",
    "headflow.validation.commands.bayes",
    "headflow.validation.commands.phases",
    "headflow.validation.commands.escape",
    "headflow.validation.commands.scaling",
    "headflow.validation.commands.activations",
    "headflow.validation.commands.prune",
    "headflow.validation.commands.sweep",
    "headflow.validation.commands.schedule",
    "headflow.validation.commands.fit",
    "headflow.validation.commands.models",
    "headflow.validation.commands.notebooks",
    "headflow.validation.commands.gpt2",   # not validation.gpt2.cli: importing it imports
                                           # validation.gpt2
)


CONFIG_DOCS = ("configuration keys: every key of [model], [prior], [training], [ode], [sim], "
               "[output] and [sde], with its default, is listed in the README (section "
               "Configuration); the model behind them: docs/model.md")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _parse_optional(self, arg_string):
        # "-50,100" is a (bad) value of a list option, not an unknown option
        if re.fullmatch(r"-[0-9.][0-9.,eE+-]*", arg_string):
            return None
        return super()._parse_optional(arg_string)

    def _get_values(self, action, arg_strings):
        # argparse drops a "--" given as an option's value (`--threshold=--`), keeping the
        # default without a word; it is a bad value like any other
        if action.option_strings and "--" in arg_strings:
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, got "
                       "'--'")
        return super()._get_values(action, arg_strings)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headflow", description="Order-parameter theory of online SGD (ODE, "
                     "SDE, exact overlap-space SGD) against finite-D SGD, for the attention "
                     "model of arXiv 2603.03993, the committee machine and models of your own "
                     "(headflow models); and attention-normalization bounds checked on GPT-2 "
                     "(arXiv 2508.17821). Every command takes --help; configuration keys are "
                     "documented in the README.")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not use the cache of compiled programs and generated code "
                        "(~/.cache/headflow, or $HEADFLOW_CACHE_DIR)")
    dist = parser.add_argument_group(
        "across processes and hosts", "run under jax.distributed: the batched work (sweep "
        "points, SGD seeds) is sharded over the devices of every process, and process 0 writes "
        "the results. Unset values come from $HEADFLOW_COORDINATOR, $HEADFLOW_NUM_PROCESSES, "
        "$HEADFLOW_PROCESS_ID, then from JAX's cluster detection (SLURM, Open MPI); "
        "HEADFLOW_DISTRIBUTED=1 is the same as --distributed")
    dist.add_argument("--distributed", action="store_true",
                      help="start jax.distributed (implied by any of the options below)")
    dist.add_argument("--coordinator", metavar="HOST:PORT", default=None,
                      help="address of process 0's coordinator service")
    dist.add_argument("--num-processes", metavar="N", dest="num_processes", default=None,
                      help="number of processes")
    dist.add_argument("--process-id", metavar="I", dest="process_id", default=None,
                      help="this process's id, 0 ... N-1")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    for name, p in sub.choices.items():
        module = importlib.import_module(f"headflow.validation.commands.{name}")
        example = getattr(module, "EXAMPLE",
                          None) if name != "gpt2" else None
        if example is not None and p.epilog is None:
            p.epilog = f"{CONFIG_DOCS}. Example: {example}"
    return parser


def emit_json(summary: dict) -> None:
    """Print `summary` as one JSON object on the last line of stdout."""
    from ._json import dumps

    print(dumps(summary), flush=True)


GRACE_S = 3.0
"""After SIGINT/SIGTERM, how long the run gets to stop at its next check and clean up before
the process exits anyway (a single compiled computation cannot be interrupted)."""


class _Stopped(Exception):
    pass


def _run_in_worker(func, args, grace: float):
    """Run `func(args)` on a worker thread while the main thread waits for signals.

    SIGINT and SIGTERM (delivered to the main thread) ask the computation to stop at its next
    check ([`headflow.dynamics.request_stop`][]); it unwinds (removing its partial output) and
    raises [`headflow.dynamics.Interrupted`][]. If it is still inside one long compiled computation
    after `grace` seconds, or at a second signal, the run folders in progress are removed and the
    process exits at once (`os._exit`, see `headflow.validation._entry`).
    """
    from headflow.dynamics import Interrupted, request_stop

    from ._rundir import discard_active

    box: dict = {}

    def work():
        try:
            box["value"] = func(args)
        except BaseException as err:  # noqa: BLE001 - re-raised on the main thread
            box["error"] = err

    received: list[int] = []

    def handle(signum, frame):
        del frame
        received.append(signum)
        request_stop()

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
    worker = threading.Thread(target=work, name="headflow-run", daemon=True)
    worker.start()
    try:
        deadline: float | None = None
        while worker.is_alive():
            worker.join(0.05)
            if received and deadline is None:
                deadline = time.monotonic() + grace
            if received and (len(received) > 1 or time.monotonic() > (deadline or 0.0)):
                discard_active()
                print("headflow: interrupted", file=sys.stderr, flush=True)
                sys.stdout.flush()
                os._exit(128 + received[0])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
    if "error" in box:
        if received and isinstance(box["error"], (Interrupted, KeyboardInterrupt)):
            raise _Stopped(128 + received[0])
        raise box["error"]
    if received:                      # finished after the signal: not reported as a success
        raise _Stopped(128 + received[0])
    return box.get("value")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0, 2 for a bad input or a failed run, 130 or
    143 after SIGINT or SIGTERM)."""
    parser = build_parser()
    args = parser.parse_args(argv)   # --help and bad arguments end here, before JAX is imported
    if getattr(args, "replay", False):    # a repeated run: its earlier result, without JAX
        from ._results import replay

        replayed = replay(args)
        if replayed is not None:
            if getattr(args, "json", False):
                import json

                print(json.dumps(replayed), flush=True)
            return 0
    import jax

    from headflow.dynamics import HeadflowError, Interrupted, clear_stop
    from headflow.dynamics.distributed import DistributedSettings, initialize, is_main_process

    from . import _phases
    from ._cache import configure as configure_cache

    # headflow's theory and overlaps run in float64; the library never switches it on itself
    jax.config.update("jax_enable_x64", True)
    try:
        # before any JAX computation; every process then runs the same command
        settings = DistributedSettings.resolve(
            enabled=args.distributed, coordinator=args.coordinator,
            num_processes=args.num_processes, process_id=args.process_id)
        if settings is not None:
            initialize(settings)
    except HeadflowError as err:
        print(f"headflow: error: {err}", file=sys.stderr)
        return 2
    main_process = is_main_process()
    configure_cache(enabled=not args.no_cache)
    clear_stop()
    _phases.listen()
    _phases.lap("imports")
    try:
        with contextlib.ExitStack() as stack:
            if not main_process:          # process 0 reports; the others only compute
                stack.enter_context(contextlib.redirect_stdout(
                    stack.enter_context(open(os.devnull, "w"))))
            summary = _run_in_worker(args.func, args, GRACE_S)
    except _Stopped as stop:
        print("headflow: interrupted", file=sys.stderr, flush=True)
        return int(stop.args[0])
    except (Interrupted, KeyboardInterrupt):
        print("headflow: interrupted", file=sys.stderr, flush=True)
        return 130
    except HeadflowError as err:
        msg = str(err).strip().replace("\n", " ")
        print(f"headflow: error: {msg}", file=sys.stderr)
        return 2
    finally:
        clear_stop()
    if summary is not None and getattr(args, "json", False) and main_process:
        emit_json(summary)
    return 0

