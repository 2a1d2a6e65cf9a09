"""Linear stability of the unspecialized phase: the tangent-linear equation of the head
differences along the symmetric trajectory (`docs/phases.md`)."""

from __future__ import annotations

from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import HeadflowError
from .._jit import jit_by_structure
from .._stop import check_stop
from ..fields import AbstractField
from .._model import AttentionBase
from ..ode import NOT_DIFFERENTIATED, Integrator, solve
from ..sharding import map_batched
from ._modes import HeadModes
from ._symmetric import flatten, unflatten
from ._units import UnitModes

TANGENT_INTEGRATOR = Integrator.adaptive("tsit5", rtol=1e-7, atol=1e-9, max_steps=20000,
                                         blowup=None)
"""The default integrator of [`linear_stability`][]."""


@jit_by_structure
def restricted_jacobian(field: AbstractField, ov: Any, basis: Float[Array, "N k"],
                        modes: Any = None) -> Float[Array, "k k"]:
    """`Uᵀ J U` with `J` the Jacobian of the right-hand side at `ov` (forward-mode autodiff,
    one JVP per column of `U`), in the coordinates of `modes` ([`HeadModes`][] or
    [`UnitModes`][]; default: the attention model's manifold coordinates). Compiled once per
    structure (`jit_by_structure`)."""
    if modes is None:
        H, F = ov.H, ov.F
        flat, unflat = flatten, lambda v: unflatten(v, H, F)
        ov = ov.on_manifold()
    else:
        flat, unflat = modes.flatten, modes.unflatten
    f = lambda o: flat(field(0.0, o))                                 # noqa: E731
    _, f_lin = jax.linearize(f, ov)
    cols = jax.vmap(lambda v: f_lin(unflat(v)))(basis.T)               # (k, N)
    return basis.T @ cols.T


def growth_matrix(field: AbstractField, ov: Any, modes: Any) -> Float[Array, "mu mu"]:
    """`B`: the Jacobian on one standard-representation block (first Helmert contrast) of
    [`HeadModes`][], or on all unit differences of [`UnitModes`][]."""
    return restricted_jacobian(field, ov, modes.standard[0], modes)


def leading_mode(B: np.ndarray) -> tuple[float, np.ndarray, complex]:
    """`(max Re eig B, its eigenvector (real part, unit norm, largest entry positive), the
    eigenvalue)`."""
    lam, vec = np.linalg.eig(np.asarray(B))
    i = int(np.argmax(lam.real))
    v = vec[:, i].real
    if np.linalg.norm(v) == 0:
        v = vec[:, i].imag
    v = v / np.linalg.norm(v)
    v = v * np.sign(v[np.argmax(np.abs(v))])
    return float(lam[i].real), v, complex(lam[i])


class StabilityResult(eqx.Module):
    """The symmetric trajectory and the tangent-linear propagator of head differences on it.

    - `t (T)`; `symmetric`: the symmetric state (leaves `(T, ...)`);
    - `propagator (T, μ, μ)`: `Φ(t)` with `dΦ/dt = B(t) Φ`, `Φ(0) = I`;
    - `growth_rate (T)`: `λ(t) = max Re eig B(t)`; `eigenvalue (T)` (complex);
      `eigenvector (T, μ)` in the coordinates `labels`;
    - `log_growth (T)`: `∫_0^t λ` (trapezoid on the save grid);
    - `other_rate (T)`: the largest growth rate among the head-difference perturbations *outside*
      the standard representation (NaN where not computed; only exists for H ≥ 4).
    """

    t: Float[Array, " T"]
    symmetric: Any
    propagator: Float[Array, "T mu mu"]
    growth_rate: Float[Array, " T"]
    eigenvalue: Array
    eigenvector: Float[Array, "T mu"]
    log_growth: Float[Array, " T"]
    other_rate: Float[Array, " T"]
    labels: tuple[str, ...] = eqx.field(static=True)

    def finite_time_rate(self) -> np.ndarray:
        """`d/dt ln σ_max(Φ(t))`: the growth rate of the most amplified perturbation
        (finite differences on the save grid; 0 at t = 0)."""
        smax = np.linalg.svd(np.asarray(self.propagator), compute_uv=False)[:, 0]
        return np.gradient(np.log(smax), np.asarray(self.t))


class _TLState(eqx.Module):
    ov: Any
    phi: Float[Array, "mu mu"]


