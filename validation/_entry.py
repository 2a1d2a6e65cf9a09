"""The `headflow` console script. Only the standard library is imported here, so that an
interrupt during the (slow) start-up ends the process quietly; `headflow.validation.cli` is imported
once the early handlers are in place."""

from __future__ import annotations

import gc
import os
import signal
import sys


GC_THRESHOLDS = (100_000, 50, 50)
"""The garbage collector's thresholds for a process that traces and compiles JAX programs:
tracing allocates millions of short-lived objects, and at Python's defaults (700, 10, 10) the
collector runs after every 700 of them, its full collections walking every live object
(imported modules, cached programs). Raised, it runs a few times a command; memory is still
freed by reference counting, and cyclic garbage waits somewhat longer
(`benchmarks/RESULTS.md`, "The test suite")."""


def relax_gc() -> None:
    """Set [`GC_THRESHOLDS`][]; the command line does it first thing, the test session too."""
    gc.set_threshold(*GC_THRESHOLDS)


def _early(signum, frame) -> None:
    del frame
    sys.stderr.write("headflow: interrupted\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def entry() -> None:
    """Run `headflow` and exit with its status. After an interrupt the process ends without the
    interpreter's teardown: JAX's runtime threads may still be winding down, and tearing them
    down from a signal-interrupted state is what crashes."""
    relax_gc()
    from . import _phases

    _phases.started()
    previous = {s: signal.signal(s, _early) for s in (signal.SIGINT, signal.SIGTERM)}
    # equinox's run-time checks become NaN (which headflow reports) instead of host callbacks,
    # which would keep every compiled program out of JAX's persistent cache
    os.environ.setdefault("EQX_ON_ERROR", "nan")
    from .cli import main

    code = main()
    for s in previous:
        signal.signal(s, _early)
    sys.stdout.flush()
    sys.stderr.flush()
    if code in (130, 143):
        os._exit(code)
    # the interpreter's teardown ends with garbage collections over every live object (JAX's,
    # the traced programs'): frozen, they are skipped, and the memory goes back with the process
    gc.freeze()
    sys.exit(code)
