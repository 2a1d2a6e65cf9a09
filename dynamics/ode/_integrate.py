"""Integrating the order-parameter ODEs with diffrax: one integrator description, one call
site of `diffeqsolve` ([`solve`][]) for every ODE headflow integrates (trajectories, the
tangent-linear equation, fixed points, sweeps)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._errors import ConfigError, DivergenceError, HeadflowError, require_x64
from .._exported import compile_exported
from .._stop import check_stop
from ..fields import AbstractField

BLOWUP = 1e6
"""Default blow-up level: overlaps larger than this (in absolute value) mean the run
diverges, and the solve stops there."""

_IMPLICIT = ("kvaerno3", "kvaerno4", "kvaerno5", "implicit_euler", "kencarp3", "kencarp4",
             "kencarp5")


def get_solver(name: str) -> dfx.AbstractSolver:
    """A diffrax solver by name (`"tsit5"`, `"dopri5"`, `"dopri8"`, `"heun"`, `"bosh3"`,
    `"kvaerno5"` (stiff), ...). Case-insensitive; underscores allowed."""
    table = {cls.lower().replace("_", ""): cls for cls in dir(dfx)
             if isinstance(getattr(dfx, cls), type)
             and issubclass(getattr(dfx, cls), dfx.AbstractSolver)
             and not cls.startswith("Abstract")}
    key = name.lower().replace("_", "")
    if key not in table:
        raise ConfigError(f"ode.solver = {name!r}: not a diffrax solver; e.g. 'tsit5', "
                          "'dopri5', 'dopri8', 'kvaerno5' (stiff)")
    cls = getattr(dfx, table[key])
    try:
        if key in {k.replace("_", "") for k in _IMPLICIT}:
            import optimistix as optx

            return cls(root_finder=optx.Chord(rtol=1e-8, atol=1e-10))
        return cls()
    except TypeError as err:
        raise ConfigError(f"ode.solver = {name!r}: cannot be used here ({err})") from None


def bounded(x: ArrayLike, axis=None, threshold: float = BLOWUP) -> Array:
    """Whether the entries of `x` (over `axis`; all of them by default) are finite and below
    `threshold` in absolute value: the divergence rule, which [`BlowUp`][] applies to the
    ODE's state and the simulators to their runs."""
    return jnp.all(jnp.abs(x) < threshold, axis=axis)     # False for NaN and inf


class BlowUp(eqx.Module):
    """The divergence rule ([`bounded`][]) as a diffrax event condition: the solve stops once
    any entry of the state exceeds `threshold` in absolute value or is not finite."""

    threshold: float = BLOWUP

    def __call__(self, t, y, args, **kwargs) -> Array:
        del t, args, kwargs
        return ~jnp.all(jnp.stack([bounded(x, threshold=self.threshold)
                                   for x in jax.tree.leaves(y)]))


class Integrator(eqx.Module):
    """How to integrate: a diffrax `solver`, a step-size `controller`, the first step `dt0`
    (None: chosen by the controller), `max_steps` and the `blowup` rule (None: none).

    Built once from the config ([`from_config`][]) and passed to [`integrate`][] / [`solve`][].
    """

    solver: dfx.AbstractSolver
    controller: dfx.AbstractStepSizeController
    max_steps: int = eqx.field(static=True, default=100000)
    blowup: BlowUp | None = BlowUp()
    dt0: float | None = eqx.field(static=True, default=None)

    @classmethod
    def adaptive(cls, solver: str | dfx.AbstractSolver = "tsit5", *, rtol: float = 1e-6,
                 atol: float = 1e-8, max_steps: int = 100000,
                 blowup: BlowUp | None = BlowUp()) -> Integrator:
        """An adaptive-step integrator (PID controller at `rtol`, `atol`)."""
        solver = get_solver(solver) if isinstance(solver, str) else solver
        return cls(solver=solver, controller=dfx.PIDController(rtol=rtol, atol=atol),
                   max_steps=max_steps, blowup=blowup)

    @classmethod
    def from_config(cls, ode: Any, **overrides: Any) -> Integrator:
        """From the `[ode]` table (`solver`, `rtol`, `atol`, `max_steps`); `overrides` replace
        any of those."""
        opts = {"solver": ode.solver, "rtol": ode.rtol, "atol": ode.atol,
                "max_steps": ode.max_steps, **overrides}
        return cls.adaptive(**opts)

    @property
    def rtol(self) -> float:
        return float(getattr(self.controller, "rtol", np.nan))

    def replace(self, **changes: Any) -> Integrator:
        return dataclasses.replace(self, **changes)

    def with_jumps(self, times) -> Integrator:
        """The integrator with the adaptive controller told to step exactly onto `times`
        (the knots of a learning-rate schedule, where the vector field has a kink: diffrax's
        `ClipStepSizeController` around the PID controller); unchanged when `times` is empty
        or the controller is not a PID controller."""
        times = sorted({float(t) for t in times})
        if not times or not isinstance(self.controller, dfx.PIDController):
            return self
        return self.replace(controller=dfx.ClipStepSizeController(
            self.controller, jump_ts=jnp.asarray(times, jnp.float64)))