class _TangentLinear(eqx.Module):
    field: AbstractField
    modes: Any

    def __call__(self, t, y: _TLState, args=None) -> _TLState:
        m = self.modes
        basis = m.standard[0]
        ov = m.average(y.ov)
        f = lambda o: self.field(t, o)                                 # noqa: E731
        d_ov, f_lin = jax.linearize(f, ov)
        cols = jax.vmap(lambda c: m.flatten(f_lin(m.unflatten(basis @ c))),
                        in_axes=1, out_axes=1)(y.phi)                  # (N, μ)
        return _TLState(ov=m.average(d_ov), phi=basis.T @ cols)


def default_modes(model: Any) -> Any:
    """The perturbation bases of `model`: [`HeadModes`][] for the attention model,
    [`UnitModes`][] for a model of the family (`GramState`)."""

    if isinstance(model, AttentionBase):
        return HeadModes.build(model)
    return UnitModes.build(model)


def linear_stability(field: AbstractField, ov0: Any, ts, *, modes: Any = None,
                     integrator: Integrator = TANGENT_INTEGRATOR,
                     other_every: int = 0) -> StabilityResult:
    """Integrate the symmetric trajectory from the symmetric projection of `ov0` together with
    the tangent-linear propagator of the head (or unit) differences, and the instantaneous
    growth rate along it.

    **Arguments:**

    - `field`: the manifold vector field (use [`equivariant_field`][] so that the symmetric
      subspace is exactly invariant and the Jacobian exactly block-diagonal).
    - `ov0`: the start (projected on the symmetric subspace); `ts` the save times.
    - `modes`: the perturbation bases (default: [`default_modes`][] of the field's model).
    - `integrator`: the diffrax settings.
    - `other_every`: compute the growth rate outside the standard representation at every
      `other_every`-th save time (0: never; only meaningful for H ≥ 4).

    **Returns:** a [`StabilityResult`][].

    **Raises:** [`HeadflowError`][] when the solver fails or the state becomes non-finite.
    """
    model = field.model
    modes = default_modes(model) if modes is None else modes
    ts = jnp.asarray(np.asarray(ts, dtype=np.float64))
    ov0 = modes.average(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0))
    y0 = _TLState(ov=ov0, phi=jnp.eye(modes.mu))
    sol = solve(dfx.ODETerm(_TangentLinear(field, modes)), y0, ts, integrator,
                adjoint=NOT_DIFFERENTIATED)
    ys = sol.ys
    assert ys is not None
    ok = bool(sol.result == dfx.RESULTS.successful)
    finite = bool(jnp.all(jnp.isfinite(ys.phi))) and all(
        bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(ys.ov))
    if not (ok and finite):
        check_stop()
        raise HeadflowError(f"the symmetric trajectory or its tangent-linear equation could not "
                            f"be integrated to t = {float(ts[-1]):.4g} (solver: "
                            f"{sol.result}); try a smaller training.lr or a shorter t_max")
    Bs = np.asarray(_jacobians(field, modes, ys.ov))
    rates, vecs, eigs = zip(*(leading_mode(B) for B in Bs))
    rates = np.asarray(rates)
    t_np = np.asarray(ts)
    log_growth = np.concatenate([[0.0], np.cumsum(0.5 * (rates[1:] + rates[:-1])
                                                   * np.diff(t_np))])
    other = np.full(len(t_np), np.nan)
    if other_every and isinstance(modes, HeadModes) and model.H >= 4:
        other_rate = _other_rate_fn(field, modes)
        for i in range(0, len(t_np), other_every):
            other[i] = other_rate(jax.tree.map(lambda x: x[i], ys.ov))
    return StabilityResult(t=ts, symmetric=ys.ov, propagator=ys.phi,
                           growth_rate=jnp.asarray(rates), eigenvalue=jnp.asarray(eigs),
                           eigenvector=jnp.asarray(np.stack(vecs)),
                           log_growth=jnp.asarray(log_growth), other_rate=jnp.asarray(other),
                           labels=modes.labels)


@eqx.filter_jit
def _jacobians(field, modes, ovs):
    return map_batched(lambda o: restricted_jacobian(field, o, modes.standard[0], modes), ovs,
                       4)


def _other_rate_fn(field: AbstractField, modes: HeadModes):
    """Largest growth rate on the head differences orthogonal to the standard representation."""
    U = np.asarray(modes.differences)
    S = np.concatenate(list(np.asarray(modes.standard)), axis=1)
    rest = U - S @ (S.T @ U)
    u, sv, _ = np.linalg.svd(rest, full_matrices=False)
    Q = jnp.asarray(u[:, sv > 1e-8])
    if Q.shape[1] == 0:
        return lambda ov: np.nan
    jac = eqx.filter_jit(restricted_jacobian)
    return lambda ov: float(np.max(np.linalg.eigvals(np.asarray(jac(field, ov, Q))).real))
