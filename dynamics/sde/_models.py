"""The SDE of a model of the family (`docs/models.md#finite-d-the-sde`): the drift of the
model's ODE and the covariance of the same per-sample increments
([`headflow.dynamics.models.sample_increment`][]) at fixed nodes of all fields, run by the generic
[`headflow.dynamics.sde.run_sde`][]."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import Partial
from jaxtyping import Array, Float, Key

from .._errors import HeadflowError, require_x64
from .._steps import StepSizes
from ..config import Config
from ..expectations import (
    AbstractExpectation,
    AbstractNodes,
    MonteCarlo,
)
from ..fields import AbstractField, exact_backend, model_nodes, sample_fields
from ..models._base import GramState, ModelBase
from ..models._params import CurvePoint
from ..models._increment import sample_increment
from ..ode import adjoint_of, model_field, named_start, traced_values
from ..ode._models import as_float64, check_curve_params
from ..sharding import map_batched
from ._diffusion import AbstractDiffusion, centred_factor
from ._run import _power_of_two, sde_setup
from ._solve import AbstractBrownian, OverlapSDE, solve_paths


class ModelDiffusion(AbstractDiffusion):
    """The diffusion of a model's SDE, `Σ = Cov[U]/B`, from the per-sample increments at fixed
    nodes of all fields (common random numbers: a smooth function of the state).

    The SDE's coordinates ([`flatten`][]) are the upper triangle of the Gram matrix (the
    teacher block included: its drift and noise are zero, and it differs between paths drawn
    at finite D) and the scalar parameters.
    """

    model: ModelBase
    steps: StepSizes
    nodes: AbstractNodes
    template: GramState
    sgd_noise: bool = eqx.field(static=True, default=True)

    samples: int = eqx.field(static=True, default=0)
    """The node count of the rule the diffusion was built on (reported by `run_sde`)."""

    @classmethod
    def build(cls, model: ModelBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True) -> ModelDiffusion:
        return cls(model=model, steps=steps, nodes=model_nodes(model, backend),
                   template=model.limit_state(), sgd_noise=sgd_noise,
                   samples=int(backend.samples))

    def kurtosis(self, state: GramState) -> Float[Array, ""]:
        """The largest kurtosis `E[(U − Ū)⁴]/Var(U)²` over the SDE's coordinates whose
        increments vary at `state` (3 for Gaussian increments)."""
        U = self.increments(state)
        w = self.nodes.w[:, None]
        c = U - jnp.sum(w * U, axis=0)[None, :]
        var = jnp.sum(w * c**2, axis=0)
        m4 = jnp.sum(w * c**4, axis=0)
        live = var > 1e-12 * jnp.max(var)
        return jnp.max(jnp.where(live, m4 / jnp.where(live, var, 1.0) ** 2, 0.0))

    @property
    def size(self) -> int:
        P = self.model.n_rows
        return P * (P + 1) // 2 + sum(int(np.size(v)) for v in self.template.params.values())

    @property
    def control_size(self) -> int:
        return self.nodes.size

    def flatten(self, state: GramState) -> Float[Array, " p"]:
        i, j = np.triu_indices(self.model.n_rows)
        params = [jnp.ravel(state.params[k]) for k in sorted(self.template.params)]
        return jnp.concatenate([state.gram[i, j], *params])

    def unflatten(self, y: Float[Array, " p"]) -> GramState:
        P = self.model.n_rows
        i, j = np.triu_indices(P)
        k = len(i)
        upper = jnp.zeros((P, P), y.dtype).at[i, j].set(y[:k])
        params = {}
        for name in sorted(self.template.params):
            n = int(np.size(self.template.params[name]))
            params[name] = y[k:k + n].reshape(np.shape(self.template.params[name]))
            k += n
        return GramState(gram=upper + jnp.triu(upper, 1).T, params=params)

    def gram(self, y: Float[Array, " p"]) -> Float[Array, "P P"]:
        return self.unflatten(y).gram

    def increments(self, state: GramState) -> Float[Array, "n p"]:
        P = self.model.n_rows
        return jax.vmap(lambda x: self.flatten(sample_increment(
            self.model, self.steps, state, sample_fields(state, x), x[P],
            sgd_noise=self.sgd_noise)))(self.nodes.x)

    def factor(self, state: GramState) -> Float[Array, "p k"]:
        U = self.increments(state)
        return centred_factor(U[:, None, :], self.nodes.w[:, None]) / jnp.sqrt(
            float(self.steps.batch))


PILOT_SAMPLES = 1 << 14
"""Monte Carlo nodes of the pilot that measures the increments' kurtosis."""