NOT_DIFFERENTIATED: dfx.AbstractAdjoint = dfx.ForwardMode()
"""The adjoint of a solve that is never reverse-differentiated (the ODE's stored program, the
tangent-linear solve, the SDE ensembles, sweeps): diffrax's forward-mode adjoint steps in a plain
while loop, cheaper to trace and compile than the checkpointed loop of reverse mode, with the
same steps and results."""


@eqx.filter_jit
def solve(terms, y0, ts: Float[Array, " T"], integrator: Integrator, *, args=None,
          progress: dfx.AbstractProgressMeter = dfx.NoProgressMeter(),
          adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint()) -> dfx.Solution:
    """`diffrax.diffeqsolve` from `ts[0]` to `ts[-1]`, saving at `ts`, with `integrator`'s
    settings; never raises (`throw=False`: read `result`). Pure, so it can be vmapped
    (sweeps) and differentiated."""
    event = None if integrator.blowup is None else dfx.Event(integrator.blowup)
    return dfx.diffeqsolve(terms, integrator.solver, t0=ts[0], t1=ts[-1], dt0=integrator.dt0,
                           y0=y0, args=args, saveat=dfx.SaveAt(ts=ts),
                           stepsize_controller=integrator.controller,
                           max_steps=integrator.max_steps, throw=False, progress_meter=progress,
                           event=event, adjoint=adjoint)


class ODESolution(eqx.Module):
    """States on the save grid, solver statistics, and the wall time spent tracing and
    compiling (`compile_s`) and integrating (`run_s`)."""

    t: Float[Array, " T"]
    overlaps: PyTree
    num_steps: int
    num_rejected: int
    compile_s: float = eqx.field(static=True, default=float("nan"))
    run_s: float = eqx.field(static=True, default=float("nan"))


def _check_start(d0: PyTree) -> None:
    leaves = jax.tree_util.tree_flatten_with_path(d0)[0]
    bad = [jax.tree_util.keystr(path).lstrip(".") for path, x in leaves
           if not np.all(np.isfinite(np.asarray(x)))]
    if bad:
        raise DivergenceError(f"the ODE vector field is NaN/inf at the initial state (in d"
                              f"{', d'.join(bad)}/dt); check the initial state and the "
                              "model's parameters")


_STATUS = ("successful", "max_steps_reached", "event_occurred")
"""The outcomes of a solve that [`explain`][] tells apart (any other is a failure)."""


def _status(result) -> Array:
    """The index in `_STATUS` of a diffrax result (`len(_STATUS)`: another failure), an array
    that a stored program can return."""
    codes = [result == getattr(dfx.RESULTS, name) for name in _STATUS]
    return jnp.select(codes, list(range(len(_STATUS))), len(_STATUS))


def _status_name(code) -> str:
    """The name in `_STATUS` of an index from `_status` (`"failed"` past its end)."""
    return _STATUS[int(code)] if int(code) < len(_STATUS) else "failed"


def _solve_from(field, ov0, ts, integrator, progress):
    """[`solve`][] and the vector field at the start, in one program of arrays only (the saved
    states' leaves, the field's leaves at the start, the outcome's index in `_STATUS`, the
    accepted and rejected steps), which a later process can load (the export cache,
    `headflow.dynamics.set_export_cache`). Where the field at the start is not finite the solve
    integrates a zero field instead (a few steps: the caller raises on `d0`), rather than
    rejecting steps up to `max_steps`."""
    d0 = field(ts[0], ov0)
    ok = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(d0)]))
    sol = solve(dfx.ODETerm(_Guarded(field, ok)), ov0, ts, integrator, progress=progress,
                adjoint=NOT_DIFFERENTIATED)
    return (jax.tree.leaves(sol.ys), jax.tree.leaves(d0), _status(sol.result),
            sol.stats["num_steps"], sol.stats["num_rejected_steps"])


class _Guarded(eqx.Module):
    """`field`, or zero where `ok` is false."""

    field: AbstractField
    ok: Array

    def __call__(self, t, y, args=None):
        return jax.tree.map(lambda v: jnp.where(self.ok, v, 0.0), self.field(t, y, args))


