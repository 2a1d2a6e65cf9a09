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

Near minima the explicit solver is held back by stiff directions while slow directions creep
(a slow manifold), so an optional acceleration can jump to the fixed point: a Newton polish
([`newton_polish`][], in reduced coordinates), and where that is refused on a slow manifold
(detected by the [`stiffness`][] ratio of the Jacobian) a pseudo-transient continuation
([`continuation`][]: linearized backward-Euler steps of growing length, Newton in the limit). A
result is accepted only under the conditions listed in [`find_fixed_point`][] (stationary, no
saddle, bounded move, no risk increase under gradient flow) and is always followed by a
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

from .._constants import STATIONARY_Z as STATIONARY_Z  # light: shown by `headflow --help`
from .._linalg import psd_part
from .._overlaps import ORDER_PARAMETERS, Overlaps
from .._risk import population_risk
from ..fields import AbstractField
from ..ode import Integrator, integrate

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


STIFFNESS = 100.0
"""A state is on a slow manifold when the stiffness ratio of the reduced Jacobian (largest over
smallest non-zero `|Re λ|`) is at least this: the explicit solver's step is held by the fast
modes while the state creeps along the slow ones."""

STEP_TRUST = 0.1
"""Largest move of one pseudo-transient step ([`continuation`][]), relative to
`max(1, max|state|)`."""


class NewtonPolish(eqx.Module):
    """The acceleration of [`find_fixed_point`][] (manifold fields): tried after every
    non-stationary chunk that ends after `t0 + after`. First a Newton polish
    ([`newton_polish`][]); where that is refused and the state is on a slow manifold (stiffness
    ratio of the reduced Jacobian `≥ stiffness`), the pseudo-transient continuation
    ([`continuation`][], `False`: off). A result is accepted under the conditions listed there
    (`growth_tol`: no eigenvalue of the reduced Jacobian with real part above it; `trust`:
    largest Newton move, `step_trust`: largest continuation step, both relative to
    `max(1, max|state|)`)."""

    after: float = 0.0
    growth_tol: float = GROWTH_TOL
    trust: float = TRUST_RADIUS
    stiffness: float = STIFFNESS
    continuation: bool = True
    step_trust: float = STEP_TRUST