def noise_rule(model: ModelBase, cfg: Config, steps: StepSizes) -> AbstractExpectation:
    """The nodes of a model's diffusion when `[sde] samples_noise` is not set: for a
    polynomial model under `[ode] expectation = "exact"`, the Gauss–Hermite rule that makes
    the covariance of the increments exact ([`headflow.dynamics.fields.exact_backend`][]);
    otherwise Monte Carlo nodes sized for `[sde] error_target` `τ` from the increments'
    kurtosis `κ` measured at the start (a pilot of `PILOT_SAMPLES` nodes): the relative error
    of a Monte Carlo variance over n nodes is `√((κ − 1)/n)` and the paths' spread goes with
    its square root, so `n = (κ − 1)/(4τ²)` (the Gaussian `κ = 3` gives `1/(2τ²)`), rounded
    up to a power of two."""
    if cfg.ode.expectation == "exact":
        exact = exact_backend(model, "diffusion")
        if exact is not None:
            return exact
    start = named_start(cfg, model)
    start = model.limit_state() if start is None else start
    pilot = ModelDiffusion.build(model, steps, MonteCarlo(samples=PILOT_SAMPLES,
                                                          seed=cfg.ode.seed + 1))
    kappa = float(eqx.filter_jit(type(pilot).kurtosis)(pilot, as_float64(start)))
    n = (max(kappa, 1.0) - 1.0) / (4.0 * cfg.sde.error_target ** 2)
    return MonteCarlo(samples=_power_of_two(n), seed=cfg.ode.seed)


def model_sde_terms(model: ModelBase, cfg: Config, drift_backend: AbstractExpectation | None,
                    noise_backend: AbstractExpectation | None
                    ) -> tuple[AbstractField, ModelDiffusion]:
    """The drift of the model's ODE (`[ode]`: closed forms, or `drift_backend`'s nodes) with its
    `η²` terms, and the diffusion on `noise_backend`'s nodes of all fields (None: those of
    [`noise_rule`][])."""
    drift = model_field(cfg, model, drift_backend, sgd_noise=True)
    steps = traced_values(StepSizes.from_config(cfg.training))
    if noise_backend is None:
        noise_backend = noise_rule(model, cfg, steps)
    diffusion = ModelDiffusion.build(traced_values(model), steps, noise_backend)
    return drift, diffusion


def _fixed_start(state: GramState, key: Any, dim: Any) -> GramState:
    del key, dim
    return state


def model_start_sampler(model: ModelBase, cfg: Config) -> Partial:
    """A pytree callable `sample(key, dim)`: the start of every path that `[ode] init`
    names, else one random initialization at `dim` (exact in law, as SGD starts)."""
    named = named_start(cfg, model)
    if named is not None:               # `[ode] init` names the start: every path from there
        return Partial(_fixed_start, named)
    return Partial(type(model).initial_state, model)


class FamilySDEStart(eqx.Module):
    """The start of every path of a family model's SDE curve: the state `[ode] init` names
    (`named`), else one random initialization at D of the model the curve substituted."""

    named: GramState | None = None

    def __call__(self, model: ModelBase, key: Any, dim: int) -> GramState:
        return model.initial_state(key, dim) if self.named is None else self.named


