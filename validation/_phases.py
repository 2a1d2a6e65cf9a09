"""Where a command's seconds go: the phases recorded in `meta.json["wall_s"]`.

- `imports`: from the `headflow` entry point to the command's start: the command line's imports
  (JAX, the package) and the argument parsing;
- `setup`: from there to the start of the result folder: the config, its checks and the
  command's own imports (plots);
- `trace`, `lower`, `compile`: JAX turning Python into programs during the command (from Python:
  during the result folder), by JAX's own duration events: tracing to a jaxpr, lowering to
  StableHLO, and XLA's compilation, which includes reading a program back from the persistent
  compilation cache; `cache_load` is that reading, a part of `compile`. They overlap the
  command's blocks below, which contain them;
- the command's own blocks ([`headflow.validation._rundir.RunDir.timed`][]), for example `ode`
  (the whole ODE run, with its parts `ode.build`, `ode.compile`, `ode.integrate`, `ode.risk` and
  `ode.field_error`), `write` and `figure`;
- `total`: from the entry point (or the folder's start, from Python) to the folder being written.

Importing this module imports nothing beyond the standard library (the entry point imports it
before anything heavy); the JAX listeners are installed by [`listen`][] once JAX is imported.
"""

from __future__ import annotations

import time

_START: list[float] = []
"""`time.perf_counter()` at the entry point, when the command line was started by it, and at
the last lap."""

_LAPS: dict[str, float] = {}
"""Seconds of the laps recorded by [`lap`][]."""

_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "compile",
           "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load"}

_SECONDS = dict.fromkeys(_EVENTS.values(), 0.0)
"""Seconds of each JAX phase in this process since [`listen`][]."""

_LISTENING: list[bool] = []


def started() -> None:
    """Mark the start of the command (the entry point calls it first)."""
    if not _START:
        now = time.perf_counter()
        _START.extend((now, now))


def lap(name: str) -> None:
    """Record the seconds since [`started`][] or the last lap as the phase `name` (nothing when
    the command line was not started by the entry point, as in a call of `main` from Python)."""
    if _START:
        now = time.perf_counter()
        _LAPS[name] = now - _START[1]
        _START[1] = now


def laps() -> dict[str, float]:
    """The laps recorded so far."""
    return dict(_LAPS)


def since_start() -> float | None:
    """Seconds since [`started`][], or None when the command line was not started by it."""
    return time.perf_counter() - _START[0] if _START else None


def _on_duration(event: str, duration_secs: float, **_kwargs: str | int) -> None:
    phase = _EVENTS.get(event)
    if phase is not None:
        _SECONDS[phase] += duration_secs


def listen() -> None:
    """Install JAX's duration listeners (once per process)."""
    if not _LISTENING:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _LISTENING.append(True)


def jax_seconds() -> dict[str, float]:
    """A snapshot of the JAX phases' seconds so far (differences of two are a block's)."""
    return dict(_SECONDS)