class Stationarity(eqx.Module):
    """The stationarity check of one state.

    **Fields:** `rhs` and `err` (the right-hand side and its error, leafwise), `residual`
    (`max_i |RHS_i|`), `ratio` (`max_i |RHS_i| / (z·err_i + atol)`; ≤ 1 means stationary),
    `drift` (the measured drift in units of the field's error, `max_i |RHS_i| / err_i` over the
    components with `err_i > 0`: how many error bars the state still moves by; `ratio ≤ 1`
    needs `drift ≤ z` there), `stationary`, and the `test` used.
    """

    rhs: Overlaps
    err: Overlaps
    residual: float = eqx.field(static=True)
    ratio: float = eqx.field(static=True)
    stationary: bool = eqx.field(static=True)
    test: StationarityTest = StationarityTest()
    drift: float = eqx.field(static=True, default=float("nan"))

    def summary(self) -> dict[str, float | bool]:
        """JSON-able numbers: residual, ratio, drift, stationary, and per order parameter the
        largest |RHS| and its error bar."""
        out: dict[str, float | bool] = {"residual": self.residual, "ratio": self.ratio,
                                        "drift": self.drift,
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
    live = e > 0
    drift = float(np.max(f[live] / e[live])) if live.any() else float("nan")
    return Stationarity(rhs=rhs, err=err, residual=float(np.max(f)), ratio=ratio,
                        stationary=ratio <= 1.0, test=test, drift=drift)


class FixedPoint(eqx.Module):
    """A long-time state reached by integration.

    **Fields:** `overlaps` (the final state), `t` (the time reached), `check` (its
    [`Stationarity`][]), `stationary` (whether the check passed before `t_max`), the trajectory
    `ts` (T) and `trajectory` (overlaps with leaves `(T, ...)`) on the save grid of all chunks,
    the solver's `num_steps`, and `polished_at` (times where a Newton polish or a continuation
    replaced the state, see [`newton_polish`][], [`continuation`][]; the trajectory jumps
    there) with `max_growth` of the last one (largest real part of the reduced Jacobian's
    eigenvalues; `nan` without), and
    `polish_attempts`: `(t, method, ratio before, ratio after, growth rate, stiffness,
    outcome)` per attempt (`method`: `"newton"` or `"continuation"`).
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
    `t0 + polish.after` is followed by a Newton polish ([`newton_polish`][]). Where that is
    refused and the state is on a slow manifold (the [`stiffness`][] ratio of the reduced
    Jacobian is at least `polish.stiffness`), the pseudo-transient continuation
    ([`continuation`][]: implicit, L-stable steps that grow into Newton's method) runs from
    the integrated state instead. Either result is taken only if it passes the stationarity
    check, the reduced Jacobian there has no eigenvalue with real part above
    `polish.growth_tol` (no saddle), the move was bounded (Newton: no order parameter moved by
    more than `polish.trust · max(1, max|state|)`; continuation: no step moved by more than
    `polish.step_trust · max(1, max|state|)`), and, for gradient flow (no η² terms), the risk
    did not increase (the flow lowers the risk, so it can only reach fixed points below the
    current risk; without this, Newton may jump to another fixed point, e.g. softmax-1 with
    biases → +∞, i.e. plain softmax). Integration then resumes from it for a verification
    chunk of length `t_first`, and only the check after that chunk can end the search: every
    reported fixed point is a state the *integration* stays at.

    **Arguments:** `field`, `ov0`: the vector field and the start; `chunks`: the schedule;
    `integrator`: passed to [`headflow.dynamics.ode.integrate`][] per chunk; `test`: the
    stationarity tolerance; `polish`: the acceleration (None: off); `progress`: optional callable
    `progress(t, check)` called after each chunk.

    **Returns:** a [`FixedPoint`][]; `stationary` is False when `t_max` was reached first.

    **Raises:** what [`headflow.dynamics.ode.integrate`][] raises (divergence, `max_steps`).
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
            new, growth, tried = _accelerate(field, ov, check, test, polish)
            attempts.extend((t, *a) for a in tried)
            if new is not None:
                ov, max_growth = new, growth
                polished_at.append(t)
                ts_all.append(np.asarray([t]))
                traj.append(jax.tree.map(lambda x: x[None], ov))
                horizon = min(t + t_first, t_max)
    trajectory = jax.tree.map(lambda *xs: jnp.concatenate(xs), *traj)
    return FixedPoint(overlaps=ov, t=t, check=check, ts=jnp.asarray(np.concatenate(ts_all)),
                      trajectory=trajectory, num_steps=steps, polished_at=tuple(polished_at),
                      max_growth=max_growth, polish_attempts=tuple(attempts))


def _accelerate(field: AbstractField, ov: Overlaps, check: Stationarity,
                test: StationarityTest, polish: NewtonPolish
                ) -> tuple[Overlaps | None, float, list[tuple]]:
    """One acceleration attempt of [`find_fixed_point`][] from the integrated state `ov`: a
    Newton polish, then, where it is refused and the state is on a slow manifold, the
    pseudo-transient continuation. Returns the accepted state (None if none), the growth rate
    there, and per method tried `(method, ratio before, ratio after, growth rate, stiffness,
    outcome)`."""
    stiff = stiffness(field, ov)
    tried: list[tuple] = []
    p = newton_polish(field, ov, test=test)
    why = ("no Newton step lowered the residual" if not p.accepted
           else _refused(field, ov, p, polish, trust=polish.trust))
    tried.append(("newton", check.ratio, p.check.ratio, p.max_growth, stiff, why or "accepted"))
    if not why:
        return p.overlaps, p.max_growth, tried
    if not polish.continuation or not stiff >= polish.stiffness:
        return None, float("nan"), tried
    c = continuation(field, ov, test=test, step_trust=polish.step_trust)
    why = ("no pseudo-transient step was accepted" if not c.accepted
           else _refused(field, ov, c, polish, trust=None))
    tried.append(("continuation", check.ratio, c.check.ratio, c.max_growth, stiff,
                  why or "accepted"))
    return (c.overlaps, c.max_growth, tried) if not why else (None, float("nan"), tried)


def _refused(field: AbstractField, old: Overlaps, p: Polish, polish: NewtonPolish, *,
             trust: float | None) -> str:
    """Why the accelerated state `p` is refused ("" if it is accepted): not stationary, a
    saddle, or not plausibly reached by the flow from `old` ([`_implausible`][])."""
    if not p.check.stationary:
        return f"not stationary (ratio {p.check.ratio:.3g})"
    if not p.max_growth <= polish.growth_tol:
        return f"saddle (growth rate {p.max_growth:.2g})"
    return _implausible(field, old, p.overlaps, trust)


def _implausible(field: AbstractField, old: Overlaps, new: Overlaps,
                 trust: float | None) -> str:
    """Why `new` is not a fixed point the flow from `old` can plausibly reach ("" if it is;
    see [`find_fixed_point`][]): a bounded move (`trust`; None: the move was bounded step by
    step instead) and, for gradient flow, no risk increase (risks on the field's own nodes)."""
    if trust is not None:
        a = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(old)])
        b = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(new)])
        move, radius = float(np.max(np.abs(b - a))), trust * max(1.0, float(np.max(np.abs(a))))
        if not move <= radius:
            return f"moved {move:.3g} > trust radius {radius:.3g}"
    if field.sgd_noise:
        return ""
    r_old, r_new = float(_risk(field, old)), float(_risk(field, new))
    if r_new > r_old + 1e-12 * abs(r_old):
        return f"risk would rise ({r_old:.6g} -> {r_new:.6g}) under gradient flow"
    return ""


