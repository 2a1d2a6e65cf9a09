"""Cooperative cancellation: a stop request that long computations honour between chunks.

A host program (the `headflow` command line installs it for SIGINT and SIGTERM) calls
[`request_stop`][]; every long loop of headflow calls [`check_stop`][] between its chunks (SGD
segments, ODE solves, fixed-point chunks, sweep batches, GPT-2 layers and lengths). The
computation then raises [`Interrupted`][], so the caller can clean up: nothing is interrupted in
the middle of a compiled computation, and no result is reported as if it were complete. (A
check inside compiled code would need a host callback, which would keep the compiled programs
out of JAX's persistent cache.)
"""

from __future__ import annotations

import threading

_REQUESTED = threading.Event()


class Interrupted(Exception):
    """A computation stopped because a stop was requested ([`request_stop`][])."""


def request_stop() -> None:
    """Ask every running headflow computation to stop at its next check."""
    _REQUESTED.set()


def clear_stop() -> None:
    """Withdraw a stop request (before starting new work)."""
    _REQUESTED.clear()


def stop_requested() -> bool:
    return _REQUESTED.is_set()


def check_stop() -> None:
    """Raise [`Interrupted`][] if a stop was requested."""
    if _REQUESTED.is_set():
        raise Interrupted("stopped on request")

