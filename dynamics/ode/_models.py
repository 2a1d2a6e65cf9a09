"""Integrating the ODE of a model of the family (`docs/models.md`): the same integrator
([`integrate`][]) and the same error rule as the attention model, on the model's
[`headflow.dynamics.models.GramState`][]."""

from __future__ import annotations

from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, PyTree

from .._errors import ConfigError, require_x64
from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, MonteCarlo
from ..fields import MAX_GROUP, AbstractField, ModelField, exact_field
from ..models._base import GramState, ModelBase
from ..models._risk import model_risk
from ._backend import backend_of
from ._curve import curve_solver
from ._integrate import solve, traced_values


def model_field(cfg: Config, model: ModelBase | None = None,
                backend: AbstractExpectation | None = None, *,
                sgd_noise: bool | None = None, max_group: int = MAX_GROUP) -> AbstractField:
    """The drift of a model's config: closed forms (`ode.expectation = "exact"`) or the
    autodiff field on `backend`'s nodes (default: those of `[ode]`); the `η²` terms as
    `sgd_noise` says (default `[ode] sgd_noise`)."""
    model = cfg.build_model() if model is None else model
    steps = traced_values(StepSizes.from_config(cfg.training))
    noise = cfg.ode.sgd_noise if sgd_noise is None else sgd_noise
    if cfg.ode.expectation == "exact":
        return exact_field(traced_values(model), steps, sgd_noise=noise)
    return ModelField.build(traced_values(model), steps,
                            backend_of(cfg) if backend is None else backend, sgd_noise=noise,
                            max_group=max_group)



def init_start(model: ModelBase, init: Any, key: Array, dim: int) -> GramState:
    """The start that an `[ode] init` value names: one random initialization at `dim`
    (`"random"`), its D → ∞ limit (`"symmetric"`), or named order parameters (a table, or
    its [`frozen_init`][] form), the rest from the D → ∞ limit."""
    if isinstance(init, (dict, tuple)):
        return model.with_named(model.limit_state(), dict(init))
    if init == "symmetric":
        return model.limit_state()
    return model.initial_state(key, dim)


def named_start(cfg: Config, model: ModelBase | None = None) -> GramState | None:
    """The start of `[ode] init` when it names order parameters (the SDE's paths and SGD's
    seeds start there too); None for `"random"` and `"symmetric"`."""
    if not isinstance(cfg.ode.init, dict):
        return None
    model = cfg.build_model() if model is None else model
    return init_start(model, cfg.ode.init, jr.key(0), 1)


def frozen_init(init: Any) -> Any:
    """`[ode] init` as a hashable value (a table becomes sorted `(name, nested tuples)`)."""
    if not isinstance(init, dict):
        return init

    def freeze(v):
        return tuple(map(freeze, v)) if isinstance(v, (list, tuple)) else float(v)

    return tuple(sorted((k, freeze(v)) for k, v in init.items()))


def model_start(cfg: Config, model: ModelBase | None = None,
                key: Array | None = None, dim: int | None = None) -> GramState:
    """The start of `[ode] init`: one random initialization at `sim.dim` (`"random"`), its
    D → ∞ limit (`"symmetric"`), or named order parameters, the rest from that limit."""
    model = cfg.build_model() if model is None else model
    if cfg.ode.init == "symmetric" or isinstance(cfg.ode.init, dict):
        return init_start(model, cfg.ode.init, jr.key(0), 1)
    key = jr.key(cfg.sim.seed) if key is None else key
    return eqx.filter_jit(model.initial_state)(key, cfg.sim.dim if dim is None else dim)


def risk_rule(cfg: Config) -> MonteCarlo:
    """The nodes of a model's risk where it has no closed form: `sim.risk_samples` Monte
    Carlo nodes of seed `ode.seed` (common random numbers across states)."""
    return MonteCarlo(samples=cfg.sim.risk_samples, seed=cfg.ode.seed)