def _symmetric(u: Array, H: int) -> Array:
    iu = np.triu_indices(H)
    a = jnp.zeros((H, H), u.dtype).at[iu].set(u)
    return a + a.T - jnp.diag(jnp.diag(a))


def _pack(o: Overlaps, full: bool) -> Array:
    """The unknowns of a manifold state: `(m, n, s, b)` (reduced: `r = q − m mᵀ` held fixed)
    or, with `full`, `(m, q, n, s, b)` (upper triangles of the symmetric blocks)."""
    iu = np.triu_indices(o.H)
    parts = [o.m.ravel()] + ([o.q[iu]] if full else []) + [o.n, o.s[iu], o.b]
    return jnp.concatenate(parts)


def _unpack(x: Array, r: Array, full: bool) -> Overlaps:
    """Inverse of [`_pack`][]; `r` is the fixed `q − m mᵀ` of the reduced unknowns (its shape
    gives H; unused with `full`)."""
    H = r.shape[0]
    k = H * (H + 1) // 2
    F = (x.shape[0] - 2 * H - k - (k if full else 0)) // H
    m, i = x[:H * F].reshape(H, F), H * F
    if full:
        q, i = _symmetric(x[i:i + k], H), i + k
    else:
        q = m @ m.T + r
    n, s, b = x[i:i + H], _symmetric(x[i + H:i + H + k], H), x[i + H + k:]
    return Overlaps.manifold(m=m, q=q, n=n, s=s, b=b)


@eqx.filter_jit
def _residual(field: AbstractField, x: Array, r: Array, full: bool) -> Array:
    return _pack(field(0.0, _unpack(x, r, full)), full)


@eqx.filter_jit
def _jacobian(field: AbstractField, x: Array, r: Array, full: bool) -> Array:
    return jax.jacfwd(lambda y: _pack(field(0.0, _unpack(y, r, full)), full))(x)


@eqx.filter_jit
def _valid(x: Array, r: Array, rho) -> Array:
    return _pack(_unpack(x, r, True).nearest_valid(rho), True)


@eqx.filter_jit
def _risk(field: AbstractField, ov: Overlaps) -> Array:
    return population_risk(field.model, ov, field.nodes, manifold=True)[0]


def _reduced_spectrum(field: AbstractField, ov: Overlaps) -> np.ndarray:
    """Eigenvalues of the Jacobian of the field in the reduced unknowns `(m, n, s, b)` at `ov`
    (forward-mode autodiff; `r = q − m mᵀ` held at its PSD part)."""
    r = psd_part(jnp.asarray(ov.r, jnp.float64))
    J = np.asarray(_jacobian(field, _pack(ov, False), r, False))
    return np.linalg.eigvals(J) if np.all(np.isfinite(J)) else np.full(len(J), np.inf)


def stiffness(field: AbstractField, ov: Overlaps) -> float:
    """The stiffness ratio at `ov`: largest over smallest `|Re λ|` of the reduced Jacobian's
    eigenvalues ([`newton_polish`][]'s unknowns), leaving out exactly flat directions
    (`|Re λ| ≤ 1e-12 · max`, e.g. a common shift of the Bayes-softmax biases). A large ratio
    means a slow manifold: an explicit solver's step is bounded by `~1/max|Re λ|` while the
    state relaxes on the time scale `1/min|Re λ|`. `inf` where the Jacobian is not finite."""
    re = np.abs(_reduced_spectrum(field, ov).real)
    if not np.all(np.isfinite(re)):
        return float("inf")
    top = float(np.max(re))
    live = re[re > 1e-12 * max(top, 1e-300)]
    return top / float(np.min(live)) if live.size else 1.0


class Polish(eqx.Module):
    """The outcome of [`newton_polish`][] or [`continuation`][]: the state reached, its check,
    iterations taken, whether any step was accepted, and `max_growth`, the largest real part
    of the eigenvalues of the reduced Jacobian at the result (> 0: a saddle, unstable)."""

    overlaps: Overlaps
    check: Stationarity
    iterations: int = eqx.field(static=True)
    accepted: bool = eqx.field(static=True)
    max_growth: float = eqx.field(static=True)


