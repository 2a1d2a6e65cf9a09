"""Long-time states of the order-parameter ODEs: fixed points reached by integration.

The vector fields are Monte Carlo (or QMC) averages over fixed nodes (common random numbers), so
they are smooth functions of the state, and integrating them long enough converges to a fixed
point of the *estimated* field. That point differs from the exact one by the estimator's error,
so "stationary" is judged against the field's own error bar (definitions: `docs/activations.md`):

    the state is stationary when every component of the right-hand side satisfies
    `|RHS_i| ≤ z · err_i + atol`,

with `err_i` the Monte Carlo standard error of `RHS_i` at that state (the spread of the per-node
derivatives, or of the QMC replicates), `z = 0.25` and `atol = 1e-7` by default: the remaining
drift is below a quarter of what the field can resolve. [`find_fixed_point`][] integrates in
chunks of growing length (`t_first`, then doubling) until the check passes or `t_max` is reached,
and says which.

Near minima the explicit solver is held back by stiff directions while slow directions creep,
so an optional Newton polish ([`newton_polish`][], in reduced coordinates) can jump to the fixed
point; it is accepted only under the conditions listed in [`find_fixed_point`][] (stationary,
no saddle, bounded move, no risk increase under gradient flow) and is always followed by a
verification chunk of plain integration.

Stationarity does not certify stability: a saddle's plateau is stationary too. Starting from a
random (asymmetric) state and integrating long lets unstable directions grow, and the polish
rejects saddles by the eigenvalues of its Jacobian.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._linalg import psd_part
from .._overlaps import ORDER_PARAMETERS, Overlaps
from .._risk import population_risk
from ..fields import AbstractField
from ..ode import Integrator, integrate

STATIONARY_Z = 0.25
"""Default `z`: stationary when `|RHS_i| ≤ z·err_i + atol` for every component."""

STATIONARY_ATOL = 1e-7
"""Default absolute floor of the stationarity tolerance (components whose error bar is exactly
zero, e.g. the bias drift of per-head softmax, where the bias cancels)."""

TRUST_RADIUS = 0.5
"""Largest accepted move of a Newton polish, relative to `max(1, max|state|)`."""

GROWTH_TOL = 1e-4
"""A polished state is a saddle (rejected) when its reduced Jacobian has an eigenvalue with real
part above this (in units of 1/t)."""


class StationarityTest(eqx.Module):
    """`|RHS_i| ≤ z·err_i + atol` for every component (`err` by the nodes' error rule)."""

    z: float = STATIONARY_Z
    atol: float = STATIONARY_ATOL


class Chunks(eqx.Module):
    """The integration schedule of [`find_fixed_point`][]: from `t0`, a first chunk of length
    `t_first` (default `(t_max − t0)/64`), then chunks up to `growth` times the elapsed time,
    until `t_max`; `saves` log-spaced saved states per chunk."""

    t_max: float
    t_first: float | None = None
    growth: float = 2.0
    saves: int = 16
    t0: float = 0.0


class NewtonPolish(eqx.Module):
    """The Newton acceleration of [`find_fixed_point`][] (manifold fields): tried after every
    non-stationary chunk that ends after `t0 + after`; a polished state is accepted under the
    conditions listed there (`growth_tol`: no eigenvalue of the reduced Jacobian with real part
    above it; `trust`: largest move relative to `max(1, max|state|)`)."""

    after: float = 0.0
    growth_tol: float = GROWTH_TOL
    trust: float = TRUST_RADIUS


class Stationarity(eqx.Module):
    """The stationarity check of one state.

    **Fields:** `rhs` and `err` (the right-hand side and its error, leafwise), `residual`
    (`max_i |RHS_i|`), `ratio` (`max_i |RHS_i| / (z·err_i + atol)`; ≤ 1 means stationary),
    `stationary`, and the `test` used.
    """

    rhs: Overlaps
    err: Overlaps
    residual: float = eqx.field(static=True)
    ratio: float = eqx.field(static=True)
    stationary: bool = eqx.field(static=True)
    test: StationarityTest = StationarityTest()

    def summary(self) -> dict[str, float | bool]:
        """JSON-able numbers: residual, ratio, stationary, and per order parameter the largest
        |RHS| and its error bar."""
        out: dict[str, float | bool] = {"residual": self.residual, "ratio": self.ratio,
                                        "stationary": self.stationary, "z": self.test.z,
                                        "atol": self.test.atol}
        for name in ORDER_PARAMETERS:
            out[f"rhs_{name}"] = float(jnp.max(jnp.abs(getattr(self.rhs, name))))
            out[f"err_{name}"] = float(jnp.max(jnp.abs(getattr(self.err, name))))
        return out


@eqx.filter_jit
def _rhs_with_error(field: AbstractField, ov: Overlaps):
    return field.with_error(ov)


def stationarity(field: AbstractField, ov: Overlaps,
                 test: StationarityTest = StationarityTest()) -> Stationarity:
    """Check `|RHS_i| ≤ z·err_i + atol` for every component of the vector field at `ov`, with
    the error by the rule of the field's nodes (MC standard error, QMC replicate spread, …).

    **Returns:** a [`Stationarity`][].
    """
    rhs, err = _rhs_with_error(field, ov)
    f = np.concatenate([np.abs(np.ravel(x)) for x in jax.tree.leaves(rhs)])
    e = np.concatenate([np.abs(np.ravel(x)) for x in jax.tree.leaves(err)])
    if not np.all(np.isfinite(f)):
        return Stationarity(rhs=rhs, err=err, residual=float("nan"), ratio=float("inf"),
                            stationary=False, test=test)
    ratio = float(np.max(f / (test.z * e + test.atol)))
    return Stationarity(rhs=rhs, err=err, residual=float(np.max(f)), ratio=ratio,
                        stationary=ratio <= 1.0, test=test)


class FixedPoint(eqx.Module):
    """A long-time state reached by integration.

    **Fields:** `overlaps` (the final state), `t` (the time reached), `check` (its
    [`Stationarity`][]), `stationary` (whether the check passed before `t_max`), the trajectory
    `ts` (T) and `trajectory` (overlaps with leaves `(T, ...)`) on the save grid of all chunks,
    the solver's `num_steps`, and `polished_at` (times where a Newton polish replaced the state,
    see [`newton_polish`][]; the trajectory jumps there) with `max_growth` of the last polish
    (largest real part of the reduced Jacobian's eigenvalues; `nan` without polish), and
    `polish_attempts`: `(t, ratio before, ratio after, growth rate, outcome)` per attempt.
    """

    overlaps: Overlaps
    t: float = eqx.field(static=True)
    check: Stationarity
    ts: Float[Array, " T"]
    trajectory: Overlaps
    num_steps: int = eqx.field(static=True)
    polished_at: tuple[float, ...] = eqx.field(static=True, default=())
    max_growth: float = eqx.field(static=True, default=float("nan"))
    polish_attempts: tuple[tuple, ...] = eqx.field(static=True, default=())

    @property
    def stationary(self) -> bool:
        return self.check.stationary


def find_fixed_point(field: AbstractField, ov0: Overlaps, chunks: Chunks,
                     integrator: Integrator, *, test: StationarityTest = StationarityTest(),
                     polish: NewtonPolish | None = None, progress=None) -> FixedPoint:
    """Integrate from `ov0` until the state is stationary (see the module docstring) or
    `chunks.t_max`.

    The integration runs in chunks (see [`Chunks`][]), checking stationarity after every
    chunk, so a state that settles early stops early and one that creeps (slow directions) gets
    exponentially longer integrations.

    With a `polish` (manifold fields only), a chunk that ends non-stationary after
    `t0 + polish.after` is followed by a Newton polish ([`newton_polish`][]); the polished
    state is taken only if it passes the stationarity check, the reduced Jacobian there has no
    eigenvalue with real part above `polish.growth_tol` (no saddle), no order parameter moved
    by more than `polish.trust · max(1, max|state|)`, and, for gradient flow (no η² terms),
    the risk did not increase (the flow lowers the risk, so it can only reach fixed points
    below the current risk; without this, Newton may jump to another fixed point, e.g.
    softmax-1 with biases → +∞, i.e. plain softmax). Integration then resumes from it for a
    verification chunk of length `t_first`, and only the check after that chunk can end the
    search: every reported fixed point is a state the *integration* stays at.

    **Arguments:** `field`, `ov0`: the vector field and the start; `chunks`: the schedule;
    `integrator`: passed to [`dynamics.ode.integrate`][] per chunk; `test`: the stationarity
    tolerance; `polish`: the Newton acceleration (None: off); `progress`: optional callable
    `progress(t, check)` called after each chunk.

    **Returns:** a [`FixedPoint`][]; `stationary` is False when `t_max` was reached first.

    **Raises:** what [`dynamics.ode.integrate`][] raises (divergence, `max_steps`).
    """
    t0, t_max = float(chunks.t0), float(chunks.t_max)
    if not t_max > t0:
        raise ValueError(f"t_max = {t_max} must exceed t0 = {t0}")
    if polish is not None and not field.manifold_form:
        raise ValueError("a Newton polish needs the manifold vector field (ode.form = "
                         "'manifold')")
    t_first = (t_max - t0) / 64.0 if chunks.t_first is None else float(chunks.t_first)
    ov = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0)
    t = t0
    ts_all, traj, steps, first = [np.asarray([t])], [jax.tree.map(lambda x: x[None], ov)], 0, True
    polished_at: list[float] = []
    attempts: list[tuple] = []
    max_growth = float("nan")
    horizon = min(t + t_first, t_max)
    while True:
        # log-spaced saves inside the chunk (fine near its start, where things move)
        span = horizon - t
        ts = t + span * (np.geomspace(1.0, 1.0 + 63.0, chunks.saves) - 1.0) / 63.0
        ts[0], ts[-1] = t, horizon
        sol = integrate(field, ov, ts, integrator, check=first)
        first = False
        steps += sol.num_steps
        ts_all.append(np.asarray(sol.t)[1:])
        traj.append(jax.tree.map(lambda x: x[1:], sol.overlaps))
        ov = jax.tree.map(lambda x: x[-1], sol.overlaps)
        t = horizon
        check = stationarity(field, ov, test)
        if progress is not None:
            progress(t, check)
        if check.stationary or t >= t_max:
            break
        horizon = min(t0 + (t - t0) * chunks.growth, t_max)
        if polish is not None and t - t0 >= polish.after:
            p = newton_polish(field, ov, test=test)
            why = ("no Newton step lowered the residual" if not p.accepted else
                   f"not stationary after polish (ratio {p.check.ratio:.3g})"
                   if not p.check.stationary else
                   f"saddle (growth rate {p.max_growth:.2g})"
                   if not p.max_growth <= polish.growth_tol
                   else _implausible(field, ov, p.overlaps, polish.trust))
            attempts.append((t, check.ratio, p.check.ratio, p.max_growth, why or "accepted"))
            if not why:
                ov, max_growth = p.overlaps, p.max_growth
                polished_at.append(t)
                ts_all.append(np.asarray([t]))
                traj.append(jax.tree.map(lambda x: x[None], ov))
                horizon = min(t + t_first, t_max)
    trajectory = jax.tree.map(lambda *xs: jnp.concatenate(xs), *traj)
    return FixedPoint(overlaps=ov, t=t, check=check, ts=jnp.asarray(np.concatenate(ts_all)),
                      trajectory=trajectory, num_steps=steps, polished_at=tuple(polished_at),
                      max_growth=max_growth, polish_attempts=tuple(attempts))


