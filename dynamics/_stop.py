"""Cooperative cancellation: a stop request that long computations honour between chunks.

A host program (the `headflow` command line installs it for SIGINT and SIGTERM) calls
[`request_stop`][]; every long loop of headflow calls [`check_stop`][] between its chunks (SGD
segments, fixed-point chunks, sweep groups, GPT-2 layers), and every ODE solve ends at its next
step (the stop is one of the solve's events, see `dynamics.ode.solve`). The computation then
raises [`Interrupted`][], so the caller can clean up: nothing is interrupted in the middle of a
compiled computation, and no result is reported as if it were complete.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

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


def _host_flag() -> np.bool_:
    return np.bool_(_REQUESTED.is_set())


def stop_flag() -> jax.Array:
    """The stop request read from inside compiled code (a host callback; a boolean scalar)."""
    return io_callback(_host_flag, jax.ShapeDtypeStruct((), jnp.bool_), ordered=False)