class SDECurve(eqx.Module):
    """The mean risk over an ensemble of SDE paths on the save grid, as a pure, differentiable
    function of a model's hyperparameters (the SDE counterpart of
    [`headflow.dynamics.ode.LearningCurve`][], for every model): `curve(params)` runs the
    paths of [`headflow.dynamics.sde.run_sde`][] (the same drift, diffusion, solver, step grid,
    initial draws and Brownian paths) with `params` substituted through the model's
    hyperparameters in the drift, the diffusion and the start, and returns the mean over the
    paths of each path's risk at `ts`.

    Every random number (initial draws, Brownian paths, the nodes of the fields and of the
    risk) is fixed at construction, so the curve is smooth in `params`, differentiable with
    the adjoint it was built with: `"forward"` (the default, `jax.jacfwd`: a few parameters
    against a whole curve, as `headflow fit --model sde` needs) or `"recursive"` (reverse
    mode). It is the model of an SGD seed mean when the escapes spread: the ODE is one path
    through the mean initial state, while the mean of SGD runs averages over where each run
    escapes."""

    sde: OverlapSDE
    start: Any
    risk: Any
    solver: Any
    ts: Float[Array, " T"]
    grid: Float[Array, " K"]
    init_keys: Key[Array, " N"]
    bm_keys: Key[Array, " N"]
    base: dict[str, Array]
    adjoint: Any
    hyper: tuple = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    brownian: AbstractBrownian

    @classmethod
    def from_config(cls, cfg: Config, *, paths: int | None = None, dim: int | None = None,
                    times=None, adjoint: str = "forward") -> SDECurve:
        """`paths` (default `[sde] paths`), `dim` (default `[sim] dim`), `times` (default the
        `[output]` grid), `adjoint` (`"forward"` or `"recursive"`; the SDE's fixed steps have
        no continuous adjoint)."""

        require_x64("the SDE learning curve")
        if adjoint == "backsolve":
            raise HeadflowError("the SDE learning curve: adjoint 'backsolve' needs a continuous "
                                "adjoint; use 'forward' or 'recursive'")
        s = sde_setup(cfg, dim=dim, paths=paths, times=times)
        model, drift = s.model, s.sde.drift
        start = model.curve_start(cfg, sde=True)
        point = CurvePoint(field=drift, start=start)
        hyper = tuple(model.hyperparameters(cfg, drift.steps))
        base = {h.key: jnp.asarray(h.get(point), jnp.float64) for h in hyper}
        return cls(sde=s.sde, start=start, risk=model.curve_risk(cfg, sde=True),
                   solver=s.solver, ts=jnp.asarray(s.times), grid=jnp.asarray(s.grid),
                   init_keys=s.init_keys, bm_keys=s.bm_keys, base=base,
                   adjoint=adjoint_of(adjoint), hyper=hyper, dim=s.dim, brownian=s.brownian)

    @property
    def keys(self) -> tuple[str, ...]:
        """The differentiable parameters."""
        return tuple(h.key for h in self.hyper)

    def defaults(self) -> dict[str, Array]:
        """The config's value of every differentiable parameter."""
        return dict(self.base)

    def paths(self, params) -> Float[Array, "N T"]:
        """Each path's risk at `ts` (NaN where a path is not finite)."""
        check_curve_params(params, self.keys, "SDE learning curve")
        drift = CurvePoint(field=self.sde.drift, start=self.start)
        diffusion = CurvePoint(field=self.sde.diffusion, start=self.start)
        for h in self.hyper:
            if h.key in params:
                value = jnp.asarray(params[h.key], jnp.float64)
                drift, diffusion = h.set(drift, value), h.set(diffusion, value)
        sde = eqx.tree_at(lambda s: (s.drift, s.diffusion), self.sde,
                          (drift.field, diffusion.field))
        diff, model = diffusion.field, diffusion.model
        y0 = jax.vmap(lambda k: diff.flatten(diffusion.start(model, k, self.dim)))(
            self.init_keys)
        ys = solve_paths(sde, self.solver, y0, self.bm_keys, self.ts, self.grid, self.brownian,
                         self.adjoint)
        flat = ys.reshape(-1, ys.shape[-1])
        r = map_batched(lambda y: self.risk(model, diff.unflatten(y)), flat,
                        8).reshape(ys.shape[:2])
        return jnp.where(jnp.all(jnp.isfinite(ys), axis=-1), r, jnp.nan)

    def __call__(self, params) -> Float[Array, " T"]:
        """The mean over the paths of the risk at `ts` (NaN if any path is not finite)."""
        return jnp.mean(self.paths(params), axis=0)


def sde_curve_from_config(cfg: Config, **options: Any) -> SDECurve:
    """The SDE ensemble's mean learning curve of a config (`options`: `paths`, `dim`, `times`,
    `adjoint`; [`SDECurve.from_config`][])."""
    return SDECurve.from_config(cfg, **options)
