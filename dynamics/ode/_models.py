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
from .._exported import call_exported
from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, MonteCarlo
from ..fields import MAX_GROUP, AbstractField, ModelField, exact_field
from ..models._base import GramState, ModelBase
from ..models._params import CurvePoint
from ..models._risk import model_risk
from ..sharding import map_batched
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
    return _initial_state(traced_values(model), key,
                          model.start_dim(int(cfg.sim.dim if dim is None else dim)))


@eqx.filter_jit
def _initial_state(model: ModelBase, key: Array, dim: Any) -> GramState:
    # the model's float values traced, and D where `start_dim` traces it: one program for
    # every value of them
    return model.initial_state(key, dim)


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
    risk, err = call_exported(_risks, traced_values(model), flat, nodes)
    return np.asarray(risk).reshape(batch), np.asarray(err).reshape(batch)


@eqx.filter_jit
def _risks(model, flat, nodes):
    return map_batched(lambda s: model_risk(model, s, nodes), flat, 16)


def model_arrays(model: Any, state: PyTree) -> dict[str, Any]:
    """The named order parameters of any model (its `named` view: `Q`, `R`, ... for the
    committee, `m`, `q`, ... for the attention model) as numpy arrays."""
    return {k: np.asarray(v) for k, v in model.named(state).items()}


def as_float64(state: PyTree) -> PyTree:
    """Every leaf of a state as float64."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), state)


class FamilyStart(eqx.Module):
    """The start of a family model's learning curve: what `[ode] init` names (`init`, in its
    [`frozen_init`][] form), drawn with the model the curve substituted (its initial scales are
    its fields)."""

    init: Any = eqx.field(static=True)

    def __call__(self, model: ModelBase, key: Array, dim: int) -> GramState:
        return as_float64(init_start(model, self.init, key, dim))


class FamilyRisk(eqx.Module):
    """The risk of a family model's state on fixed `nodes` (exact where the model has a
    closed form): what a learning curve records."""

    nodes: Any

    def __call__(self, model: ModelBase, state: GramState) -> Array:
        return model_risk(model, state, self.nodes)[0]


def check_curve_params(params: Any, keys: tuple[str, ...], what: str) -> None:
    """One-line [`ConfigError`][]s for parameters a curve cannot take: a schedule the config
    does not set, a step size that the config's schedule replaces, or an unknown key."""
    for k in params:
        if k in keys:
            continue
        if k.endswith("_schedule") and k.removesuffix("_schedule") in keys:
            raise ConfigError(f"{what}: {k} given but the config sets no [training] "
                              f"{k.partition('.')[2]} (its knot times)")
        if f"{k}_schedule" in keys:
            raise ConfigError(f"{what}: {k} has no effect: the config sets {k}_schedule, "
                              "which replaces it")
    unknown = sorted(set(params) - set(keys))
    if unknown:
        raise ConfigError(f"{what}: unknown parameter(s) {', '.join(unknown)}; "
                          f"differentiable ones: {', '.join(keys)}")


