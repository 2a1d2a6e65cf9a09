"""Hyperparameters fitted to an observed risk curve by least squares through the ODE or the
SDE ensemble's mean (`headflow fit`, `docs/differentiable.md`)."""

from __future__ import annotations

from typing import TypeAlias

import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from headflow.dynamics import Config, ConfigError, HeadflowError
from headflow.dynamics.ode import LearningCurve, curve_from_config, differentiable_keys
from headflow.dynamics.sde import SDECurve, sde_curve_from_config

from ._constants import MODELS as MODELS  # light: shown by `--help`

Curve: TypeAlias = LearningCurve | SDECurve
"""The differentiable curves a fit runs on."""


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted `values` and their standard errors `se` (name → float), the residual sum of
    squares `rss`, its degrees of freedom `dof`, the observed and fitted curves on `t`, and
    whether the solver converged (`converged`, `steps`)."""

    values: dict[str, float]
    se: dict[str, float]
    start: dict[str, float]
    rss: float
    dof: int
    t: np.ndarray
    observed: np.ndarray
    fitted: np.ndarray
    converged: bool
    steps: int

    @property
    def residual_rms(self) -> float:
        return float(np.sqrt(self.rss / len(self.t)))


def jacobian_and_curve(y: dict, curve: Curve
                       ) -> tuple[dict, jax.Array]:
    """`(∂ curve/∂ y, curve(y))`: the Jacobian in forward mode (one tangent solve per parameter
    of `y`; the curve must be built with the `"forward"` adjoint), leaves `(T,)` per name."""
    def twice(y):
        r = curve(y)
        return r, r
    return jax.jacfwd(twice, has_aux=True)(y)


@eqx.filter_custom_jvp
def materialized(y: dict, curve: Curve) -> jax.Array:
    """`curve(y)`, whose JVP first forms the Jacobian ([`jacobian_and_curve`][]) and then
    applies it to the tangent. A linearization (`jax.linearize`, which optimistix's
    Levenberg–Marquardt takes of the residuals) then keeps the `(T, p)` Jacobian and nothing
    else; through the plain curve it keeps the intermediates of the risk at every save time
    and path: 3.9 GB for 4 SDE paths of the demo config, 31 GB asked for at 32."""
    return curve(y)


@materialized.def_jvp
def _materialized_jvp(primals, tangents):
    y, curve = primals
    ty, _ = tangents                      # the curve's own arrays are not differentiated
    jac, out = jacobian_and_curve(y, curve)
    t_out = jnp.zeros_like(out)
    for name, t in (ty or {}).items():
        if t is not None:
            t_out = t_out + jac[name] * t
    return out, t_out


def check_names(names: Sequence[str], params: Sequence[str]) -> list[str]:
    """The parameter names, checked: scalar keys of `params` (the config's differentiable
    parameters, [`headflow.dynamics.ode.differentiable_keys`][]; one-line
    [`headflow.dynamics.ConfigError`][] otherwise)."""
    names = list(names)
    bad = [n for n in names if n not in params or "schedule" in n]
    if bad or not names or len(set(names)) != len(names):
        scalar = [p for p in params if "schedule" not in p]
        raise ConfigError(f"--params {','.join(bad or names)}: choose distinct keys among "
                          f"{', '.join(scalar)}")
    return names


def fit_curve(cfg: Config, t: np.ndarray, risk: np.ndarray, names: Sequence[str], *,
              model: str = "ode", paths: int | None = None, max_steps: int = 100) -> Fit:
    """Least squares `min Σ_i (R_θ(t_i) − risk_i)²` over the parameters `names` (scalar keys
    of [`headflow.dynamics.ode.differentiable_keys`][]; the config gives the start and every other
    value), with optimistix's Levenberg–Marquardt on the forward-mode Jacobian of the
    `model`'s curve (one of [`MODELS`][]; `paths`: the SDE's paths, default `[sde] paths`).

    Standard errors from the Gauss–Newton curvature at the optimum: with the Jacobian `J` of
    the residuals, `Cov θ = s² (JᵀJ)⁻¹`, `s² = RSS/(n − p)`: the usual least-squares errors,
    which treat the residuals as independent with a common variance.
    """
    if model not in MODELS:
        raise ConfigError(f"--model {model}: choose one of {', '.join(MODELS)}")
    names = check_names(names, differentiable_keys(cfg))
    t = np.asarray(t, dtype=np.float64)
    risk = np.asarray(risk, dtype=np.float64)
    if t.ndim != 1 or risk.shape != t.shape or len(t) < len(names) + 1:
        raise HeadflowError(f"the curve needs 1-D arrays t and risk of one length above the "
                            f"number of parameters (got t {t.shape}, risk {risk.shape})")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(risk)) and np.all(np.diff(t) > 0)
            and t[0] >= 0):
        raise HeadflowError("the curve: t must be finite, >= 0 and increasing, risk finite")
    grid = t if t[0] == 0 else np.concatenate([[0.0], t])
    skip = len(grid) - len(t)
    cfg = cfg.replace(**{"training.t_max": float(t[-1])})
    curve: Curve
    if model == "sde":
        curve = sde_curve_from_config(cfg, times=grid, paths=paths, adjoint="forward")
    else:
        curve = curve_from_config(cfg, times=grid, adjoint="forward")

    def strong(values):
        # strong-typed leaves: the start and the solver's answer share one compiled program
        return {n: jnp.asarray(v, dtype=jnp.result_type(float)) for n, v in values.items()
                if n in names}

    start = strong(curve.defaults())
    target = jnp.asarray(risk)

    def residuals(y, c):
        return materialized(y, c)[skip:] - target

    @eqx.filter_jit
    def jacobian_and_residuals(y, c):
        # one program for the start's check and the optimum's curvature: compiling the curve
        # costs seconds, its p forward-mode tangents at one point a few solves
        jac, r = jacobian_and_curve(y, c)
        return {n: j[skip:] for n, j in jac.items()}, r[skip:] - target

    _, res0 = jacobian_and_residuals(start, curve)
    if not np.all(np.isfinite(np.asarray(res0))):
        hint = (" (an SDE path left the domain: lower sde.dt or raise sde.samples_drift)"
                if model == "sde" else "")
        raise HeadflowError(f"the {model.upper()} curve at the starting values is not "
                            f"finite{hint}")

    # a few parameters against many residuals: the Jacobian in forward mode (one tangent
    # solve per parameter) costs far less than reverse mode (one adjoint solve per residual)
    solver: optx.LevenbergMarquardt = optx.LevenbergMarquardt(rtol=1e-8, atol=1e-10)
    sol: optx.Solution = optx.least_squares(residuals, solver, start, args=curve,
                                            options={"jac": "fwd"}, max_steps=max_steps,
                                            throw=False)
    y = strong(sol.value)
    jac, res = jacobian_and_residuals(y, curve)
    res = np.asarray(res)
    J = np.stack([np.asarray(jac[n]).reshape(-1) for n in names], axis=1)     # (n, p)
    rss = float(np.sum(res**2))
    dof = len(t) - len(names)
    cov = rss / dof * np.linalg.pinv(J.T @ J)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return Fit(values={n: float(y[n]) for n in names}, se=dict(zip(names, map(float, se))),
               start={n: float(v) for n, v in start.items()}, rss=rss, dof=dof, t=t,
               observed=risk, fitted=risk + res,
               converged=bool(sol.result == optx.RESULTS.successful),
               steps=int(sol.stats["num_steps"]))
