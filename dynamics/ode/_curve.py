"""What every differentiable learning curve shares (`docs/differentiable.md`): the adjoints,
the solver of a curve, and the scalar summaries of a risk curve."""

from __future__ import annotations

import diffrax as dfx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._errors import ConfigError
from ..config import Config
from ..fields import AbstractField
from ._integrate import Integrator


ADJOINTS = ("recursive", "backsolve", "forward")
"""`"recursive"`: diffrax's `RecursiveCheckpointAdjoint` (discretize, then differentiate: the
exact gradient of the computed solution, reverse mode); `"backsolve"`: `BacksolveAdjoint` (the
continuous adjoint ODE solved backwards: memory independent of the number of steps, gradient
accurate to the solver tolerance); `"forward"`: `ForwardMode` (forward-mode autodiff through the
solve, `jax.jvp`/`jax.jacfwd`: the cheap choice for a whole curve's Jacobian in a few
parameters, as `headflow fit` needs; reverse mode is unavailable with it)."""


def adjoint_of(name: str, checkpoints: int | None = None) -> dfx.AbstractAdjoint:
    """The diffrax adjoint named `name` (one of [`ADJOINTS`][])."""
    if name == "recursive":
        return dfx.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    if name == "backsolve":
        return dfx.BacksolveAdjoint()
    if name == "forward":
        return dfx.ForwardMode()
    raise ConfigError(f"adjoint = {name!r}: choose one of {', '.join(map(repr, ADJOINTS))}")


def curve_solver(cfg: Config, field: AbstractField, adjoint: str, checkpoints: int | None,
                 times) -> tuple[Integrator, dfx.AbstractAdjoint, Array]:
    """`(integrator, adjoint, save times)` of a differentiable curve: `[ode]`'s integrator
    stepping onto the schedule's knots, without the blow-up event for backsolve (which cannot
    take events), `checkpoints` at most `ode.max_steps`, and the `[output]` grid or `times`."""
    integrator = Integrator.from_config(cfg.ode).with_jumps(field.steps.knot_times)
    if adjoint == "backsolve":
        integrator = integrator.replace(blowup=None)
    if checkpoints is not None:
        checkpoints = min(int(checkpoints), int(cfg.ode.max_steps))
    ts = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    return integrator, adjoint_of(adjoint, checkpoints), jnp.asarray(ts)


def final_risk(risk: Float[Array, " T"]) -> Scalar:
    """The risk at the last save time."""
    return risk[-1]


def mean_risk(t: Float[ArrayLike, " T"], risk: Float[Array, " T"]) -> Scalar:
    """The time-averaged risk `(1/(t_T − t_0)) ∫ R dt` by the trapezoidal rule on the save
    grid."""
    t = jnp.asarray(t)
    return jnp.sum(0.5 * (risk[1:] + risk[:-1]) * jnp.diff(t)) / (t[-1] - t[0])


def time_to_risk(t: Float[ArrayLike, " T"], risk: Float[Array, " T"],
                 level: float | Scalar) -> Scalar:
    """The first time the risk reaches `level`, linearly interpolated between the two save
    points around the crossing (differentiable in `risk` away from ties); `t_0` when the risk
    starts at or below `level`, `inf` when it never reaches it."""
    t = jnp.asarray(t)
    below = risk <= level
    i = jnp.argmax(below)                       # the first save point at or below level
    j = jnp.maximum(i - 1, 0)
    r0, r1 = risk[j], risk[i]
    frac = jnp.where(i > 0, (r0 - level) / jnp.where(r0 != r1, r0 - r1, 1.0), 0.0)
    crossing = t[j] + frac * (t[i] - t[j])
    return jnp.where(jnp.any(below), crossing, jnp.inf)
