"""The SDE of a model of the family (`docs/models.md#finite-d-the-sde`): the drift of the
model's ODE and the covariance of the same per-sample increments
([`dynamics.models.sample_increment`][]) at fixed nodes of all fields, integrated by the
solvers of the attention model's SDE."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Key

from .._errors import HeadflowError
from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, AbstractNodes, MonteCarlo, get_expectation
from ..fields import model_nodes, sample_fields
from ..models import AbstractModel, GramState, sample_increment
from ..ode import model_field, risk_rule, states_risk, traced_values
from ._diffusion import AbstractDiffusion, centred_factor
from ._run import drift_samples
from ._solve import OverlapSDE, get_sde_solver, in_domain, step_grid


class ModelDiffusion(AbstractDiffusion):
    """The diffusion of a model's SDE, `Σ = Cov[U]/B`, from the per-sample increments at fixed
    nodes of all fields (common random numbers: a smooth function of the state).

    The SDE's coordinates ([`flatten`][]) are the upper triangle of the Gram matrix (the
    teacher block included: its drift and noise are zero, and it differs between paths drawn
    at finite D) and the scalar parameters.
    """

    model: AbstractModel
    steps: StepSizes
    nodes: AbstractNodes
    template: GramState
    sgd_noise: bool = eqx.field(static=True, default=True)

    @classmethod
    def build(cls, model: AbstractModel, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True) -> ModelDiffusion:
        return cls(model=model, steps=steps, nodes=model_nodes(model, backend),
                   template=model.limit_state(), sgd_noise=sgd_noise)

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

    def increments(self, state: GramState) -> Float[Array, "n p"]:
        P = self.model.n_rows
        return jax.vmap(lambda x: self.flatten(sample_increment(
            self.model, self.steps, state, sample_fields(state, x), x[P],
            sgd_noise=self.sgd_noise)))(self.nodes.x)

    def factor(self, state: GramState) -> Float[Array, "p k"]:
        U = self.increments(state)
        return centred_factor(U[:, None, :], self.nodes.w[:, None]) / jnp.sqrt(
            float(self.steps.batch))


def build_model_sde(cfg: Config, dim: int, model: AbstractModel | None = None) -> OverlapSDE:
    """A model's SDE at dimension `dim`: the drift of its ODE (`[ode]`: closed forms, or
    [`dynamics.sde.drift_samples`][] nodes) and the diffusion on `[sde] samples_noise` Monte
    Carlo nodes of all fields."""
    model = cfg.build_model() if model is None else model
    mt = traced_values(model)
    steps = traced_values(StepSizes.from_config(cfg.training))
    drift = model_field(cfg, model, get_expectation(cfg.ode.expectation, drift_samples(cfg),
                                                    seed=cfg.ode.seed)
                        if cfg.ode.expectation != "exact" else None,
                        sgd_noise=True)     # the SDE models SGD: its drift keeps the η² terms
    diffusion = ModelDiffusion.build(mt, steps, MonteCarlo(samples=cfg.sde.samples_noise,
                                                           seed=cfg.ode.seed))
    return OverlapSDE(drift=drift, diffusion=diffusion,
                      inv_sqrt_dim=jnp.asarray(1.0 / np.sqrt(dim), jnp.float64),
                      noise=cfg.sde.noise)


def model_domain(ys: Float[Array, "n T p"], diffusion: ModelDiffusion, *, tol: float = 1e-9
                 ) -> Bool[Array, "n T"]:
    """Whether each state is finite, below the blow-up level and a PSD Gram matrix
    ([`dynamics.sde.in_domain`][])."""
    return jax.vmap(jax.vmap(lambda y: in_domain(y, diffusion.unflatten(y).gram, tol)))(ys)


def run_model_sde(cfg: Config, *, dim: int | None, paths: int | None, progress: bool,
                  group: int | None):
    """`dynamics.sde.run_sde` for a model of the family: each path starts from its own random
    initialization at dimension `dim` (the same law as the SGD simulators')."""
    from ._run import SDEResult, path_keys, solve_groups

    model = cfg.build_model()
    D = cfg.sim.dim if dim is None else int(dim)
    N = cfg.sde.paths if paths is None else int(paths)
    if N < 1:
        raise HeadflowError(f"--paths {N}: must be >= 1")
    times = cfg.save_times()
    grid = step_grid(times, cfg.sde.dt)
    tol = float(np.min(np.diff(grid))) / 8.0
    sde = build_model_sde(cfg, D, model)
    diffusion = sde.diffusion
    assert isinstance(diffusion, ModelDiffusion)
    init_keys, bm_keys = path_keys(cfg.sde.seed, N)
    y0 = _initial(model, diffusion, init_keys, D)
    y, compile_s, run_s = solve_groups(sde, get_sde_solver(cfg.sde.solver), y0, bm_keys, times,
                                       grid, tol, group=group, progress=progress,
                                       desc=f"SDE D={D} x{N}")
    valid = model_domain(y, diffusion)
    ok = np.asarray(valid)
    first = np.where(ok.all(axis=1), np.nan, times[np.argmin(ok, axis=1)])
    states = jax.vmap(jax.vmap(diffusion.unflatten))(y)
    risk, err = states_risk(model, states, risk_rule(cfg))
    info = {"dim": D, "paths": N, "steps": int(len(grid) - 1), "dt": cfg.sde.dt,
            "solver": cfg.sde.solver, "noise": cfg.sde.noise,
            "drift": cfg.ode.expectation, "samples_noise": cfg.sde.samples_noise,
            **({} if cfg.ode.expectation == "exact" else {"samples_drift": drift_samples(cfg)}),
            "brownian_dim": sde.control_size, "seed": cfg.sde.seed,
            "first_group_s": round(compile_s, 3), "solve_s": round(run_s, 3)}
    return SDEResult(t=jnp.asarray(times), overlaps=states, risk=jnp.asarray(risk),
                     risk_err=jnp.asarray(err), valid=valid, first_invalid=jnp.asarray(first),
                     dim=D, info=info, model=model)


@eqx.filter_jit
def _initial(model: AbstractModel, diffusion: ModelDiffusion, keys: Key[Array, " n"], dim: int
             ) -> Float[Array, "n p"]:
    return jax.lax.map(lambda k: diffusion.flatten(model.initial_state(k, dim)), keys,
                       batch_size=8)
