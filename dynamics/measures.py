"""Measures of specialization, defined once and used by theory and simulation alike
(`docs/phases.md`).

- [`alignment`][] `α_hf = m_hf/√q_hh`: the cosine of head h with feature f;
- [`head_spread`][] `max_f (max_h α_hf − min_h α_hf)`: 0 when all heads are alike;
- [`persistent_crossing`][]: the first time a curve reaches a level after its last visit below
  a lower level (hysteresis against noise); with no lower level it is the first crossing;
  [`crossing_shortfall`][]: how far a curve that does not cross stays below the level;
- [`escape_crossing`][]: the escape from the unspecialized plateau, the persistent crossing of
  [`ESCAPE_THRESHOLD`][] by a run's escape observable (a model declares it:
  `headflow.dynamics.models.AbstractModel.escape_observable`); [`escape_time`][]: that of the
  head spread;
- [`best_alignment`][] `max_f |α_hf|`: the alignment of each unit with its best direction, the
  escape observable of a model with a single student.

The array functions accept numpy or JAX arrays with any leading axes (JAX ones stay JAX, so
they can be differentiated); the crossing functions work on one curve sampled on a time grid.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._constants import ESCAPE_THRESHOLD as ESCAPE_THRESHOLD  # light: shown by `headflow --help`

HYSTERESIS = 0.5
"""A crossing of a level θ counts only after the curve's last visit below `HYSTERESIS·θ`."""


def _xp(*arrays: Any):
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def alignment(m, q, t=None):
    """`α_hf = m_hf / √q_hh` (`|k*_f|²/D = 1`); `m (..., H, F)`, `q (..., H, H)`. With the
    directions' Gram matrix `t (..., F, F)`, the cosine `m_hf / √(q_hh t_ff)`."""
    xp = _xp(m, q)
    diag = xp.sqrt(xp.clip(xp.diagonal(q, axis1=-2, axis2=-1), 1e-300, None))
    a = m / diag[..., :, None]
    if t is None:
        return a
    return a / xp.sqrt(xp.clip(xp.diagonal(t, axis1=-2, axis2=-1), 1e-300, None))[..., None, :]


def best_alignment(m, q, t=None):
    """`max_f |α_hf|` ([`alignment`][], with the directions' Gram matrix `t` when given): the
    alignment of each unit with its best direction, `(..., H)`."""
    xp = _xp(m, q)
    return xp.max(xp.abs(alignment(m, q, t)), axis=-1)


def head_spread(m, q):
    """`max_f (max_h α_hf − min_h α_hf)`, `(...)` from `m (..., H, F)`, `q (..., H, H)`."""
    xp = _xp(m, q)
    a = alignment(m, q)
    return xp.max(xp.max(a, axis=-2) - xp.min(a, axis=-2), axis=-1)


def _last_low(x: np.ndarray, level: float, lower: float | None) -> int:
    """The index of the last point of `x` below `lower` (default `HYSTERESIS·level`), −1 if
    none: a crossing of `level` counts only after it."""
    lower = HYSTERESIS * level if lower is None else lower
    low = np.nonzero(x < lower)[0]
    return int(low[-1]) if low.size else -1


def persistent_crossing(t, x, level: float, *, lower: float | None = None) -> float | None:
    """The first time `x (T)` reaches `level` after its last visit below `lower` (default
    `HYSTERESIS·level`; `-inf` gives the plain first crossing), linearly interpolated between
    save points; None if it never does.

    A crossing followed by a return below `lower` does not count, so noise blips around the
    level are ignored.
    """
    t = np.asarray(t, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    start = _last_low(x, level, lower)
    above = np.nonzero(x[start + 1:] >= level)[0]
    if above.size == 0:
        return None
    k = start + 1 + int(above[0])
    if k == 0:
        return float(t[0])
    a, b = x[k - 1], x[k]
    if b == a:
        return float(t[k])
    return float(t[k - 1] + (level - a) / (b - a) * (t[k] - t[k - 1]))


def crossing_shortfall(x, level: float, *, lower: float | None = None) -> float:
    """How far `x (T)` stays from a [`persistent_crossing`][] of `level`: `level − max x` over
    the points after its last visit below `lower` (default `HYSTERESIS·level`; the last point
    when that visit is the last point), and 0 when it crosses. The distance by which the curve
    would have to rise for the crossing to happen within its time window."""
    x = np.asarray(x, dtype=np.float64)
    start = _last_low(x, level, lower)
    tail = x[start + 1:] if start + 1 < len(x) else x[-1:]
    return max(float(level - np.max(tail)), 0.0)


def first_crossing(t, x, level: float) -> float | None:
    """The first time `x (T)` reaches `level` (linear interpolation), None if it never does."""
    return persistent_crossing(t, x, level, lower=-math.inf)


def escape_crossing(t, x, threshold: float = ESCAPE_THRESHOLD) -> float | None:
    """The escape from the unspecialized plateau of one run, given its escape observable
    `x (T)` (the head spread, or what the model declares): the [`persistent_crossing`][] of
    `threshold`; None if it never escapes."""
    return persistent_crossing(t, x, threshold)


def escape_time(t, m, q, threshold: float = ESCAPE_THRESHOLD) -> float | None:
    """The escape from the unspecialized plateau of one run (`m (T, H, F)`, `q (T, H, H)`): the
    [`escape_crossing`][] of `threshold` by the [`head_spread`][]; None if it never escapes."""
    return escape_crossing(t, head_spread(np.asarray(m), np.asarray(q)), threshold)


ESCAPE_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
"""The escape-time quantiles that reports give."""


def escape_quantiles(escapes, levels=ESCAPE_QUANTILES) -> dict[str, float]:
    """Empirical quantiles (`inverted_cdf`) of an ensemble's escape times (NaN or None: never
    escaped), a run that never escapes counting as +∞: a quantile beyond the escaped fraction
    is then +∞ (written `null` in JSON). Keys are the levels as text (`"0.1"`, ...)."""
    e = np.asarray([np.inf if x is None else x for x in np.ravel(np.asarray(escapes,
                                                                              dtype=object))],
                   dtype=float)
    e = np.where(np.isfinite(e), e, np.inf)
    return {f"{q:g}": float(np.quantile(e, q, method="inverted_cdf")) for q in levels}
