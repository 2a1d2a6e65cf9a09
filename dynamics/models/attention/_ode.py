"""The attention model's ODE: its vector fields (the reduced form on the invariant manifold,
the full local-field form, the generated symbolic right-hand side), its starts and its risk,
registered with the generic engine (`headflow.dynamics.hooks`)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array

from ..._errors import ConfigError, HeadflowError
from ...hooks import (curve_keys, field_of, learning_curve_of, ode_info, ode_state, start_of,
                       state_risk)
from ..._model import Model
from ..._overlaps import Overlaps
from ..._risk import population_risk, risk_nodes
from ..._steps import StepSizes
from ...config import Config
from ...expectations import AbstractExpectation, AbstractNodes
from ...fields import MAX_GROUP, AbstractField
from ...ode import risk_rule, traced_values
from ._curve import PARAMS, LearningCurve
from ._full import FullField
from ._manifold import ManifoldField
from ._start import initial_overlaps


def resolved_rhs(cfg: Config, model: Model | None = None) -> str:
    """`[ode] rhs`, with `"auto"` resolved: the generated (symbolic) right-hand side for the
    manifold form of an activation that has a symbolic definition (several times faster at the
    same nodes), else autodiff."""
    if cfg.ode.rhs != "auto":
        return cfg.ode.rhs
    if cfg.ode.form != "manifold":
        return "autodiff"
    from ...symbolic import symbolic_names        # sympy: only where the rhs may be generated

    model = cfg.build_model() if model is None else model
    return "symbolic" if model.activation.name in symbolic_names() else "autodiff"


def field_class(cfg: Config, model: Model | None = None) -> Any:
    """The vector-field class selected by `[ode] form` and `[ode] rhs` (`"auto"` resolved by
    [`resolved_rhs`][]): [`ManifoldField`][], [`FullField`][] or
    [`headflow.dynamics.symbolic.SymbolicField`][] (imported, with sympy, only when selected)."""
    key = (cfg.ode.form, resolved_rhs(cfg, model))
    if key == ("manifold", "autodiff"):
        return ManifoldField
    if key == ("full", "autodiff"):
        return FullField
    if key == ("manifold", "symbolic"):
        from ...symbolic import SymbolicField

        return SymbolicField
    raise ConfigError(f"ode.rhs = {cfg.ode.rhs!r} is derived on the invariant manifold; "
                      "use ode.form = 'manifold'")


@field_of.register(Model)
def _field(model: Model, cfg: Config, backend: AbstractExpectation, *, sgd_noise: bool,
           max_group: int = MAX_GROUP) -> AbstractField:
    """The vector field selected by `[ode] form` and `[ode] rhs`."""
    return field_class(cfg, model).build(traced_values(model),
                                         traced_values(StepSizes.from_config(cfg.training)),
                                         backend, sgd_noise=sgd_noise, max_group=max_group)


@start_of.register(Model)
def _start(model: Model, cfg: Config) -> Overlaps:
    """The start described by `[ode] init`."""
    tr = cfg.training
    return eqx.filter_jit(initial_overlaps)(
        model, jr.key(cfg.sim.seed), cfg.sim.dim, init=str(cfg.ode.init), key_std=tr.init_key_std,
        value_std=tr.init_value_std, bias=tr.init_bias, manifold=cfg.ode.form == "manifold")


@ode_state.register(Model)
def _ode_state(model: Model, cfg: Config, state: Any) -> Overlaps:
    if not isinstance(state, Overlaps):     # the rest is checked by `build` after this
        raise HeadflowError(f"initial state: the attention model's state is an Overlaps, not "
                            f"a {type(state).__name__}")
    return state.on_manifold() if cfg.ode.form == "manifold" else state


def trajectory_risk(model: Model, ov: Overlaps, rule: AbstractExpectation | AbstractNodes, *,
                    manifold: bool) -> tuple[Array, Array]:
    """Population risk and its error along a trajectory (leaves `(T, ...)`; common random
    numbers)."""
    nodes = rule if isinstance(rule, AbstractNodes) else risk_nodes(model, rule)
    return _risk_along(traced_values(model), ov, nodes, manifold)


@eqx.filter_jit
def _risk_along(model, ov, nodes, manifold):
    return jax.lax.map(lambda oi: population_risk(model, oi, nodes, manifold=manifold), ov,
                       batch_size=8)


@state_risk.register(Model)
def _state_risk(model: Model, cfg: Config, states: Overlaps,
                backend: AbstractExpectation | None = None) -> tuple[Array, Array]:
    """On the ODE's own nodes and form for a trajectory of it (`backend`); else as SGD records
    it, `[sim] risk_samples` Monte Carlo nodes of seed `[ode] seed`, all overlaps."""
    manifold = backend is not None and cfg.ode.form == "manifold"
    if backend is None:
        backend = risk_rule(cfg)
    batch = states.b.shape[:-1]
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch):]), states)
    risk, err = trajectory_risk(model, flat, backend, manifold=manifold)
    return jnp.reshape(risk, batch), jnp.reshape(err, batch)


@ode_info.register(Model)
def _ode_info(model: Model, cfg: Config, field: AbstractField) -> dict[str, Any]:
    return {"rhs": resolved_rhs(cfg, model)}


@learning_curve_of.register(Model)
def _curve(model: Model, cfg: Config, **options: Any) -> LearningCurve:
    del model
    return LearningCurve.from_config(cfg, **options)


@curve_keys.register(Model)
def _curve_keys(model: Model, cfg: Config) -> tuple[str, ...]:
    del model, cfg
    return PARAMS
