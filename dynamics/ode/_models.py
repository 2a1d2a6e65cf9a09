"""Integrating the ODE of a model of the family (`docs/models.md`): the same integrator
([`integrate`][]) and the same error rule as the attention model, on the model's
[`dynamics.models.GramState`][]."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array

from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, MonteCarlo
from ..fields import AbstractField, ExactField, ModelField
from ..models import AbstractModel, GramState, model_risk
from ._integrate import traced_values


def model_field(cfg: Config, model: AbstractModel | None = None,
                backend: AbstractExpectation | None = None) -> AbstractField:
    """The drift of a model's config: closed forms (`ode.expectation = "exact"`) or the
    autodiff field on `backend`'s nodes (default: those of `[ode]`)."""
    from ._run import backend_of

    model = cfg.build_model() if model is None else model
    steps = traced_values(StepSizes.from_config(cfg.training))
    if cfg.ode.expectation == "exact":
        return ExactField.build(traced_values(model), steps, sgd_noise=cfg.ode.sgd_noise)
    backend = backend_of(cfg) if backend is None else backend
    return ModelField.build(traced_values(model), steps, backend, sgd_noise=cfg.ode.sgd_noise)


def model_start(cfg: Config, model: AbstractModel | None = None,
                key: Array | None = None, dim: int | None = None) -> GramState:
    """The start of `[ode] init`: one random initialization at `sim.dim` (`"random"`) or its
    D → ∞ limit (`"symmetric"`)."""
    model = cfg.build_model() if model is None else model
    if cfg.ode.init == "symmetric":
        return model.limit_state()
    key = jr.key(cfg.sim.seed) if key is None else key
    return eqx.filter_jit(model.initial_state)(key, cfg.sim.dim if dim is None else dim)


def risk_rule(cfg: Config) -> MonteCarlo:
    """The nodes of a model's risk where it has no closed form: `sim.risk_samples` Monte
    Carlo nodes of seed `ode.seed` (common random numbers across states)."""
    return MonteCarlo(samples=cfg.sim.risk_samples, seed=cfg.ode.seed)


def states_risk(model: AbstractModel, states: GramState, rule: MonteCarlo
                ) -> tuple[np.ndarray, np.ndarray]:
    """`ε_g` and its error at every state of `states` (any leading batch axes)."""
    batch = states.gram.shape[:-2]
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch):]), states)
    nodes = rule.nodes(model.n_rows)
    risk, err = _risks(traced_values(model), flat, nodes)
    return np.asarray(risk).reshape(batch), np.asarray(err).reshape(batch)


@eqx.filter_jit
def _risks(model, flat, nodes):
    return jax.lax.map(lambda s: model_risk(model, s, nodes), flat, batch_size=16)


def model_arrays(model: AbstractModel, state: GramState) -> dict[str, Any]:
    """The named order parameters (`Q`, `R`, ... for the committee) as numpy arrays."""
    return {k: np.asarray(v) for k, v in model.named(state).items()}


def as_float64(state: GramState) -> GramState:
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), state)