def _growth(field: AbstractField, ov: Overlaps) -> float:
    return float(np.max(_reduced_spectrum(field, ov).real))


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
    ov = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov)
    r = psd_part(ov.r)
    check = stationarity(field, ov, test)
    scale = 1.0 / (test.z * np.abs(np.asarray(_pack(check.err, False))) + test.atol)
    x = np.asarray(_pack(ov, False))
    fx = np.asarray(_residual(field, jnp.asarray(x), r, False)) * scale
    best = float(np.max(np.abs(fx)))
    accepted, it = False, 0
    for it in range(1, iterations + 1):  # noqa: B007 (the count is reported)
        J = np.asarray(_jacobian(field, jnp.asarray(x), r, False)) * scale[:, None]
        if not np.all(np.isfinite(J)):
            break
        step = np.linalg.lstsq(J, -fx, rcond=rcond)[0]
        alpha, improved = 1.0, False
        while alpha > 1e-3:
            x_new = x + alpha * step
            f_new = np.asarray(_residual(field, jnp.asarray(x_new), r, False)) * scale
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
    out = _unpack(jnp.asarray(x), r, False) if accepted else ov
    return Polish(overlaps=out, check=stationarity(field, out, test),
                  iterations=it, accepted=accepted, max_growth=_growth(field, out))


def continuation(field: AbstractField, ov: Overlaps, *,
                 test: StationarityTest = StationarityTest(), iterations: int = 100,
                 dt0: float = 1.0, dt_max: float = 1e6,
                 step_trust: float = STEP_TRUST) -> Polish:
    """Pseudo-transient continuation from `ov` to a stationary state of the manifold ODE: the
    stiff (implicit) way along a slow manifold.

    Each step is one linearized backward-Euler step of the ODE in the unknowns
    `x = (m, q, n, s, b)`, `x ← x + (I/Δτ − J)⁻¹ f(x)`, with `J` the Jacobian of the field by
    forward-mode autodiff. Backward Euler is L-stable: the fast directions are damped at any
    `Δτ`, so the step is not held by them as an explicit solver's is, and the state moves
    along the slow manifold. `Δτ` starts at `dt0` and doubles after every accepted step (up
    to `dt_max`), so the iteration turns into Newton's method near a fixed point; a step is
    accepted when the field stays finite and the state moves by at most
    `step_trust · max(1, max|state|)`, else `Δτ` is divided by 4. It stops at the first state
    that passes [`stationarity`][] (the one criterion), after `iterations` steps, or when
    `Δτ < 1e-6`. Every step ends on a valid state: the orthogonal parts `q − m mᵀ` and
    `s − n nᵀ/ρ*` are projected back onto the PSD cone
    ([`headflow.dynamics.Overlaps.nearest_valid`][]; long-time states sit at its edge, and a free
    step would cross it).

    **Returns:** a [`Polish`][] (the last accepted state, its check and its growth rate).
    Whether to trust it is the caller's decision ([`find_fixed_point`][] requires it to be
    stationary, not a saddle, not of higher risk under gradient flow, and verifies it by
    integration).
    """
    ov = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov)
    r, rho = jnp.zeros_like(ov.q), field.model.rho
    x = np.asarray(_pack(ov, True))
    fx = np.asarray(_residual(field, jnp.asarray(x), r, True))
    dt, it, accepted = float(dt0), 0, False
    check = stationarity(field, ov, test)
    while it < iterations and not check.stationary and dt >= 1e-6 and np.all(np.isfinite(fx)):
        it += 1
        J = np.asarray(_jacobian(field, jnp.asarray(x), r, True))
        if not np.all(np.isfinite(J)):
            break
        radius = step_trust * max(1.0, float(np.max(np.abs(x))))
        while dt >= 1e-6:
            try:
                step = np.linalg.solve(np.eye(len(x)) / dt - J, fx)
            except np.linalg.LinAlgError:
                step = np.full_like(x, np.inf)
            if np.all(np.isfinite(step)) and float(np.max(np.abs(step))) <= radius:
                x_new = np.asarray(_valid(jnp.asarray(x + step), r, rho))
                f_new = np.asarray(_residual(field, jnp.asarray(x_new), r, True))
                if np.all(np.isfinite(f_new)):
                    break
            dt /= 4.0
        else:
            break
        x, fx, accepted = x_new, f_new, True
        check = stationarity(field, _unpack(jnp.asarray(x), r, True), test)
        dt = min(2.0 * dt, dt_max)
    out = _unpack(jnp.asarray(x), r, True) if accepted else ov
    return Polish(overlaps=out, check=stationarity(field, out, test), iterations=it,
                  accepted=accepted, max_growth=_growth(field, out))