def states_risk(model: ModelBase, states: GramState, rule: MonteCarlo
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


def model_arrays(model: Any, state: PyTree) -> dict[str, Any]:
    """The named order parameters of any model (its `named` view: `Q`, `R`, ... for the
    committee, `m`, `q`, ... for the attention model) as numpy arrays."""
    return {k: np.asarray(v) for k, v in model.named(state).items()}


def as_float64(state: PyTree) -> PyTree:
    """Every leaf of a state as float64."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), state)


class ModelCurve(eqx.Module):
    """The risk on the save grid of a model of the family as a pure, differentiable function of
    its hyperparameters (the counterpart of [`headflow.dynamics.models.attention.LearningCurve`][]
    for `docs/models.md`): `curve(params)` with `params` a dict keyed by the config keys the model
    declares ([`headflow.dynamics.models.AbstractModel.hyperparameters`][]; the config's values for
    the others).
    Each key enters the model or the step sizes through its
    [`headflow.dynamics.models.Hyperparameter`][].

    Fixed at construction: the vector field (closed forms or nodes), the risk's nodes where it
    has no closed form, the random start's key at `[sim] dim` (its scales follow `params`), the
    integrator and the adjoint."""

    field: AbstractField
    nodes: Any
    ts: Array
    integrator: Any
    adjoint: Any
    key: Array
    base: dict[str, Array]
    selectors: tuple = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    init: Any = eqx.field(static=True)

    @classmethod
    def from_config(cls, cfg: Config, *, adjoint: str = "recursive",
                    checkpoints: int | None = 4096, times=None) -> ModelCurve:

        require_x64("the differentiable learning curve")
        model = cfg.build_model()
        field = model_field(cfg, model)
        integrator, adj, ts = curve_solver(cfg, field, adjoint, checkpoints, times)
        selectors = tuple(model.hyperparameters(cfg.training, field.steps))
        base = {h.key: jnp.asarray(h.get(field), jnp.float64) for h in selectors}
        return cls(field=field, nodes=risk_rule(cfg).nodes(model.n_rows), ts=ts,
                   integrator=integrator, adjoint=adj,
                   key=jr.key(cfg.sim.seed), base=base, selectors=selectors,
                   dim=int(cfg.sim.dim), init=frozen_init(cfg.ode.init))

    @property
    def keys(self) -> tuple[str, ...]:
        """The differentiable parameters."""
        return tuple(h.key for h in self.selectors)

    def defaults(self) -> dict[str, Array]:
        """The config's value of every differentiable parameter."""
        return dict(self.base)

    def field_and_start(self, params) -> tuple[AbstractField, GramState]:
        """The vector field and the start with `params` substituted."""

        unknown = sorted(set(params) - set(self.base))
        if unknown:
            raise ConfigError(f"learning curve: unknown parameter(s) {', '.join(unknown)}; "
                              f"differentiable ones: {', '.join(self.keys)}")
        field = self.field
        for h in self.selectors:
            if h.key in params:
                field = h.set(field, jnp.asarray(params[h.key], jnp.float64))
        model = field.model
        start = init_start(model, self.init, self.key, self.dim)
        return field, as_float64(start)

    def __call__(self, params) -> Array:
        """`ε_g` at `ts`; NaN everywhere when the solve failed."""
        field, start = self.field_and_start(params)
        sol = solve(dfx.ODETerm(field), start, self.ts, self.integrator, adjoint=self.adjoint)
        ok = sol.result == dfx.RESULTS.successful
        risk = jax.lax.map(lambda s: model_risk(field.model, s, self.nodes)[0], sol.ys,
                           batch_size=8)
        return jnp.where(ok, risk, jnp.nan)


def curve_from_config(cfg: Config, **options: Any) -> Any:
    """The differentiable learning curve of a config (`options`: `adjoint`, `checkpoints`,
    `times`): the model's `learning_curve` ([`ModelCurve`][] for a model of the family,
    [`headflow.dynamics.models.attention.LearningCurve`][] for the attention model)."""
    return cfg.build_model().learning_curve(cfg, **options)


def differentiable_keys(cfg: Config) -> tuple[str, ...]:
    """The config keys that the learning curve of `cfg` differentiates through."""
    return cfg.build_model().curve_keys(cfg)