class LearningCurve(eqx.Module):
    """The risk on the save grid as a pure, differentiable function of the hyperparameters,
    for every model (`docs/differentiable.md`): `curve(params)` integrates the configured ODE
    with the values `params` gives (a dict keyed by the config keys the model declares,
    `AbstractModel.hyperparameters`; the config's values for the others) and returns the risk
    at `ts`. Each key enters the vector field or the start through its
    [`headflow.dynamics.models.Hyperparameter`][]. Differentiable in `params` (`jax.grad`,
    `jax.jacfwd`) and jit-able (`eqx.filter_jit`); build it once per config with
    [`from_config`][].

    Fixed at construction: the vector field's nodes and the risk's nodes (common random
    numbers, so the curve is smooth in `params`), the random start's key at `[sim] dim` (its
    scales follow `params`), the integrator and the adjoint.

    **Fields:** `point` (the vector field and the start at the config's values,
    [`headflow.dynamics.models.CurvePoint`][]), `risk` (the model's `curve_risk`), `ts`,
    `integrator`, `adjoint`, `key`, `base` (the config's value of every parameter),
    `hyper` (the model's hyperparameters), `dim`."""

    point: CurvePoint
    risk: Any
    ts: Array
    integrator: Any
    adjoint: Any
    key: Array
    base: dict[str, Array]
    hyper: tuple = eqx.field(static=True)
    dim: int = eqx.field(static=True)

    @classmethod
    def from_config(cls, cfg: Config, *, adjoint: str = "recursive",
                    checkpoints: int | None = 4096, times=None) -> LearningCurve:
        """**Arguments:** `cfg` (the model, `[training]`, `[ode]` and the `[output]` grid, or
        `times`), `adjoint` (one of [`ADJOINTS`][headflow.dynamics.ode.ADJOINTS]),
        `checkpoints` (of the recursive adjoint: with at least as many as the solver takes
        steps, nothing is recomputed; None: diffrax's `log(max_steps)`). The blow-up event of
        the integrator is kept for the recursive adjoint and dropped for backsolve (which
        cannot take events)."""
        require_x64("the differentiable learning curve")
        model = cfg.build_model()
        field = model.vector_field(cfg, None, sgd_noise=cfg.ode.sgd_noise)
        integrator, adj, ts = curve_solver(cfg, field, adjoint, checkpoints, times)
        point = CurvePoint(field=field, start=model.curve_start(cfg))
        hyper = tuple(model.hyperparameters(cfg, field.steps))
        base = {h.key: jnp.asarray(h.get(point), jnp.float64) for h in hyper}
        return cls(point=point, risk=model.curve_risk(cfg), ts=ts, integrator=integrator,
                   adjoint=adj, key=jr.key(cfg.sim.seed), base=base, hyper=hyper,
                   dim=int(cfg.sim.dim))

    @property
    def keys(self) -> tuple[str, ...]:
        """The differentiable parameters."""
        return tuple(h.key for h in self.hyper)

    def defaults(self) -> dict[str, Array]:
        """The config's value of every differentiable parameter (the schedules' knot values
        where the config sets them, and then not the step sizes they replace)."""
        return dict(self.base)

    def point_at(self, params) -> CurvePoint:
        """The vector field and the start with `params` substituted."""
        check_curve_params(params, self.keys, "learning curve")
        point = self.point
        for h in self.hyper:
            if h.key in params:
                point = h.set(point, jnp.asarray(params[h.key], jnp.float64))
        return point

    def field_and_start(self, params) -> tuple[AbstractField, Any]:
        """The vector field and the initial state with `params` substituted."""
        point = self.point_at(params)
        return point.field, point.start(point.model, self.key, self.dim)

    def trajectory(self, params) -> tuple[Any, Array]:
        """The solution on `ts` (leaves `(T, ...)`) and whether the solve succeeded."""
        _, ys, ok = self._solve(params)
        return ys, ok

    def _solve(self, params):
        field, start = self.field_and_start(params)
        sol = solve(dfx.ODETerm(field), start, self.ts, self.integrator, adjoint=self.adjoint)
        return field, sol.ys, sol.result == dfx.RESULTS.successful

    def __call__(self, params) -> Array:
        """The risk at `ts`; NaN everywhere when the solve failed (blow-up, NaN,
        `max_steps`)."""
        field, ys, ok = self._solve(params)
        risk = map_batched(lambda s: self.risk(field.model, s), ys, 8)
        return jnp.where(ok, risk, jnp.nan)


def learning_curve(params, cfg: Config, *, adjoint: str = "recursive") -> Array:
    """The risk on `cfg`'s save grid as a pure, differentiable function of `params` (a dict
    of the model's differentiable config keys; the config gives the others):

    ```python
    cfg = d.load_config("validation/configs/demo.toml")
    risk_T = lambda p: learning_curve(p, cfg)[-1]
    jax.grad(risk_T)({"training.lr": 1.0, "prior.amplitude": 3.0})
    ```

    For repeated calls build [`LearningCurve.from_config`][] once and `eqx.filter_jit` it."""
    return LearningCurve.from_config(cfg, adjoint=adjoint)(params)


def curve_from_config(cfg: Config, **options: Any) -> LearningCurve:
    """The differentiable learning curve of a config (`options`: `adjoint`, `checkpoints`,
    `times`; [`LearningCurve.from_config`][])."""
    return LearningCurve.from_config(cfg, **options)


def differentiable_keys(cfg: Config) -> tuple[str, ...]:
    """The config keys that the learning curve of `cfg` differentiates through (the model's
    `hyperparameters`)."""
    return tuple(h.key for h in cfg.build_model().hyperparameters(
        cfg, StepSizes.from_config(cfg.training)))