def _implausible(field: AbstractField, old: Overlaps, new: Overlaps, trust: float) -> str:
    """Why `new` is not a fixed point the flow from `old` can plausibly reach ("" if it is;
    see [`find_fixed_point`][]): a bounded move and, for gradient flow, no risk increase (risks
    on the field's own nodes)."""
    a = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(old)])
    b = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(new)])
    move, radius = float(np.max(np.abs(b - a))), trust * max(1.0, float(np.max(np.abs(a))))
    if not move <= radius:
        return f"moved {move:.3g} > trust radius {radius:.3g}"
    if field.sgd_noise:
        return ""
    risk = eqx.filter_jit(lambda f, o: population_risk(f.model, o, f.nodes, manifold=True)[0])
    r_old, r_new = float(risk(field, old)), float(risk(field, new))
    if r_new > r_old + 1e-12 * abs(r_old):
        return f"risk would rise ({r_old:.6g} -> {r_new:.6g}) under gradient flow"
    return ""


class Polish(eqx.Module):
    """The outcome of [`newton_polish`][]: the polished state, its check, Newton iterations
    taken, whether any step was accepted, and `max_growth`, the largest real part of the
    eigenvalues of the reduced Jacobian at the result (> 0: a saddle, unstable)."""

    overlaps: Overlaps
    check: Stationarity
    iterations: int = eqx.field(static=True)
    accepted: bool = eqx.field(static=True)
    max_growth: float = eqx.field(static=True)


