"""Integrating the order-parameter ODEs with diffrax."""

from __future__ import annotations


import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import ConfigError, DivergenceError, HeadflowError
from .._overlaps import Overlaps
from ._fields import AbstractField

BLOWUP = 1e6
"""Overlaps larger than this (in absolute value) mean the run diverges: the solve stops there."""

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


class ODESolution(eqx.Module):
    """States on the save grid and solver statistics."""

    t: Float[Array, " T"]
    overlaps: Overlaps
    num_steps: int
    num_rejected: int


def check_initial_state(field: AbstractField, ov0: Overlaps, rho: float) -> None:
    """One-line errors for an unusable start: wrong shapes, non-PSD overlaps, NaN vector field."""
    H, F = field.model.H, field.model.F
    want = {"m": (H, F), "q": (H, H), "n": (H,), "s": (H, H), "b": (H,), "kv": (H, H),
            "kvs": (H,), "vks": (H, F)}
    for name, shape in want.items():
        got = tuple(getattr(ov0, name).shape)
        if got != shape:
            raise HeadflowError(f"initial overlaps: {name} has shape {got} but the config has "
                                f"H={H}, F={F} (expected {shape}); build the state for this "
                                "config")
    ov0.check_psd(rho, what="initial overlaps")
    d0 = eqx.filter_jit(lambda f, o: f(0.0, o))(field, ov0)
    bad = [k for k, v in zip(want, (d0.m, d0.q, d0.n, d0.s, d0.b, d0.kv, d0.kvs, d0.vks))
           if not bool(jnp.all(jnp.isfinite(v)))]
    if bad:
        raise DivergenceError(f"the ODE vector field is NaN/inf at the initial state (in d"
                              f"{', d'.join(bad)}/dt); check the initial overlaps and the "
                              "prior amplitude")


def integrate(field: AbstractField, ov0: Overlaps, ts, *, solver: str = "tsit5",
              rtol: float = 1e-6, atol: float = 1e-8, max_steps: int = 100000,
              progress: bool = False, check: bool = True) -> ODESolution:
    """Integrate `d ov/dt = field(ov)` from `ts[0]` to `ts[-1]`, saving at `ts` (float64,
    adaptive step size with a PID controller).

    **Arguments:** `field` a vector field ([`ManifoldField`][] or [`FullField`][]), `ov0` the
    initial state, `ts` the save times, `solver` a diffrax solver name (stiff problems:
    `"kvaerno5"`), tolerances, `max_steps`, `progress` (diffrax's tqdm meter), `check` the
    initial-state checks.

    **Raises:** [`HeadflowError`][] when the solver hits `max_steps`; [`DivergenceError`][] when
    the state or the vector field becomes NaN/inf.
    """
    ts = np.asarray(ts, dtype=np.float64)
    if check:
        check_initial_state(field, ov0, field.model.rho)
    meter = dfx.TqdmProgressMeter(refresh_steps=20) if progress else dfx.NoProgressMeter()
    sol = _solve(field, ov0, jnp.asarray(ts), get_solver(solver), rtol, atol, max_steps, meter)
    result = sol.result
    ys = sol.ys
    finite = np.asarray(jax.vmap(lambda o: jnp.all(jnp.asarray(
        [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(o)])))(ys))
    if bool(result == dfx.RESULTS.max_steps_reached):
        reached = ts[finite.sum() - 1] if finite.any() else ts[0]
        raise HeadflowError(f"ODE solver hit ode.max_steps = {max_steps} near t = {reached:.4g} "
                            f"(t_max = {ts[-1]:.4g}); raise ode.max_steps, loosen ode.rtol/atol "
                            "or try ode.solver = 'kvaerno5' if the problem is stiff")
    if bool(result == dfx.RESULTS.event_occurred):
        reached = ts[max(int(finite.sum()) - 1, 0)]
        raise DivergenceError(f"ODE diverged after t = {reached:.4g}: the overlaps exceeded "
                              f"{BLOWUP:.0e} in absolute value; try a smaller training.lr "
                              "(the SGD-noise terms grow like η²)")
    if bool(result != dfx.RESULTS.successful) or not finite.all():
        first_bad = ts[int(np.argmin(finite))] if not finite.all() else ts[-1]
        raise DivergenceError(f"ODE diverged before t = {first_bad:.4g}: "
                              "the order parameters or the vector field became NaN/inf; try a "
                              "smaller training.lr or a stiff solver (ode.solver = 'kvaerno5')")
    stats = sol.stats
    return ODESolution(t=jnp.asarray(ts), overlaps=ys, num_steps=int(stats["num_steps"]),
                       num_rejected=int(stats["num_rejected_steps"]))


@eqx.filter_jit
def _solve(field, ov0, ts, solver, rtol, atol, max_steps, meter):
    return dfx.diffeqsolve(dfx.ODETerm(field), solver, t0=ts[0], t1=ts[-1], dt0=None, y0=ov0,
                           saveat=dfx.SaveAt(ts=ts),
                           stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
                           max_steps=max_steps, throw=False, progress_meter=meter,
                           event=dfx.Event(_blowup))


def _blowup(t, y, args, **kwargs):
    leaves = jax.tree.leaves(y)
    big = jnp.max(jnp.asarray([jnp.max(jnp.abs(x)) for x in leaves]))
    return ~(big < BLOWUP)  # also true for NaN
