"""The SDE of a model of the family (`docs/models.md#finite-d-the-sde`): the drift of the
model's ODE and the covariance of the same per-sample increments
([`dynamics.models.sample_increment`][]) at fixed nodes of all fields, run by the generic
[`dynamics.sde.run_sde`][]."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import Partial
from jaxtyping import Array, Float

from ..hooks import sde_terms, start_sampler
from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, AbstractNodes
from ..fields import AbstractField, model_nodes, sample_fields
from ..models import AbstractModel, GramState, sample_increment
from ..ode import model_field, traced_values
from ._diffusion import AbstractDiffusion, centred_factor


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


@sde_terms.register(AbstractModel)
def _sde_terms(model: AbstractModel, cfg: Config, drift_backend: AbstractExpectation,
               noise_backend: AbstractExpectation) -> tuple[AbstractField, ModelDiffusion]:
    """The drift of the model's ODE (`[ode]`: closed forms, or `drift_backend`'s nodes) with its
    `η²` terms, and the diffusion on `noise_backend`'s nodes of all fields."""
    drift = model_field(cfg, model, drift_backend, sgd_noise=True)
    diffusion = ModelDiffusion.build(traced_values(model),
                                     traced_values(StepSizes.from_config(cfg.training)),
                                     noise_backend)
    return drift, diffusion


@start_sampler.register(AbstractModel)
def _start_sampler(model: AbstractModel, cfg: Config) -> Partial:
    del cfg
    return Partial(type(model).initial_state, model)