def newton_polish(field: AbstractField, ov: Overlaps, *,
                  test: StationarityTest = StationarityTest(), iterations: int = 8,
                  rcond: float = 1e-9) -> Polish:
    """Damped Newton iterations on the stationarity equations of the manifold ODE, in the
    reduced unknowns `x = (m, n, s, b)` with the key overlaps orthogonal to the teacher,
    `r = q − m mᵀ`, held at their current value (`q = m mᵀ + r`).

    Why reduced: near a fixed point the orthogonal key overlaps `r` have already decayed
    (typically to ~0, the boundary of the PSD cone, where the field depends on `r^{1/2}` and
    its Jacobian blows up), while the slow, creeping directions (key norms along the teacher,
    biases, values) are exactly what integration struggles with. The Jacobian is taken by
    forward-mode autodiff of the same vector field; steps solve the residual scaled by the
    stationarity tolerance `1/(z·err + atol)` in the least-squares sense (`lstsq`, so the flat
    directions, e.g. a common shift of the Bayes-softmax biases, are left alone), with
    backtracking until the scaled residual decreases.

    **Returns:** a [`Polish`][]; the state is only replaced by steps that lower the scaled
    residual. Check the result with [`stationarity`][] (the `q` components are not part of the
    reduced system; a short integration settles them).
    """
    H, F = ov.H, ov.F
    iu = np.triu_indices(H)
    ov = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov)
    r = psd_part(ov.r)

    def unpack(x):
        i = H * F
        m = x[:i].reshape(H, F)
        n = x[i:i + H]
        su = x[i + H:i + H + len(iu[0])]
        b = x[i + H + len(iu[0]):]
        s = jnp.zeros((H, H), x.dtype).at[iu].set(su)
        s = s + s.T - jnp.diag(jnp.diag(s))
        return Overlaps.manifold(m=m, q=m @ m.T + r, n=n, s=s, b=b)

    def pack(o):
        return jnp.concatenate([o.m.ravel(), o.n, o.s[iu], o.b])

    check = stationarity(field, ov, test)
    scale = 1.0 / (test.z * np.abs(np.asarray(pack(check.err))) + test.atol)
    res = eqx.filter_jit(lambda f, x: pack(f(0.0, unpack(x))))
    jac = eqx.filter_jit(lambda f, x: jax.jacfwd(lambda y: pack(f(0.0, unpack(y))))(x))
    x = np.asarray(pack(ov))
    fx = np.asarray(res(field, jnp.asarray(x))) * scale
    best = float(np.max(np.abs(fx)))
    accepted, it = False, 0
    for it in range(1, iterations + 1):  # noqa: B007 (the count is reported)
        J = np.asarray(jac(field, jnp.asarray(x))) * scale[:, None]
        if not np.all(np.isfinite(J)):
            break
        step = np.linalg.lstsq(J, -fx, rcond=rcond)[0]
        alpha, improved = 1.0, False
        while alpha > 1e-3:
            x_new = x + alpha * step
            f_new = np.asarray(res(field, jnp.asarray(x_new))) * scale
            val = float(np.max(np.abs(f_new))) if np.all(np.isfinite(f_new)) else np.inf
            if val < best:
                x, fx, best, improved = x_new, f_new, val, True
                break
            alpha *= 0.5
        if not improved:
            break
        accepted = True
        if best <= 1e-3:
            break
    out = unpack(jnp.asarray(x)) if accepted else ov
    J = np.asarray(jac(field, jnp.asarray(x)))
    growth = (float(np.max(np.linalg.eigvals(J).real)) if np.all(np.isfinite(J))
              else float("inf"))
    return Polish(overlaps=out, check=stationarity(field, out, test),
                  iterations=it, accepted=accepted, max_growth=growth)