def traced_values(tree):
    """`tree` with its Python float leaves (learning rates, label noise, `ρ*`, prior
    parameters) turned into float64 numpy scalars: still floats for host code, but traced by
    `equinox.filter_jit` instead of being compiled in, so configurations that differ only in
    these values share one compiled program."""
    return jax.tree.map(lambda x: np.float64(x) if isinstance(x, float) else x, tree)


def integrate(field: AbstractField, ov0: PyTree, ts, integrator: Integrator, *,
              progress: bool = False, check: bool = True) -> ODESolution:
    """Integrate `d ov/dt = field(ov)` from `ts[0]` to `ts[-1]`, saving at `ts` (float64).

    **Arguments:** `field` a vector field (e.g.
    [`headflow.dynamics.models.attention.ManifoldField`][]), `ov0` the initial state, `ts` the save
    times, `integrator` the solver settings, `progress` (diffrax's tqdm meter), `check` the
    initial-state checks.

    **Raises:** [`HeadflowError`][] when the solver hits `max_steps`; [`DivergenceError`][] when
    the state blows up or becomes NaN/inf.
    """
    require_x64("the order-parameter ODEs")
    check_stop()
    ts = np.asarray(ts, dtype=np.float64)
    if check:
        field.check_state(ov0)
    check_stop()
    integrator = integrator.with_jumps(field.steps.knot_times)   # none without a schedule
    meter = dfx.TqdmProgressMeter(refresh_steps=20) if progress else dfx.NoProgressMeter()
    args = (traced_values(field), ov0, jnp.asarray(ts), integrator, meter)
    t0 = time.perf_counter()
    # the field's Python floats traced, not baked in: a field that differs only in values
    # (a learning rate, a fixed-point search's next chunk) hits JAX's caches, with no retrace;
    # with the export cache on, a later process loads the program instead of tracing it
    compiled = compile_exported(_solve_from, *args)
    t1 = time.perf_counter()
    ys_leaves, d0_leaves, status, steps, rejected = jax.block_until_ready(compiled(*args))
    t2 = time.perf_counter()
    tree = jax.tree.structure(ov0)
    if check:
        _check_start(jax.tree.unflatten(tree, d0_leaves))
    finite = np.all(np.stack([np.isfinite(np.asarray(x)).reshape(len(ts), -1).all(axis=1)
                              for x in ys_leaves]), axis=0)
    explain_status(_status_name(status), ts, finite, integrator)
    return ODESolution(t=jnp.asarray(ts), overlaps=jax.tree.unflatten(tree, ys_leaves),
                       num_steps=int(steps), num_rejected=int(rejected), compile_s=t1 - t0,
                       run_s=t2 - t1)


def explain(result, ts: np.ndarray, finite: np.ndarray, integrator: Integrator) -> None:
    """Turn a failed solve (its diffrax `result`) into a one-line error (`finite`: which saved
    states are finite); [`headflow.dynamics.Interrupted`][] when a stop request ended it."""
    explain_status(_status_name(_status(result)), ts, finite, integrator)


def explain_status(status: str, ts: np.ndarray, finite: np.ndarray,
                   integrator: Integrator) -> None:
    """[`explain`][] of a solve's outcome by name: `"successful"`, `"max_steps_reached"`,
    `"event_occurred"` (the blow-up rule) or `"failed"`."""
    check_stop()
    if status == "max_steps_reached":
        reached = ts[finite.sum() - 1] if finite.any() else ts[0]
        raise HeadflowError(f"ODE solver hit ode.max_steps = {integrator.max_steps} near "
                            f"t = {reached:.4g} (t_max = {ts[-1]:.4g}); raise ode.max_steps, "
                            "loosen ode.rtol/atol or try ode.solver = 'kvaerno5' if the "
                            "problem is stiff")
    if status == "event_occurred":
        reached = ts[max(int(finite.sum()) - 1, 0)]
        level = integrator.blowup.threshold if integrator.blowup is not None else np.inf
        raise DivergenceError(f"ODE diverged after t = {reached:.4g}: the overlaps exceeded "
                              f"{level:.0e} in absolute value; try a smaller training.lr "
                              "(the SGD-noise terms grow like η²)")
    if status != "successful" or not finite.all():
        first_bad = ts[int(np.argmin(finite))] if not finite.all() else ts[-1]
        raise DivergenceError(f"ODE diverged before t = {first_bad:.4g}: "
                              "the order parameters or the vector field became NaN/inf; try a "
                              "smaller training.lr or a stiff solver (ode.solver = 'kvaerno5')")
