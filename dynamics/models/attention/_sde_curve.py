"""The SDE ensemble's mean learning curve as a differentiable function of the hyperparameters
(`docs/differentiable.md#the-sde-ensemble-as-the-model`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Key

from ..._errors import HeadflowError, require_x64
from ..._model import AttentionBase
from ..._risk import population_risk, risk_nodes
from ...config import Config
from ...expectations import AbstractNodes
from ...ode import adjoint_of, risk_rule
from ...sde import OverlapSDE, sde_setup, solve_paths
from ._curve import param_defaults, substitute
from ._diffusion import flatten, unflatten
from ._start import random_start


class SDECurve(eqx.Module):
    """The mean population risk of an ensemble of SDE paths on the save grid, as a pure
    function of hyperparameters: `curve(params)` runs the paths of
    [`headflow.dynamics.sde.run_sde`][] (the same drift, diffusion, solver, step grid, initial
    draws and Brownian paths) with the step sizes, initial scales, prior amplitude and label noise
    that `params` gives ([`substitute`][]: any of [`PARAMS`][]; the config's values for the rest),
    and returns the mean over the paths of each path's risk at `ts`.

    The random numbers (initial draws, Brownian paths, the nodes of the fields and of the risk)
    are fixed at construction, so the curve is a smooth function of `params`, differentiable
    with the adjoint it was built with: `"forward"` (the default, `jax.jacfwd`: a few
    parameters against a whole curve, as `headflow fit --model sde` needs) or `"recursive"`
    (reverse mode). It is the model of an SGD seed mean when the escapes spread: the ODE is
    one path through the mean initial state, while the mean of SGD runs averages over where
    each run escapes.

    **Fields:** `sde` (at the config's values), `solver`, `nodes` (of the risk: `[sim]
    risk_samples` Monte Carlo nodes with `[ode] seed`, as SGD records it), `ts`, `grid` (the
    steps), `init_keys`, `bm_keys` (one per path), `start_model` (static floats, for the
    random starts), `base` (the config's values of the parameters), `adjoint`, `amplitude`,
    `dim`, `tol` (of the Brownian trees).
    """

    sde: OverlapSDE
    solver: dfx.AbstractSolver
    nodes: AbstractNodes
    ts: Float[Array, " T"]
    grid: Float[Array, " K"]
    init_keys: Key[Array, " N"]
    bm_keys: Key[Array, " N"]
    start_model: AttentionBase
    base: dict[str, Any]
    adjoint: dfx.AbstractAdjoint
    amplitude: float = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    tol: float = eqx.field(static=True)

    @classmethod
    def from_config(cls, cfg: Config, *, paths: int | None = None, dim: int | None = None,
                    times=None, adjoint: str = "forward") -> SDECurve:
        """**Arguments:** `cfg` (its `[model]`, `[prior]`, `[training]`, `[ode]` nodes, `[sde]`
        and `[output]` grid, or `times`), `paths` (default `[sde] paths`), `dim` (default
        `[sim] dim`), `adjoint` (`"forward"` or `"recursive"`,
        [`headflow.dynamics.ode.ADJOINTS`][]; the SDE's fixed steps have no continuous adjoint).

        **Raises:** [`headflow.dynamics.HeadflowError`][] for `paths < 1`, a dimension too small
        for the teacher, or the backsolve adjoint."""
        require_x64("the SDE learning curve")
        if adjoint == "backsolve":
            raise HeadflowError("SDECurve: adjoint 'backsolve' needs a continuous adjoint; "
                                "use 'forward' or 'recursive'")
        s = sde_setup(cfg, dim=dim, paths=paths, times=times)
        return cls(sde=s.sde, solver=s.solver, nodes=risk_nodes(s.model, risk_rule(cfg)),
                   ts=jnp.asarray(s.times), grid=jnp.asarray(s.grid), init_keys=s.init_keys,
                   bm_keys=s.bm_keys, start_model=s.model,
                   base=param_defaults(cfg, s.sde.drift.steps), adjoint=adjoint_of(adjoint),
                   amplitude=float(cfg.prior.amplitude), dim=s.dim, tol=s.tol)

    def defaults(self) -> dict[str, Array]:
        """The config's values of every parameter it has ([`param_defaults`][])."""
        return {k: jnp.asarray(v) for k, v in self.base.items()}

    def paths(self, params: Mapping[str, ArrayLike]) -> Float[Array, "N T"]:
        """Each path's population risk at `ts` (NaN where a path is not finite)."""
        sde = self.sde
        model, steps, p = substitute(params, self.base, sde.drift.model, sde.drift.steps,
                                     self.amplitude)
        sde = eqx.tree_at(lambda s: (s.drift.model, s.drift.steps, s.diffusion.model,
                                     s.diffusion.steps), sde, (model, steps, model, steps))

        def start(key):
            return flatten(random_start(self.start_model, key, self.dim,
                                        key_std=p["training.init_key_std"],
                                        value_std=p["training.init_value_std"],
                                        bias=p["training.init_bias"]))

        y0 = jax.vmap(start)(self.init_keys)
        ys = solve_paths(sde, self.solver, y0, self.bm_keys, self.ts, self.grid, self.tol,
                         self.adjoint)
        H, F = model.H, model.F

        def risk(y):
            return population_risk(model, unflatten(y, H, F), self.nodes, manifold=False)[0]

        flat = ys.reshape(-1, ys.shape[-1])
        r = jax.lax.map(risk, flat, batch_size=8).reshape(ys.shape[:2])
        return jnp.where(jnp.all(jnp.isfinite(ys), axis=-1), r, jnp.nan)

    def __call__(self, params: Mapping[str, ArrayLike]) -> Float[Array, " T"]:
        """The mean over the paths of the population risk at `ts` (NaN if any path is not
        finite)."""
        return jnp.mean(self.paths(params), axis=0)

